"""`make demo-tools`: a tiny model learns, with RL, to use a calculator for sums it cannot do.

1. trains a byte-level BPE chat tokenizer with a tool-calling template, builds a small Llama
   and warm-starts it (examples/tools/prepare.py): it calls the calculator on about half of
   the four-digit sums it is asked, and answers the rest in its head (wrongly);
2. runs asynchronous RL through mpirun on streamed multi-turn episodes: the generator's
   turns are engine requests, the calculator runs in the environment's sandboxed workers,
   the reward rank scores each episode's final turn (examples/tools/async.yaml);
3. prints a summary and writes runs/<name>/summary.json: the held-out figures of the job's
   own evaluations (greedy pass@1, and mean@4 at temperature 1) before and after, and how
   the episodes used the tool (calls per episode, the share that call, their errors).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, not installed

from examples.tools import prepare as tools  # noqa: E402
from launch import preflight, recipe  # noqa: E402


def episode_figures(metrics: list[dict], first: bool) -> dict:
    """The episodes' figures of the first (or last) ten steps, averaged."""
    lines = [m["episodes"] for m in (metrics[:10] if first else metrics[-10:]) if m.get("episodes")]
    keys = ("tool_call_rate", "tool_calls_per_episode", "tool_error_rate", "episode_turns_mean")
    return {k: sum(e[k] for e in lines) / max(len(lines), 1) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/tools/async.yaml", help="role map to run")
    parser.add_argument("--name", default=None, help="run name: output goes to runs/<name> (default: from the config)")
    parser.add_argument("--steps", type=int, default=None, help="override run.steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default="runs/tools", help="where the tokenizer and models go")
    args = parser.parse_args()

    t0 = time.perf_counter()
    root = Path(args.root)
    print("== training a BPE chat tokenizer with tools, warm-starting a small Llama to call a calculator", flush=True)
    sft = tools.prepare(root, seed=args.seed)
    greedy, sampled = sft["greedy"], sft["sampled"]
    print(
        f"   after SFT (held-out, up to 3 turns): greedy accuracy {greedy['accuracy']:.3f}; sampled accuracy "
        f"{sampled['accuracy']:.3f}, calling the tool in {sampled['tool_rate']:.2f} of episodes",
        flush=True,
    )
    overrides: dict = {"model": {"path": str(root / "sft")}, "run": {"seed": args.seed}}
    base_out = Path(preflight.load(args.config).run.out) if args.name is None else None
    out = Path("runs") / (args.name or base_out.name)
    overrides["run"]["out"] = str(out)
    if args.steps is not None:
        overrides["run"]["steps"] = args.steps
    cfg_path = recipe.write_config(args.config, out, overrides)
    cfg = preflight.load(cfg_path)
    print(
        f"== RL: {cfg.run.steps} steps, {recipe.mode_name(cfg)}, streamed episodes of up to "
        f"{cfg.environment.max_turns} turns, {cfg.world.size} ranks (mpirl run {cfg_path})",
        flush=True,
    )
    job_s = recipe.run_job(cfg_path)
    summary = json.loads((out / "summary.json").read_text())
    metrics = recipe.read_metrics(out)
    evals = summary.get("eval", [])
    k = cfg.eval.samples
    first, last = evals[0], evals[-1]
    summary.update(
        {
            "heldout_greedy_before": first["pass@1"],
            "heldout_greedy_after": last["pass@1"],
            f"heldout_mean@{k}_before": first[f"mean@{k}"],
            f"heldout_mean@{k}_after": last[f"mean@{k}"],
            "episodes_first10": episode_figures(metrics, first=True),
            "episodes_last10": episode_figures(metrics, first=False),
            "wall_s": time.perf_counter() - t0,
            "rl_wall_s": job_s,
            "mode": recipe.mode_name(cfg),
            "sft": sft,
        }
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    before, after = summary["episodes_first10"], summary["episodes_last10"]
    print("== summary")
    print(
        f"   held-out greedy pass@1   {first['pass@1']:.3f} -> {last['pass@1']:.3f}  "
        f"({last['pass@1'] - first['pass@1']:+.3f})"
    )
    print(
        f"   held-out mean@{k} (T=1)   {first[f'mean@{k}']:.3f} -> {last[f'mean@{k}']:.3f}  "
        f"({last[f'mean@{k}'] - first[f'mean@{k}']:+.3f})"
    )
    print(
        f"   episodes calling the tool {before['tool_call_rate']:.2f} -> {after['tool_call_rate']:.2f}; "
        f"tool errors per call {before['tool_error_rate']:.3f} -> {after['tool_error_rate']:.3f} "
        "(first / last 10 steps)"
    )
    print(
        f"   training reward    {summary['train_reward_first10']:.3f} -> {summary['train_reward_last10']:.3f}"
        "  (mean of first / last 10 steps)"
    )
    print(f"   {summary['steps']} steps in {job_s:.1f} s of RL, {summary['wall_s']:.1f} s in all")
    print(f"   metrics: {out / 'metrics.jsonl'}  eval: {out / 'eval.jsonl'}  summary: {out / 'summary.json'}")


if __name__ == "__main__":
    main()
