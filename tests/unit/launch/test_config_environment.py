"""launch/config.py: the environment: section of a role map, and what it may be combined with."""

from __future__ import annotations

import copy

import pytest

from launch import config

pytestmark = pytest.mark.timeout(60)

PLUGINS = "support.environment_plugins"


def _with_environment(base, environment, **sections):
    raw = copy.deepcopy(base)
    raw["rollout"]["mode"] = "stream"
    raw["environment"] = environment
    for name, section in sections.items():
        raw[name] = {**raw.get(name, {}), **section}
    return raw


def test_an_environment_is_validated_by_its_own_config(base_config):
    cfg = config.parse(_with_environment(base_config, {"name": "tools", "tools": ["calculator"], "max_turns": 3}))
    assert cfg.environment.max_turns == 3 and cfg.environment.tools[0].name == "calculator"
    assert cfg.longest_response() == 4 * 3  # max_new_tokens per turn, max_turns turns
    cfg = config.parse(_with_environment(base_config, {"name": "tools", "max_episode_tokens": 50}))
    assert cfg.longest_response() == 50
    assert config.parse(base_config).environment is None


@pytest.mark.parametrize(
    "environment, sections, named",
    [
        ({"name": "tools", "max_turns": 0}, {}, "environment.max_turns"),
        ({"name": "tools", "tools": ["abacus"]}, {}, "environment.tools[0].name: unknown tool 'abacus'"),
        ({"name": "tools", "tools": [f"{PLUGINS}:BadSchemaTool"]}, {}, "environment.tools[0].name"),
        ({"name": "tools", "tools": [{"name": "python", "options": {"timeot_s": 1}}]}, {}, "timeot_s"),
        ({"name": "tools", "tool_format": "xml"}, {}, "environment.tool_format"),
        ({"name": "tools", "turns": 2}, {}, "environment.turns: unknown key"),
        ({"name": "maze"}, {}, "unknown environment 'maze'"),
        ({"name": f"{PLUGINS}:NoStepEnv"}, {}, "step"),
        ({"name": "tools"}, {"rollout": {"mode": "batch"}}, "rollout.mode: stream"),
        (
            {"name": "tools"},
            {"algorithm": {"advantage": "gae"}, "world": {"critic": 1}},
            "advantage gae is not supported",
        ),
    ],
)
def test_a_bad_environment_is_named_before_any_work(base_config, environment, sections, named):
    with pytest.raises(config.ConfigError, match=named.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        config.parse(_with_environment(base_config, environment, **sections))
