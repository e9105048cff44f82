"""`make demo`: asynchronous RL on a tiny Llama that learns a+b, on 4 MPI ranks.

1. builds a 0.66M-parameter Llama and a character tokenizer (no download),
2. warm-starts it with a short supervised phase on a quarter of the training pairs,
3. runs asynchronous RL with AIPO through mpirun (controller, generator, reward, trainer),
4. prints a summary, writes runs/<name>/summary.json and a report (runs/<name>/report/report.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, not installed

from examples.arith import prepare as arith  # noqa: E402
from launch import preflight, recipe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/arith/async.yaml", help="role map to run")
    parser.add_argument("--name", default=None, help="run name: output goes to runs/<name> (default: from the config)")
    parser.add_argument("--steps", type=int, default=None, help="override run.steps")
    parser.add_argument("--engine", choices=["torch", "vllm"], default=None, help="override the generator engine")
    parser.add_argument("--max-staleness", type=int, default=None, help="override run.max_staleness")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    models = Path("runs/arith")
    print("== building the tiny Llama and warm-starting it (SFT)", flush=True)
    sft = arith.prepare_model(models, seed=args.seed)
    before = arith.heldout_accuracy(models / "sft", seed=args.seed)
    print(f"   held-out accuracy after SFT: {before:.3f}", flush=True)

    base = preflight.load(args.config)
    name = args.name or Path(base.run.out).name
    out = Path("runs") / name
    overrides: dict = {"model": {"path": str(models / "sft")}, "run": {"out": str(out), "seed": args.seed}}
    if args.steps is not None:
        overrides["run"]["steps"] = args.steps
    if args.max_staleness is not None:
        overrides["run"]["max_staleness"] = args.max_staleness
    if args.engine is not None:
        overrides["world"] = {"generator": {"engine": args.engine}}
    cfg_path = recipe.write_config(args.config, out, overrides)
    cfg = preflight.load(cfg_path)

    print(
        f"== RL: {cfg.run.steps} steps, {recipe.mode_name(cfg)}, {cfg.world.size} ranks (mpirl run {cfg_path})",
        flush=True,
    )
    job_s = recipe.run_job(cfg_path)
    after = arith.heldout_accuracy(out / "policy", seed=args.seed)
    metrics = recipe.read_metrics(out)
    first = sum(m["reward_mean"] for m in metrics[:10]) / max(1, len(metrics[:10]))
    last = sum(m["reward_mean"] for m in metrics[-10:]) / max(1, len(metrics[-10:]))
    summary = {
        "heldout_acc_before": before,
        "heldout_acc_after": after,
        "train_reward_first10": first,
        "train_reward_last10": last,
        "steps": len(metrics),
        "wall_s": time.perf_counter() - t0,
        "rl_wall_s": job_s,
        "mode": recipe.mode_name(cfg),
        "engine": cfg.world.generator.engine,
        "ranks": cfg.world.counts(),
        "sft": sft,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    print("== summary")
    print(f"   held-out accuracy  {before:.3f} -> {after:.3f}  ({after - before:+.3f})")
    print(f"   training reward    {first:.3f} -> {last:.3f}  (mean of first / last 10 steps)")
    print(f"   {len(metrics)} steps in {job_s:.1f} s of RL, {summary['wall_s']:.1f} s in all")
    print(f"   metrics: {out / 'metrics.jsonl'}   summary: {out / 'summary.json'}")
    from launch.tools.report import write_report

    print(f"   report:  {write_report([out], out / 'report')}  (curves: mpirl report {out})")


if __name__ == "__main__":
    main()
