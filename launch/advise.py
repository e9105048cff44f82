"""``mpirl advise RUN_DIR``: how many ranks each role should get, from measured times.

Per step, a run measures the work of each role in rank-seconds: generation (summed over
generator ranks), scoring (summed over reward ranks) and training (the slowest trainer
times the number of trainers). Assuming each role's work divides evenly over its ranks,
a split ``(g, r, t)`` of the compute ranks gives a predicted step time of

- asynchronous (``max_staleness >= 1``): ``max(W_gen/g, W_reward/r, W_train/t)`` — the
  roles overlap, so the slowest one sets the pace (LlamaRL's argument);
- synchronous (``max_staleness = 0``): ``W_gen/g + W_reward/r + W_train/t`` — they take turns.

The advice is the split that minimises it. Linear scaling is optimistic for training
(communication) and for generation at small batch, so treat the prediction as a bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from launch.config import load_yaml


@dataclass(frozen=True)
class RoleWork:
    generate: float  # generator rank-seconds per step
    reward: float  # reward rank-seconds per step
    train: float  # trainer rank-seconds per step


@dataclass(frozen=True)
class Split:
    generator: int
    reward: int
    trainer: int
    step_s: float  # predicted seconds per step


def predict(work: RoleWork, generator: int, reward: int, trainer: int, overlapped: bool) -> float:
    parts = (work.generate / generator, work.reward / reward, work.train / trainer)
    return max(parts) if overlapped else sum(parts)


def best_split(work: RoleWork, total: int, overlapped: bool = True) -> Split:
    """The split of ``total`` compute ranks (each role >= 1) with the least predicted step time."""
    if total < 3:
        raise ValueError(f"need at least 3 compute ranks (one per role), got {total}")
    best = None
    for g in range(1, total - 1):
        for r in range(1, total - g):
            t = total - g - r
            s = Split(g, r, t, predict(work, g, r, t, overlapped))
            # Strictly better only: ties keep the first split found (fewest generators).
            if best is None or s.step_s < best.step_s - 1e-12:
                best = s
    return best


def work_from_run(run_dir: Path) -> tuple[RoleWork, dict, bool]:
    """Median per-step role work of a finished run, its rank counts, and whether it overlapped."""
    cfg = load_yaml((run_dir / "config.yaml").read_text())
    counts = {k: (v if isinstance(v, int) else v.get("ranks", 1)) for k, v in cfg.get("world", {}).items()}
    counts = {
        "generator": counts.get("generator", 1),
        "reward": counts.get("reward", 1),
        "trainer": counts.get("trainer", 1),
    }
    overlapped = cfg.get("run", {}).get("max_staleness", 1) >= 1
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    if not lines:
        raise ValueError(f"{run_dir}/metrics.jsonl has no steps")
    lines = lines[1:] or lines  # the first step carries start-up costs

    def median(values):
        values = sorted(values)
        return values[len(values) // 2]

    work = RoleWork(
        generate=median([m["generation_s"] for m in lines]),
        reward=median([m["reward_s"] for m in lines]),
        train=median([m["training_s"] for m in lines]) * counts["trainer"],
    )
    return work, counts, overlapped


def advise_from_run(run_dir: Path, total_ranks: int | None = None) -> str:
    work, counts, overlapped = work_from_run(run_dir)
    total = total_ranks or sum(counts.values())
    now = predict(work, counts["generator"], counts["reward"], counts["trainer"], overlapped)
    best = best_split(work, total, overlapped)
    mode = "asynchronous (roles overlap)" if overlapped else "synchronous (roles take turns)"
    return "\n".join(
        [
            f"run: {run_dir}  mode: {mode}",
            f"measured work per step (rank-seconds): generate {work.generate:.3f}, "
            f"reward {work.reward:.3f}, train {work.train:.3f}",
            f"current split   generator {counts['generator']}, reward {counts['reward']}, trainer {counts['trainer']}: "
            f"predicted {now:.3f} s/step",
            f"advised split   generator {best.generator}, reward {best.reward}, trainer {best.trainer} "
            f"(of {total} compute ranks): predicted {best.step_s:.3f} s/step ({now / best.step_s:.2f}x)",
        ]
    )
