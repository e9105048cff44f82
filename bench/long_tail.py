"""Rollout modes on a long-tailed workload: one JSON line per configuration.

The workload (``examples/long_tail``): a tiny Llama warm-started to answer ``a+b=`` after a
filler whose length is heavy-tailed (median about 10 tokens, mean about 22, some over 100, a
160-token cap), scored on the answer. Run as asynchronous RL (``max_staleness: 1``), one rank
per role (``examples/long_tail/async.yaml``), with the real engine (``--engine torch|vllm``).
A generator that samples a whole batch at a time waits for its longest response while its
other rows are done: the tail-wait share this bench reports, and what the streaming modes
(issue 37) remove. Each configuration is a set of role-map overrides on that base:

- ``batch``: today's generator (a batch in, a batch out);
- ``stream``: requests streamed, groups released as they finish, weights swapped between batches;
- ``stream_inflight``: and new weights loaded between decode steps, sequences kept in flight
  (their KV kept: ``inflight_kv: keep``);
- ``stream_recompute``: the same with the running sequences' KV recomputed on each update;
- ``stream_partial``: ``stream_inflight`` with 50% more groups in flight, a step taking the
  first to finish and the rest carried to the next step (or dropped, too stale).

The configurations run ``--repeats`` rounds, interleaved, each run
in its own folder; a line holds each figure's median over the rounds and, under ``spread``,
its (min, max). The figures, over the steps after ``--warmup`` (from ``metrics.jsonl``):

- ``samples_per_s``, ``tokens_per_s``: samples and response tokens trained per second;
- ``step_s``: wall-clock seconds per step (steps done / time taken, by the controller's clock);
- ``generator_busy``, ``trainer_busy``: the generator's and the trainer's working share of that
  time (a streaming generator can gain only while the trainer has time to spare);
- ``tail_wait_share``: ``generator_tail_wait_s / generation_s``, summed: the share of generation
  time the batch's rows spent finished, waiting for its longest (streaming: slots left empty
  while nothing waited for one);
- ``reward``: the mean training reward of the last ``--reward-steps`` steps.

    python bench/long_tail.py [--configs batch,stream,...] [--steps 20] [--repeats 3] [--engine torch]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.long_tail import prepare as workload  # noqa: E402
from launch import recipe  # noqa: E402

CONFIGS = {
    "batch": {"rollout": {"mode": "batch"}},
    "stream": {"rollout": {"mode": "stream", "inflight_updates": False}},
    "stream_inflight": {"rollout": {"mode": "stream", "inflight_updates": True}},
    "stream_recompute": {
        "rollout": {"mode": "stream", "inflight_updates": True},
        "world": {"generator": {"inflight_kv": "recompute"}},
    },
    "stream_partial": {"rollout": {"mode": "stream", "inflight_updates": True, "oversample": 0.5}},
}


def run_overrides(config: dict, model_dir: Path, run_dir: Path, steps: int, seed: int, engine: str) -> dict:
    """The role-map overrides of a run of ``config`` (a configuration's own overrides) on the base."""
    base = {
        "model": {"path": str(model_dir / "sft")},
        "task": {"train_files": [str(model_dir / workload.PROMPTS)]},
        "run": {"steps": steps, "seed": seed, "out": str(run_dir), "progress": False},
        "world": {"generator": {"engine": engine}},
    }
    return recipe.merge_overrides(base, json.loads(json.dumps(config)))


def run_config(name: str, run_dir: Path, timeout_s: float, **run) -> list[dict]:
    """Run configuration ``name`` in ``run_dir``; its metrics lines."""
    cfg = recipe.write_config(workload.BASE_CONFIG, run_dir, run_overrides(CONFIGS[name], run_dir=run_dir, **run))
    recipe.run_job(cfg, timeout_s=timeout_s, quiet=True)
    return recipe.read_metrics(run_dir)


def seconds_per_step(metrics: list[dict], warmup: int) -> float:
    """Wall-clock seconds per step from the end of step ``warmup - 1`` to the end of the run."""
    done = metrics[max(warmup, 1) - 1 :]
    if len(done) < 2:
        raise ValueError(f"{len(metrics)} steps leave none to time after a warm-up of {warmup}")
    return (done[-1]["elapsed_s"] - done[0]["elapsed_s"]) / (len(done) - 1)


def busy_share(lines: list[dict], roles: tuple[str, ...]) -> float:
    """The working share of the first of ``roles`` found in ``lines``' ``busy``, over their steps'
    time (each step's share weighted by its length)."""
    total = sum(m["step_s"] for m in lines)
    work = sum(_share(m.get("busy") or {}, roles) * m["step_s"] for m in lines)
    return work / total if total > 0 else 0.0


def _share(busy: dict, roles: tuple[str, ...]) -> float:
    return next((busy[k] for k in roles if k in busy), 0.0)


def figures(metrics: list[dict], samples_per_step: int, warmup: int, reward_steps: int) -> dict[str, float]:
    """One run's figures from its ``metrics.jsonl`` lines (in step order)."""
    after = metrics[warmup:]
    step_s = seconds_per_step(metrics, warmup)
    generation_s = sum(m["generation_s"] for m in after)
    tail_s = sum(m["generator_tail_wait_s"] for m in after)
    tokens = statistics.fmean(m["tokens"] for m in after)
    return {
        "samples_per_s": samples_per_step / step_s,
        "tokens_per_s": tokens / step_s,
        "step_s": step_s,
        "generator_busy": busy_share(after, ("generator", "colocated")),
        "trainer_busy": busy_share(after, ("trainer", "colocated")),
        "tail_wait_share": tail_s / generation_s if generation_s > 0 else 0.0,
        "reward": statistics.fmean(m["reward_mean"] for m in metrics[-reward_steps:]),
        "response_length_mean": statistics.fmean(m["response_length_mean"] for m in after),
        "staleness_mean": statistics.fmean(m["staleness_mean"] for m in after),
    }


def summary_line(name: str, rounds: list[dict], **about) -> dict:
    """The JSON line of one configuration: each figure's median over ``rounds`` and its (min, max)."""
    line = {"bench": "long_tail", "config": name, **about, "repeats": len(rounds)}
    line.update({k: round(statistics.median(f[k] for f in rounds), 4) for k in rounds[0]})
    line["spread"] = {k: [round(min(f[k] for f in rounds), 4), round(max(f[k] for f in rounds), 4)] for k in rounds[0]}
    return line


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the rates")
    parser.add_argument("--reward-steps", type=int, default=5, help="last steps the reward is averaged over")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; medians and (min, max) reported")
    parser.add_argument("--engine", choices=["torch", "vllm"], default="torch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one run may take")
    parser.add_argument("--out", default="runs/bench_long_tail", help="model cache and run folders")
    args = parser.parse_args()
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(args.configs) - set(CONFIGS))
    if unknown or not args.configs:
        parser.error(f"--configs: unknown {unknown}; choose from {', '.join(CONFIGS)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.steps < args.warmup + 2 or args.reward_steps < 1:
        parser.error("--steps must leave at least 2 steps after --warmup, and --reward-steps be at least 1")
    return args


def main() -> None:
    args = parse_args()
    if args.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        print(json.dumps({"bench": "long_tail", "engine": "vllm", "skipped": "vllm is not installed"}), flush=True)
        return
    out = Path(args.out)
    prepared = workload.prepare_model(out / "model", seed=args.seed)
    base = yaml.safe_load(workload.BASE_CONFIG.read_text())["rollout"]
    samples_per_step = base["prompts_per_step"] * base["samples_per_prompt"]
    run = {"model_dir": out / "model", "steps": args.steps, "seed": args.seed, "engine": args.engine}
    rounds: dict[str, list[dict]] = {name: [] for name in args.configs}
    # Interleaved (batch, stream, ..., batch, stream, ...): drift on a shared machine then hits
    # every configuration alike instead of whichever ran last.
    for r in range(args.repeats):
        for name in args.configs:
            metrics = run_config(name, out / args.engine / f"round-{r}" / name, args.timeout, **run)
            rounds[name].append(figures(metrics, samples_per_step, args.warmup, args.reward_steps))
    about = {"engine": args.engine, "steps": args.steps, "warmup": args.warmup, "samples_per_step": samples_per_step}
    for name in args.configs:
        line = summary_line(name, rounds[name], **about)
        line["overrides"] = CONFIGS[name]
        print(json.dumps(line), flush=True)
    print(json.dumps({"bench": "long_tail", "workload": prepared.get("sampled")}), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
