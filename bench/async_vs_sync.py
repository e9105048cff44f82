"""Asynchronous vs synchronous RL, side by side in one invocation: one JSON line.

The same task, model, batch and step count run in five modes, one after another, each on
the same number of compute ranks (plus the controller and a reward rank, which are
mostly idle), with one torch thread per rank:

- ``colocated_sync``: 2 colocated ranks both generate and train, data-parallel, taking
  turns (the DeepSpeed-Chat-like baseline LlamaRL compares against);
- ``sync``: disaggregated, 1 generator + 1 trainer, ``max_staleness: 0`` (the generator
  waits for each new policy: no overlap);
- ``async``: the same ranks with ``max_staleness: 1`` (LlamaRL's one-step off-policy);
- ``sync_stream`` and ``async_stream``: the last two with streamed rollouts
  (``rollout.mode: stream``); ``*_stream_over_batch`` is their step time over the batch
  generator's, which on this uniform-length workload must stay within 3%;
- ``ppo_sync`` and ``ppo_async``: PPO with a critic rank (GAE advantages from a value model
  the size of the policy) in place of group baselines; ``ppo_async_over_async`` is what the
  critic costs the asynchronous step (its work overlaps the trainer's), and
  ``ppo_async_reward_minus_async`` PPO's final reward against GRPO-style AIPO's.

From the disaggregated sync run it takes the generation time ``t_gen`` and the training
time ``t_train`` of a step; overlapping the two can at best turn ``t_gen + t_train`` into
``max(t_gen, t_train)``: that is ``ideal_speedup``. A mode's step time is its wall-clock
time per step after a warm-up (steps done / time taken, from the controller's clock): in the
asynchronous mode steps complete unevenly (two close together, then a long one) while the
pipeline keeps a steady rate, so a median of the intervals would say little about that rate.
``t_gen`` and ``t_train`` are medians of the per-step phase times. Rewards are the mean
training reward of the last 10 steps.

One run of each says little on a shared machine (two consecutive invocations once gave a
speed-up of 0.82 and 1.29 of the ideal), so the modes run ``--repeats`` rounds (3 by default),
interleaved, and the line holds each figure's median over the rounds and, under ``spread``,
its (min, max).

    python bench/async_vs_sync.py [--steps 40] [--repeats 3] [--out runs/bench_async]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.arith import prepare as arith  # noqa: E402
from launch import recipe  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "examples/arith/async.yaml"

# Chosen so that generating a step's rollouts and training on them take about as long
# on one CPU core each (as in real RL runs, where both are large).
WORKLOAD = {
    "rollout": {"prompts_per_step": 32, "samples_per_prompt": 8, "max_new_tokens": 6},
    "algorithm": {"micro_batch": 256},
}

# The critic takes micro-batches as large as the trainer's (WORKLOAD), so that neither runs more passes.
PPO = {
    "world": {"critic": 1},
    "algorithm": {"advantage": "gae", "loss": "ppo"},
    "critic": {"lr": 1.0e-3, "micro_batch": 256},
}

MODES = {
    "colocated_sync": {"world": {"generator": {"ranks": 0}, "trainer": 0, "colocated": 2}, "run": {"max_staleness": 0}},
    "sync": {"run": {"max_staleness": 0}},
    "async": {"run": {"max_staleness": 1}},
    # the same two with streamed rollouts (rollout.mode: stream): on this uniform-length
    # workload they must not be slower than the batch generator
    "sync_stream": {"run": {"max_staleness": 0}, "rollout": {"mode": "stream"}},
    "async_stream": {"run": {"max_staleness": 1}, "rollout": {"mode": "stream"}},
    # PPO: a critic rank computes GAE advantages from a value model (algorithm.advantage: gae),
    # synchronous and asynchronous; against "sync" and "async" (group baselines, no critic)
    "ppo_sync": {"run": {"max_staleness": 0}, **PPO},
    "ppo_async": {"run": {"max_staleness": 1}, **PPO},
}


def run_mode(name: str, model_dir: Path, out: Path, steps: int, seed: int) -> list[dict]:
    overrides = recipe.merge_overrides(
        {
            "model": {"path": str(model_dir)},
            "run": {"steps": steps, "seed": seed, "out": str(out / name), "progress": False},
        },
        json.loads(json.dumps(WORKLOAD)),
    )
    overrides = recipe.merge_overrides(overrides, json.loads(json.dumps(MODES[name])))
    cfg = recipe.write_config(CONFIG, out / name, overrides)
    recipe.run_job(cfg, timeout_s=1800, quiet=True)
    return recipe.read_metrics(out / name)


def median_after_warmup(metrics: list[dict], key: str, warmup: int) -> float:
    return statistics.median(m[key] for m in metrics[warmup:])


def seconds_per_step(metrics: list[dict], warmup: int) -> float:
    """Wall-clock seconds per step from the end of step ``warmup - 1`` to the end of the run."""
    done = metrics[max(warmup, 1) - 1 :]
    return (done[-1]["elapsed_s"] - done[0]["elapsed_s"]) / (len(done) - 1)


def figures(runs: dict[str, list[dict]], warmup: int) -> dict[str, float]:
    """One round's figures (one run of each mode)."""
    step = {name: seconds_per_step(m, warmup) for name, m in runs.items()}
    t_gen = median_after_warmup(runs["sync"], "generation_s", warmup)
    t_train = median_after_warmup(runs["sync"], "training_s", warmup)
    ideal = (t_gen + t_train) / max(t_gen, t_train)
    # The same phases while they overlap: on a small machine they share memory bandwidth
    # (and the cores with the controller and reward ranks), so each runs slower than alone.
    async_gen = median_after_warmup(runs["async"], "generation_s", warmup)
    async_train = median_after_warmup(runs["async"], "training_s", warmup)

    def final_reward(m):
        return statistics.fmean(x["reward_mean"] for x in m[-10:])

    return {
        "colocated_sync_step_s": step["colocated_sync"],
        "sync_step_s": step["sync"],
        "async_step_s": step["async"],
        "t_gen": t_gen,
        "t_train": t_train,
        "ideal_speedup": ideal,
        "speedup": step["sync"] / step["async"],
        "colocated_speedup": step["colocated_sync"] / step["async"],
        "speedup_vs_ideal": step["sync"] / step["async"] / ideal,
        "async_step_over_max_phase": step["async"] / max(t_gen, t_train),
        "async_t_gen": async_gen,
        "async_t_train": async_train,
        "async_step_over_own_max_phase": step["async"] / max(async_gen, async_train),
        "sync_reward": final_reward(runs["sync"]),
        "async_reward": final_reward(runs["async"]),
        "colocated_reward": final_reward(runs["colocated_sync"]),
        "async_staleness_mean": statistics.fmean(m["staleness_mean"] for m in runs["async"]),
        "sync_stream_step_s": step["sync_stream"],
        "async_stream_step_s": step["async_stream"],
        "sync_stream_over_batch": step["sync_stream"] / step["sync"],
        "async_stream_over_batch": step["async_stream"] / step["async"],
        "async_stream_reward": final_reward(runs["async_stream"]),
        **_ppo_figures(runs, step, final_reward),
    }


