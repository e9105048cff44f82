"""Role maps fuzzed (Hypothesis): every one is valid, or refused with a ConfigError naming a field.

Valid role maps are mutated the ways a user gets them wrong: a value of the wrong type, out of
range, non-finite, an odd string; a key unknown or missing; a section nested in a list or
replaced by a scalar. ``preflight.parse`` (the schema's checks, then the machine's) must never
raise anything but ``ConfigError`` and the error must name where the problem is. The file-level
checks (bytes that are not UTF-8, deep nesting, alias bombs, a huge file) are
``test_role_map_file.py``'s.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch import config, preflight
from launch.role_map_file import load_yaml

# One role map per shape the schema has: the 4-rank default, sharded trainers with two
# generators, the colocated baseline, one with eval, checkpoints and logging.
VALID = [
    {
        "world": {"controller": 1, "generator": 1, "reward": 1, "trainer": 1},
        "task": {"name": "arith"},
        "rollout": {"prompts_per_step": 4, "samples_per_prompt": 2, "max_new_tokens": 4},
        "algorithm": {"loss": "aipo", "rho": 4.0, "lr": 3.0e-5},
        "run": {"steps": 3, "max_staleness": 1, "seed": 0, "out": "runs/test"},
    },
    {
        "world": {"controller": 1, "generator": {"ranks": 2, "engine": "torch"}, "reward": 2, "trainer": 2},
        "task": {"name": "arith", "max_operand": 50},
        "rollout": {"prompts_per_step": 8, "samples_per_prompt": 4, "max_new_tokens": 6, "temperature": 0.7},
        "algorithm": {"loss": "grpo", "kl_coef": 0.01, "lr": 1.0e-5, "grad_clip": 1.0},
        "eval": {"every_steps": 2, "samples": 4, "before_training": True},
        "checkpoint": {"every_steps": 2, "keep_last": 2},
        "logging": {"samples_per_step": 2, "progress_every_s": 5.0},
        "weights": {"transport": "mpi"},
        "run": {"steps": 4, "max_staleness": 0, "out": "runs/test2", "resume": "never"},
    },
    {
        "world": {"controller": 1, "colocated": 2, "reward": 1, "generator": 0, "trainer": 0},
        "task": {"name": "arith"},
        "rollout": {"prompts_per_step": 4, "samples_per_prompt": 2, "max_new_tokens": 4},
        "run": {"steps": 2, "max_staleness": 0, "out": "runs/test3"},
    },
]

# Values of every kind a YAML file can hold, weighted towards the ones that break validators.
ODD_STRINGS = st.sampled_from(["", " ", "0", "-1", "1e400", "nan", "inf", "true", "null", "~", "é", "\x00", "a" * 5000])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-300, 1e300]),
    st.text(max_size=20),
    ODD_STRINGS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(data, prefix=()):
    """Every key path into ``data`` (mappings and lists)."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        yield prefix + (key,)
        yield from paths(value, prefix + (key,))


@st.composite
def mutated_role_maps(draw, model_path: str):
    data = copy.deepcopy(draw(st.sampled_from(VALID)))
    data["model"] = {"path": model_path, "dtype": draw(st.sampled_from(["float32", "bfloat16"]))}
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        all_paths = list(paths(data))
        path = draw(st.sampled_from(all_paths)) if all_paths else ()
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1] if path else None
        kind = draw(st.sampled_from(["replace", "delete", "unknown key", "wrap in list", "wrap in map"]))
        if last is None or not isinstance(parent, dict | list):
            continue
        if kind == "replace":
            parent[last] = draw(VALUES)
        elif kind == "delete" and isinstance(parent, dict):
            del parent[last]
        elif kind == "unknown key" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["typo", "stepz", "", "1"]))] = draw(SCALARS)
        elif kind == "wrap in list":
            parent[last] = [parent[last]]
        elif kind == "wrap in map":
            parent[last] = {"value": parent[last]}
    return data


SECTIONS = r"\b(world|model|rollout|algorithm|task|reward|eval|weights|checkpoint|logging|run)\b"


def names_a_field(message: str, raw=None) -> bool:
    """A refusal names where: a section or field (``run.steps: ...``), a key of the input
    (``typo: unknown key``), or the file's shape (``a role map is ...``)."""
    text = message.removeprefix("<config>: ")
    if re.search(SECTIONS, text) or "role map" in text:
        return True
    keys = {str(p[-1]) for p in paths(raw)} if isinstance(raw, dict | list) else set()
    return any(text.startswith((f"{k}:", f"{k!r}:", f"{k}[", f"{k!r}[")) for k in keys)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import save_char_tokenizer

    d = tmp_path_factory.mktemp("fuzz") / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 64}))
    save_char_tokenizer(d, ALPHABET)
    return str(d)


def test_the_seed_role_maps_are_valid(model_path):
    for data in VALID:
        preflight.parse({**copy.deepcopy(data), "model": {"path": model_path}})


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_role_map_is_valid_or_refused_naming_a_field(model_path, data):
    raw = data.draw(mutated_role_maps(model_path))
    try:
        preflight.parse(raw)
    except config.ConfigError as e:
        assert names_a_field(str(e), raw), str(e)
        assert "Traceback" not in str(e)


@settings(max_examples=300, deadline=None)
@given(value=VALUES)
def test_anything_at_the_top_level_is_refused_cleanly(value):
    try:
        preflight.parse(value)
    except config.ConfigError as e:
        assert names_a_field(str(e), value), str(e)


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", "1e999"])
def test_non_finite_numbers_are_refused_where_a_number_is_read(tmp_path, model_path, text):
    for field in ("algorithm: {lr: %s}", "run: {steps: 3, timeout_s: %s}", "rollout: {temperature: %s}"):
        base = copy.deepcopy(VALID[0])
        section, _, rest = (field % text).partition(": ")
        raw = load_yaml(f"{section}: {rest}")
        base.setdefault(section, {}).update(raw[section])
        base["model"] = {"path": model_path}
        with pytest.raises(config.ConfigError, match=rf"{section}\.\w+: .*finite"):
            config.parse(base)
