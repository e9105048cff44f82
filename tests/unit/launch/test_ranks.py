"""launch.ranks: the rank -> role table of ``mpirl check`` and the lines a launch prints."""

from __future__ import annotations

import copy

from launch import config, ranks


def test_valid_config_and_rank_table(base_config):
    cfg = config.parse(base_config)
    assert cfg.world.size == 4
    assert cfg.world.roles_by_rank() == ["controller", "generator", "reward", "trainer"]
    table = ranks.rank_table(cfg).splitlines()
    assert table[0].split() == ["rank", "role", "index"]
    assert [row.split() for row in table[1:]] == [
        ["0", "controller", "0"],
        ["1", "generator", "0"],
        ["2", "reward", "0"],
        ["3", "trainer", "0"],
    ]


def test_the_rank_ranges_line_names_every_rank_once(base_config):
    raw = copy.deepcopy(base_config)
    raw["world"] = {"controller": 1, "generator": {"ranks": 3}, "reward": 1, "trainer": 2}
    raw["rollout"]["prompts_per_step"] = 4
    assert ranks.rank_ranges(config.parse(raw)) == "0 controller, 1-3 generator, 4 reward, 5-6 trainer"


def test_the_placement_line_groups_each_nodes_ranks_and_roles(base_config):
    raw = copy.deepcopy(base_config)
    raw["world"] = {"controller": 1, "generator": {"ranks": 3}, "reward": 1, "trainer": 2}
    raw["rollout"]["prompts_per_step"] = 4
    cfg = config.parse(raw)
    # Round-robin mapping (--map-by node) interleaves a node's ranks.
    hosts = ["a", "b", "a", "b", "a", "b", "a"]
    assert ranks.placement(cfg, hosts) == (
        "a: 0,2,4,6 controller, generator, reward, trainer; b: 1,3,5 generator, trainer"
    )
    assert ranks.placement(cfg, ["a"] * 4 + ["b"] * 3) == "a: 0-3 controller, generator; b: 4-6 reward, trainer"
