"""The recipes a GPU user starts from pass ``mpirl check``, data and all, against stand-ins.

The real model folders and data files are site paths; here each recipe's ``model.path`` is
pointed at a stand-in folder (a config.json of the real model's context length and a BPE
tokenizer with a chat template, no weights) and its data files at small files of the same
format, and ``mpirl check`` must accept the rest of the recipe as written.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from launch import preflight
from support.model_folders import write_placeholder_weights
from support.mpi_helpers import REPO

RECIPES = {
    "examples/gsm8k/qwen2.5-0.5b-1node.yaml": ("gsm8k", 32768),
    "examples/math/qwen2.5-7b-4nodes.yaml": ("math", 32768),
    "examples/gsm8k/qwen2.5-0.5b-reward-model.yaml": ("gsm8k", 32768),
    "examples/tools/qwen2.5-1.5b-calculator.yaml": ("gsm8k", 32768),
}


def _rows(kind: str, n: int) -> list[dict]:
    if kind == "gsm8k":
        return [
            {
                "question": f"Tom has {i} apples and eats 1. How many are left?",
                "answer": f"{i} - 1 = {i - 1}\n#### {i - 1}",
            }
            for i in range(2, 2 + n)
        ]
    return [
        {"problem": f"What is $\\frac{{{i}}}{{2}}$?", "solution": f"It is $\\boxed{{\\frac{{{i}}}{{2}}}}$."}
        for i in range(1, 1 + n)
    ]


def _write(path, rows):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _tool_specs() -> list[str]:
    """The built-in tools' specs as the template writes them: a real tokenizer's merges cover
    such text, and the stand-in's should too, or its prompts would be many times longer."""
    from roles.environments.tools import tool_class

    return [json.dumps(tool_class(name).spec()["function"]) for name in ("calculator", "python")] * 5


@pytest.fixture(scope="module")
def stand_in_model(tmp_path_factory):
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

    d = tmp_path_factory.mktemp("stand_in")
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 32768}))
    write_placeholder_weights(d)
    # The tool-calling template (Qwen2.5's shape): it renders plain prompts as the plain one does.
    texts = ["Tom has 3 apples and eats 1.", "What is \\frac{1}{2}?", *_tool_specs()]
    save_bpe_chat_tokenizer(d, texts, vocab_size=600, tools=True)
    return d


@pytest.fixture(scope="module")
def stand_in_reward_model(tmp_path_factory):
    """A reward model's config.json (one label) and a tokenizer: what the role map's check reads."""
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

    d = tmp_path_factory.mktemp("stand_in_rm")
    config = {"model_type": "qwen3", "architectures": ["Qwen3ForSequenceClassification"], "id2label": {"0": "LABEL_0"}}
    (d / "config.json").write_text(json.dumps(config))
    save_bpe_chat_tokenizer(d, ["Tom has 3 apples and eats 1."], vocab_size=300)
    return d


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_passes_mpirl_check(recipe, stand_in_model, stand_in_reward_model, tmp_path):
    kind, _ = RECIPES[recipe]
    raw = yaml.safe_load((REPO / recipe).read_text())
    raw["model"]["path"] = str(stand_in_model)
    for component in raw.get("reward", {}).get("components", []):
        if component.get("name") == "model":
            component["path"] = str(stand_in_reward_model)
    for key in ("train_files", "eval_files"):
        stand_ins = []
        for original in raw["task"][key]:
            path = tmp_path / f"{key}_{len(stand_ins)}{original[original.rfind('.') :]}"
            _write(path, _rows(kind, 30))
            stand_ins.append(str(path))
        raw["task"][key] = stand_ins
    raw["run"]["out"] = str(tmp_path / "out")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, "-m", "launch.cli", "check", str(path)], capture_output=True, text=True, cwd=REPO, timeout=180
    )
    assert out.returncode == 0, out.stderr
    assert f"task {kind}: 30 train / 30 eval examples" in out.stdout
    cfg = preflight.load(path)
    assert cfg.model.dtype == "bfloat16" and cfg.world.generator.engine == "vllm"
    assert cfg.eval.enabled and cfg.world.size == sum(cfg.world.counts().values())


def test_the_slurm_script_runs_the_multinode_recipe():
    script = (REPO / "examples/slurm/math-7b.sbatch").read_text()
    raw = yaml.safe_load((REPO / "examples/math/qwen2.5-7b-4nodes.yaml").read_text())
    world = raw["world"]
    ranks = world["controller"] + world["generator"]["ranks"] + world["reward"] + world["trainer"]
    nodes = int(next(line.split("=")[1] for line in script.splitlines() if line.startswith("#SBATCH --nodes=")))
    per_node = int(
        next(line.split("=")[1] for line in script.splitlines() if line.startswith("#SBATCH --ntasks-per-node="))
    )
    assert ranks == nodes * per_node  # one rank per GPU, exactly the allocation
    assert "examples/math/qwen2.5-7b-4nodes.yaml" in script and "srun" in script and "mpirl check" in script
    assert subprocess.run(["bash", "-n", str(REPO / "examples/slurm/math-7b.sbatch")]).returncode == 0


@pytest.mark.parametrize("srun_exit,requeued", [(75, True), (0, False), (1, False)])
def test_the_resumable_slurm_script_requeues_only_a_checkpointed_stop(tmp_path, srun_exit, requeued):
    # srun, mpirl and scontrol stand-ins on PATH: the script's own logic is what runs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", f"exit {srun_exit}"), ("mpirl", "exit 0"), ("scontrol", 'echo "$@" >> "$LOG"')):
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "scontrol.log"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), "SLURM_JOB_ID": "42", "CONFIG": "x.yaml"}
    script = REPO / "examples/slurm/resumable.sbatch"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == srun_exit
    assert (log.read_text().split() == ["requeue", "42"]) if requeued else not log.exists()
    text = script.read_text()
    assert "#SBATCH --signal=USR1@" in text and "#SBATCH --requeue" in text


def test_the_tools_recipe_names_a_model_whose_template_cannot_render_tools(stand_in_model, tmp_path):
    import shutil

    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

    plain = tmp_path / "plain"
    shutil.copytree(stand_in_model, plain)
    save_bpe_chat_tokenizer(plain, ["Tom has 3 apples and eats 1."], vocab_size=300)  # no tools in its template
    raw = yaml.safe_load((REPO / "examples/tools/qwen2.5-1.5b-calculator.yaml").read_text())
    raw["model"]["path"] = str(plain)
    for key in ("train_files", "eval_files"):
        raw["task"][key] = [str(tmp_path / f"{key}.jsonl")]
        _write(tmp_path / f"{key}.jsonl", _rows("gsm8k", 5))
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, "-m", "launch.cli", "check", str(path)], capture_output=True, text=True, cwd=REPO, timeout=180
    )
    assert out.returncode == 2
    assert f"environment: model.path {plain}: the chat template does not render tools" in out.stderr
