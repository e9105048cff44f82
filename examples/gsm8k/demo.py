"""`make demo-gsm8k`: the real pipeline on CPU, with nothing arithmetic-specific in it.

1. writes a synthetic GSM8K-format dataset (word problems, answers ending in ``#### N``) as
   Parquet and JSON Lines,
2. trains a byte-level BPE tokenizer with a chat template, builds a small Llama over it and
   warm-starts it briefly (SFT on chat-rendered prompts),
3. runs asynchronous RL through mpirun with the ``gsm8k`` task and reward and periodic
   held-out evaluation (greedy pass@1, mean@4, pass@4),
4. prints a summary and writes runs/<name>/summary.json: the controller's figures plus the
   held-out greedy accuracy before and after, measured offline on the saved policies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, not installed

from examples.gsm8k import prepare as gsm8k  # noqa: E402
from launch import preflight, recipe  # noqa: E402
from launch.role_map_file import load_yaml  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/gsm8k/async.yaml", help="role map to run")
    parser.add_argument("--name", default=None, help="run name: output goes to runs/<name> (default: from the config)")
    parser.add_argument("--steps", type=int, default=None, help="override run.steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="runs/gsm8k", help="where the data, tokenizer and models go")
    args = parser.parse_args()

    t0 = time.perf_counter()
    root = Path(args.root)
    print("== writing GSM8K-format data, training a BPE chat tokenizer, warm-starting a small Llama", flush=True)
    sft = gsm8k.prepare(root, seed=args.seed)
    before = gsm8k.heldout_accuracy(root / "sft", root / "data", seed=args.seed)
    print(
        f"   {sft['train_rows']} training problems, {sft['eval_rows']} held out; "
        f"held-out greedy accuracy after SFT: {before:.3f}",
        flush=True,
    )

    base = load_yaml(Path(args.config).read_text())
    name = args.name or Path(base["run"]["out"]).name
    out = Path("runs") / name
    task = gsm8k.task_section(root / "data")
    overrides: dict = {
        "model": {"path": str(root / "sft")},
        "task": {"train_files": task["train_files"], "eval_files": [str(root / "data" / "test.jsonl")]},
        "run": {"out": str(out), "seed": args.seed},
    }
    if args.steps is not None:
        overrides["run"]["steps"] = args.steps
    cfg_path = recipe.write_config(args.config, out, overrides)
    cfg = preflight.load(cfg_path)

    print(
        f"== RL: {cfg.run.steps} steps, {recipe.mode_name(cfg)}, {cfg.world.size} ranks, "
        f"eval every {cfg.eval.every_steps} (mpirl run {cfg_path})",
        flush=True,
    )
    job_s = recipe.run_job(cfg_path)
    after = gsm8k.heldout_accuracy(out / "policy", root / "data", seed=args.seed)
    summary = json.loads((out / "summary.json").read_text())  # the controller's
    evals = summary.get("eval", [])
    summary.update(
        {
            "heldout_acc_before": before,
            "heldout_acc_after": after,
            "wall_s": time.perf_counter() - t0,
            "rl_wall_s": job_s,
            "mode": recipe.mode_name(cfg),
            "engine": cfg.world.generator.engine,
            "ranks": cfg.world.counts(),
            "sft": sft,
        }
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    print("== summary")
    print(f"   held-out greedy accuracy  {before:.3f} -> {after:.3f}  ({after - before:+.3f})")
    for e in evals:
        k = cfg.eval.samples
        extra = f", mean@{k} {e[f'mean@{k}']:.3f}, pass@{k} {e[f'pass@{k}']:.3f}" if k else ""
        print(f"   eval at step {e['step']:>4}: pass@1 {e['pass@1']:.3f}{extra}")
    print(
        f"   training reward    {summary['train_reward_first10']:.3f} -> {summary['train_reward_last10']:.3f}"
        "  (mean of first / last 10 steps)"
    )
    print(f"   {summary['steps']} steps in {job_s:.1f} s of RL, {summary['wall_s']:.1f} s in all")
    print(f"   metrics: {out / 'metrics.jsonl'}  eval: {out / 'eval.jsonl'}  summary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
