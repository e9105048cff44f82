"""``mpirl init``: the starter role map it writes passes ``mpirl check`` as it is, is sized to the
GPUs and nodes asked for (or found), and is refused (exit 2, nothing written) for a file that
exists, an unknown task or a folder that holds no model."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from launch import cli, preflight
from roles.tasks import TASKS

pytestmark = pytest.mark.timeout(120)


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture
def gsm8k_files(tmp_path) -> tuple[str, str]:
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(6)]
    paths = []
    for name, part in (("train.jsonl", rows[:4]), ("test.jsonl", rows[4:])):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in part))
        paths.append(str(tmp_path / name))
    return paths[0], paths[1]


def init(capsys, out, model, *extra) -> tuple[int, str, str]:
    return run_cli(["init", out, "--model", model, *extra], capsys)


def test_a_cpu_file_passes_check_as_it_is_data_included(dummy_model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = init(capsys, "arith.yaml", dummy_model, "--task", "arith", "--gpus", "0", "--cores", "2")
    assert code == 0, err
    assert "arith.yaml: 4 ranks" in out
    code, out, err = run_cli(["check", "arith.yaml"], capsys)  # the data too: the task's prompts, the tokenizer
    assert code == 0, err
    cfg = preflight.load("arith.yaml")
    assert cfg.world.counts() == {"controller": 1, "generator": 1, "reward": 1, "trainer": 1}
    assert (cfg.world.generator.engine, cfg.model.dtype, cfg.rollout.mode) == ("torch", "float32", "batch")
    assert [c.name for c in cfg.reward.components] == ["arith_exact"]  # the task's default, written out
    assert cfg.eval.enabled and cfg.run.out == "runs/arith"


def test_every_value_says_why(dummy_model, tmp_path, capsys):
    out = tmp_path / "starter.yaml"
    assert init(capsys, out, dummy_model, "--task", "arith", "--gpus", "8", "--nodes", "2")[0] == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# Written by mpirl init")
    values = [i for i, line in enumerate(lines) if re.match(r"  \w+: \S", line)]
    assert len(values) > 20
    for i in values:  # a comment on the line, or on the line above when the value is long
        assert " # " in lines[i] or lines[i - 1].strip().startswith("#"), lines[i]


def test_the_gpus_torch_finds_size_the_file(dummy_model, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    out = tmp_path / "found.yaml"
    code, _, err = init(capsys, out, dummy_model, "--task", "arith")
    assert code == 0, err
    cfg = preflight.load(out)
    assert (cfg.world.generator.ranks, cfg.world.trainer.ranks, cfg.world.size) == (2, 2, 6)
    assert (cfg.world.generator.engine, cfg.model.dtype, cfg.weights.transport) == ("vllm", "bfloat16", "torch")
    assert cfg.rollout.mode == "stream"  # generators on their own GPUs: the stream pays (docs/log.md)
    assert "torch.cuda.device_count()" in out.read_text().splitlines()[0]


@pytest.mark.parametrize(
    "gpus, nodes, generators, trainers, world",
    [
        (1, 1, 1, 1, 4),  # one GPU, shared by a generator and a trainer
        (8, 1, 4, 4, 10),  # one node: every GPU a model rank, controller and reward on top
        (8, 2, 6, 8, 16),  # across nodes: 8 ranks a node; the trainers fill node 1
        (8, 4, 14, 16, 32),  # examples/math/qwen2.5-7b-4nodes.yaml's layout
        (4, 3, 4, 6, 12),
        (1, 4, 2, 2, 6),  # too few GPUs to give the controller and reward a slot each: on top
    ],
)
def test_gpus_and_nodes_size_the_ranks(dummy_model, tmp_path, capsys, gpus, nodes, generators, trainers, world):
    out = tmp_path / "cluster.yaml"
    code, printed, err = init(capsys, out, dummy_model, "--task", "arith", "--gpus", gpus, "--nodes", nodes)
    assert code == 0, err
    assert run_cli(["check", out, "--no-data"], capsys)[0] == 0
    cfg = preflight.load(out)
    assert (cfg.world.generator.ranks, cfg.world.trainer.ranks, cfg.world.size) == (generators, trainers, world)
    model_ranks = generators + trainers
    assert model_ranks <= max(gpus * nodes, 2)  # a GPU each (the single GPU is shared)
    assert cfg.rollout.prompts_per_step % trainers == 0 and cfg.rollout.prompts_per_step >= 8 * min(trainers, 8)
    header = out.read_text()
    assert f"mpirun -n {world} " in header
    if nodes > 1 and gpus * nodes >= 6:  # a rank per GPU, and the launch lines place them so
        assert world == gpus * nodes
        assert f"--map-by ppr:{gpus}:node" in header and f"--ntasks-per-node {gpus}" in header


def test_more_cores_more_cpu_generators(dummy_model, tmp_path, capsys):
    sizes = {}
    for cores in (2, 8, 64):
        out = tmp_path / f"cores{cores}.yaml"
        assert init(capsys, out, dummy_model, "--task", "arith", "--gpus", "0", "--cores", cores)[0] == 0
        sizes[cores] = preflight.load(out).world.generator.ranks
    assert sizes == {2: 1, 8: 2, 64: 4}


def test_a_file_task_takes_its_files_and_default_reward(dummy_model, gsm8k_files, tmp_path, capsys):
    train, test = gsm8k_files
    out = tmp_path / "gsm8k.yaml"
    args = ["--task", "gsm8k", "--train-files", train, "--eval-files", test, "--gpus", "8"]
    code, _, err = init(capsys, out, dummy_model, *args)
    assert code == 0, err
    assert run_cli(["check", out, "--no-data"], capsys)[0] == 0
    cfg = preflight.load(out)
    assert (cfg.task.train_files, cfg.task.eval_files) == ([train], [test])
    assert [c.name for c in cfg.reward.components] == ["gsm8k"]
    assert cfg.eval.enabled


def test_a_task_of_ones_own_and_a_named_reward(dummy_model, tmp_path, capsys):
    out = tmp_path / "own.yaml"
    code, _, err = init(capsys, out, dummy_model, "--task", "support.task_plugins:Countdown", "--reward", "exact")
    assert code == 0, err
    assert yaml.safe_load(out.read_text())["reward"]["components"] == [{"name": "exact"}]


def refused(capsys, out, *argv) -> str:
    code, _, err = run_cli(["init", out, *argv], capsys)
    assert code == 2
    assert err.startswith("mpirl: init: ") and len(err.strip().splitlines()) == 1
    return err


def test_an_existing_file_is_kept_unless_forced(dummy_model, tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    out.write_text("# my own\n")
    err = refused(capsys, out, "--task", "arith", "--model", dummy_model, "--gpus", "0")
    assert "exists" in err and "--force" in err and out.read_text() == "# my own\n"
    assert init(capsys, out, dummy_model, "--task", "arith", "--gpus", "0", "--force")[0] == 0
    assert preflight.load(out).task.name == "arith"


def test_an_unknown_task_is_refused_naming_the_built_ins(dummy_model, tmp_path, capsys):
    out = tmp_path / "x.yaml"
    err = refused(capsys, out, "--task", "gsm9k", "--model", dummy_model, "--gpus", "0")
    assert "'gsm9k'" in err and all(name in err for name in TASKS)
    assert not out.exists()


@pytest.mark.parametrize("folder", ["missing", "no_config"])
def test_a_model_path_that_is_not_a_model_folder_is_refused(tmp_path, capsys, folder):
    (tmp_path / "no_config").mkdir()
    (tmp_path / "no_config" / "model.safetensors").write_bytes(b"")
    out = tmp_path / "x.yaml"
    err = refused(capsys, out, "--task", "arith", "--model", tmp_path / folder, "--gpus", "0")
    assert f"--model '{tmp_path / folder}'" in err
    assert ("no model folder" if folder == "missing" else "no config.json") in err
    assert not out.exists()


@pytest.mark.parametrize(
    "args, said",
    [
        (["--task", "gsm8k"], "--train-files"),  # a file task without its files
        (["--task", "arith", "--train-files", "t.jsonl"], "reads no files"),
        (["--task", "dataset", "--train-files", "t.jsonl"], "no default reward"),
        (["--task", "arith", "--nodes", "2", "--gpus", "0"], "--nodes 2"),
        (["--task", "arith", "--reward", "nonesuch"], "nonesuch"),  # the schema's refusal, not a traceback
    ],
)
def test_what_cannot_make_a_file_is_refused(dummy_model, tmp_path, capsys, monkeypatch, args, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text('{"prompt": "hi"}\n')
    err = refused(capsys, "x.yaml", "--model", dummy_model, "--gpus", "0", *args)
    assert said in err
    assert not (tmp_path / "x.yaml").exists()


def test_a_hub_name_in_the_local_cache_is_written_as_the_name(dummy_model, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    from support.hub_cache import cache_repo, folder_files

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    cache_repo(cache, "tiny/starter", folder_files(dummy_model))
    out = tmp_path / "hub.yaml"
    code, _, err = init(capsys, out, "tiny/starter", "--task", "arith", "--gpus", "0")
    assert code == 0, err
    assert "path: tiny/starter" in out.read_text()
    code, _, err = init(capsys, tmp_path / "missing.yaml", "nobody/absent", "--task", "arith", "--gpus", "0")
    assert code == 2 and "nobody/absent" in err and not (tmp_path / "missing.yaml").exists()