def _ppo_figures(runs: dict, step: dict, final_reward) -> dict[str, float]:
    """The critic's cost (its step time over the same job's without one) and PPO's reward."""
    if "ppo_async" not in runs:
        return {}
    return {
        "ppo_sync_step_s": step["ppo_sync"],
        "ppo_async_step_s": step["ppo_async"],
        "ppo_sync_over_sync": step["ppo_sync"] / step["sync"],
        "ppo_async_over_async": step["ppo_async"] / step["async"],  # the critic's cost (target <= 1.1)
        "ppo_async_reward": final_reward(runs["ppo_async"]),
        "ppo_async_reward_minus_async": final_reward(runs["ppo_async"]) - final_reward(runs["async"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the medians")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of all modes, interleaved; medians and (min, max) reported"
    )
    parser.add_argument("--out", default="runs/bench_async")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    out = Path(args.out)
    arith.prepare_model(out / "model", seed=args.seed)
    model_dir = out / "model" / "sft"
    # Interleaved (sync, async, colocated, sync, async, ...): drift on a shared machine then
    # hits every mode alike instead of whichever ran last.
    rounds = []
    for r in range(args.repeats):
        runs = {name: run_mode(name, model_dir, out / f"round-{r}", args.steps, args.seed) for name in MODES}
        rounds.append(figures(runs, args.warmup))
    line = {"bench": "async_vs_sync", "steps": args.steps, "repeats": args.repeats}
    line.update({k: round(statistics.median(f[k] for f in rounds), 4) for k in rounds[0]})
    line["spread"] = {k: [round(min(f[k] for f in rounds), 4), round(max(f[k] for f in rounds), 4)] for k in rounds[0]}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
