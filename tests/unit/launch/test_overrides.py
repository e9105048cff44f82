"""launch/overrides.py and the entry points that take it: dotted KEY=VALUE overrides, validated
as the file's own lines are, applied by mpirl check and run, and recorded as what ran."""

from __future__ import annotations

import shlex

import pytest
import yaml

from launch import cli
from launch.overrides import OverrideError, apply_overrides, parse_overrides
from launch.run_folder import record_role_map

pytestmark = pytest.mark.timeout(60)


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_values_parse_as_yaml_and_land_at_their_dotted_keys():
    data = {"rollout": {"temperature": 1.0}, "world": {"generator": 1}, "eval": None}
    items = ["rollout.temperature=0.7", "run.out=runs/t2", "task.train_files=[a.parquet, b.jsonl]",
             "eval.every_steps=5", "world.generator={ranks: 2, engine: vllm}", "rollout.top_p=1",
             "model.lora=null"]  # fmt: skip
    out = apply_overrides(data, parse_overrides(items))
    assert out["rollout"] == {"temperature": 0.7, "top_p": 1}
    assert out["run"] == {"out": "runs/t2"} and out["task"]["train_files"] == ["a.parquet", "b.jsonl"]
    assert out["eval"] == {"every_steps": 5} and out["world"]["generator"] == {"ranks": 2, "engine": "vllm"}
    assert out["model"]["lora"] is None
    assert data["rollout"]["temperature"] == 1.0  # the file's data is left as it was


@pytest.mark.parametrize("item", ["rollout.temperature", "=3", "rollout..temperature=1", "a.=1"])
def test_malformed_overrides_are_named(item):
    with pytest.raises(OverrideError, match="write KEY=VALUE"):
        parse_overrides([item])


def test_a_key_under_a_value_that_is_not_a_section_is_named():
    with pytest.raises(OverrideError, match=r"world.generator is 1 in the file, not a section"):
        apply_overrides({"world": {"generator": 1}}, parse_overrides(["world.generator.ranks=2"]))


def test_mpirl_check_applies_overrides_and_names_a_bad_one(base_config, write_config, capsys):
    path = write_config(base_config)
    code, out, _ = run_cli(["check", str(path), "--no-data", "world.generator=2", "rollout.temperature=0.5"], capsys)
    assert code == 0 and "valid; 5 ranks" in out
    code, _, err = run_cli(["check", str(path), "--no-data", "rollout.temprature=0.5"], capsys)
    assert code == 2 and "rollout.temprature" in err
    code, _, err = run_cli(["check", str(path), "--no-data", "rollout.temperature=-1"], capsys)
    assert code == 2 and "rollout.temperature" in err
    code, _, err = run_cli(["check", str(path), "--no-data", "rollout"], capsys)
    assert code == 2 and "override 'rollout': write KEY=VALUE" in err


def test_mpirl_run_passes_the_overrides_to_every_rank(base_config, write_config, capsys):
    path = write_config(base_config)
    code, out, err = run_cli(["run", str(path), "--dry-run", "world.generator=2", "run.steps=3"], capsys)
    assert code == 0, err
    words = shlex.split(out.strip())
    assert words[-3:] == [str(path), "world.generator=2", "run.steps=3"] and words[words.index("-n") + 1] == "5"


def test_the_run_folder_records_the_merged_role_map(base_config, write_config, tmp_path):
    path = write_config(base_config)
    target = record_role_map(path, tmp_path, ["rollout.temperature=0.5", "world.generator=2"])
    text = target.read_text()
    assert text.startswith(f"# {path}, with the command line's overrides: rollout.temperature=0.5 world.generator=2")
    saved = yaml.safe_load(text)
    assert saved["rollout"]["temperature"] == 0.5 and saved["world"]["generator"] == 2
    assert saved["model"] == base_config["model"]
