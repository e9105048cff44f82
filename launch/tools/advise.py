"""``mpirl advise RUN_DIR``: how many ranks each role should get, from measured times.

Per step a run measures each role's work in rank-seconds (generation and scoring summed over
their ranks, training the slowest trainer times the trainers). Assuming work divides evenly,
a split ``(g, r, t)`` predicts a step time of ``max(W_gen/g, W_reward/r, W_train/t)`` when the
roles overlap (``max_staleness >= 1``, LlamaRL's argument) and their sum when they take turns
(``max_staleness = 0``); a colocated run takes ``(W_gen + W_train)/n + W_reward/r``. The
advice is the split that minimises it; a synchronous or colocated run is also shown the best
overlapped split.

Given several runs of the same job on different rank counts, each role's time per rank is
fitted as ``F + W/n`` (least squares on ``1/n``); one run gives ``F = 0``, linear scaling,
which is optimistic. The weight push is not modelled: treat the prediction as a bound.

Run folders are read as ``mpirl report`` reads them (``launch/tools/report/runs.py``); a
folder that is not a run is an :class:`AdviseError` naming what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RoleWork:
    generate: float  # generator rank-seconds per step (that divide over the generators)
    reward: float  # reward rank-seconds per step
    train: float  # trainer rank-seconds per step
    # Seconds per step each rank of the role pays however many ranks share the work (fitted
    # from runs with different rank counts: fit_work); 0 is linear scaling.
    generate_fixed: float = 0.0
    reward_fixed: float = 0.0
    train_fixed: float = 0.0

    def per_rank(self, role: str, ranks: int) -> float:
        """Seconds a step of ``role``'s work takes on ``ranks`` ranks."""
        return getattr(self, f"{role}_fixed") + getattr(self, role) / ranks


@dataclass(frozen=True)
class Split:
    generator: int
    reward: int
    trainer: int
    step_s: float  # predicted seconds per step


def predict(work: RoleWork, generator: int, reward: int, trainer: int, overlapped: bool) -> float:
    parts = (work.per_rank("generate", generator), work.per_rank("reward", reward), work.per_rank("train", trainer))
    return max(parts) if overlapped else sum(parts)


def predict_colocated(work: RoleWork, colocated: int, reward: int) -> float:
    """The same ranks generate, then train; the reward ranks score meanwhile."""
    return work.per_rank("generate", colocated) + work.per_rank("train", colocated) + work.per_rank("reward", reward)


_ROLE_OF_WORK = {"generate": "generator", "reward": "reward", "train": "trainer"}


def fit_work(runs: list[tuple[RoleWork, dict]]) -> RoleWork:
    """One ``RoleWork`` from measurements of the same job on different layouts.

    ``runs``: each run's linear ``RoleWork`` (``work_from_run``) and rank counts. Per role, a
    rank's time ``W_i / n_i`` is fitted as ``F + W / n_i`` by least squares on ``1/n``; with
    fewer than two distinct counts ``F = 0`` and ``W`` is the runs' mean. A negative ``F`` or
    ``W`` (noise) is clamped at 0 and the other refitted alone.
    """
    fitted = {}
    for field, role in _ROLE_OF_WORK.items():
        points = [(1.0 / n, getattr(w, field) / n) for w, counts in runs if (n := _ranks_doing(counts, role))]
        xs = [x for x, _ in points]
        mean_x, mean_y = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
        spread = sum((x - mean_x) ** 2 for x in xs)
        if spread <= 1e-12 * max(1.0, mean_x * mean_x):
            fixed, divisible = 0.0, mean_y / mean_x
        else:
            divisible = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
            fixed = mean_y - divisible * mean_x
            if fixed < 0:  # through the origin: linear scaling
                fixed, divisible = 0.0, sum(x * y for x, y in points) / sum(x * x for x in xs)
            elif divisible < 0:  # nothing divides: a constant time
                fixed, divisible = mean_y, 0.0
        fitted[field], fitted[f"{field}_fixed"] = divisible, fixed
    return RoleWork(**fitted)


def _ranks_doing(counts: dict, role: str) -> int:
    """The ranks of a layout that do ``role``'s work (a colocated rank generates and trains)."""
    if counts.get("colocated") and role in ("generator", "trainer"):
        return counts["colocated"]
    return counts[role]


# Splits tried one by one up to this many (in the order that sets how ties are broken); above it,
# a bisection per trainer count (_best_for_trainers), as the full search is quadratic in the ranks.
EXHAUSTIVE_UP_TO = 2_000_000


def best_split(work: RoleWork, total: int, overlapped: bool = True, prompts_per_step: int | None = None) -> Split:
    """The split of ``total`` compute ranks (each role >= 1) with the least predicted step time.

    ``prompts_per_step``: only trainer counts it divides evenly over, as the role map requires
    (each trainer trains on an equal share), so the advice is a layout ``mpirl check`` accepts.
    Ties keep the split with the fewest generators, then the fewest reward ranks.
    """
    if total < 3:
        raise ValueError(f"need at least 3 compute ranks (one per role), got {total}")
    trainers = [t for t in range(1, total - 1) if not prompts_per_step or prompts_per_step % t == 0]
    if not trainers:
        return None
    if total * len(trainers) > EXHAUSTIVE_UP_TO:
        found = [_best_for_trainers(work, total - t, t, overlapped) for t in trainers]
        return min(found, key=lambda s: (s.step_s, s.generator, s.reward))
    best = None
    for g in range(1, total - 1):
        for t in reversed(trainers):  # the reward ranks ascending
            r = total - g - t
            if r < 1:
                continue
            s = Split(g, r, t, predict(work, g, r, t, overlapped))
            # Strictly better only: ties keep the first split found (fewest generators).
            if best is None or s.step_s < best.step_s - 1e-12:
                best = s
    return best


def _first(lo: int, hi: int, holds) -> int:
    """The least ``g`` in ``[lo, hi]`` for which ``holds(g)``, given that it holds from some ``g`` on
    (``hi + 1`` when it holds nowhere)."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid - 1
        else:
            lo = mid + 1
    return lo


def _best_for_trainers(work: RoleWork, m: int, t: int, overlapped: bool) -> Split:
    """The best split of ``m`` ranks between generators and reward ranks beside ``t`` trainers,
    found by bisection: a role's time ``F + W/n`` falls as its ranks grow, so the generators' time
    falls and the reward ranks' rises with ``g``; their maximum is least where they cross, their
    sum (convex) where its slope turns. Of equal times, the fewest generators."""
    gen = lambda g: work.per_rank("generate", g)  # noqa: E731
    rew = lambda g: work.per_rank("reward", m - g)  # noqa: E731
    train = work.per_rank("train", t)
    hi = m - 1
    if overlapped:
        cross = _first(1, hi, lambda g: gen(g) <= rew(g))
        at = [g for g in (cross - 1, cross) if 1 <= g <= hi]
        least = min(max(gen(g), rew(g)) for g in at)
        target = max(least, train) + 1e-12
        # Every g from the first whose generators are within target to the crossing is as good.
        g = _first(1, max(at), lambda g: gen(g) <= target and rew(g) <= target)
    else:
        cost = lambda g: gen(g) + rew(g)  # noqa: E731
        g = _first(1, hi - 1, lambda g: cost(g + 1) - cost(g) >= -1e-12)
    return Split(g, m - g, t, predict(work, g, m - g, t, overlapped))


class AdviseError(ValueError):
    """A run folder advise cannot read (no config, no steps, no timings); the message says why."""


def _rank_count(value, role: str) -> int:
    from launch.tools.report.runs import rank_count

    count = rank_count(value)
    if count is None:
        raise AdviseError(f"config.yaml: world.{role} is {value!r}, not a rank count")
    return count


def work_from_run(run_dir: Path) -> tuple[RoleWork, dict, bool]:
    """Median per-step role work of a run, its rank counts, and whether it overlapped.

    The run may be finished, stopped or resumed: metrics.jsonl is read as ``mpirl report`` reads
    it (a cut last line skipped, a re-run step counted once). A colocated run's ranks both
    generate and train, so its generation and training are both their work: ``counts`` then
    holds ``colocated`` and the two roles' counts are 0.
    """
    return _work_of(_read_run(run_dir))


def _read_run(run_dir: Path):
    from launch.tools.report.runs import ReportError, load_run

    try:
        return load_run(run_dir)
    except ReportError as e:
        raise AdviseError(str(e)) from None


def _work_of(run) -> tuple[RoleWork, dict, bool]:
    from launch.tools.report.runs import number, section

    run_dir = run.path
    if run.config is None:
        raise AdviseError(f"{run_dir}: no readable config.yaml, so the ranks per role are unknown")
    world = run.config.get("world")
    if not isinstance(world, dict):
        raise AdviseError(f"{run_dir}/config.yaml has no world section")
    counts = {role: _rank_count(world.get(role, 1), role) for role in ("generator", "reward", "trainer")}
    counts["colocated"] = _rank_count(world.get("colocated", 0), "colocated")
    if counts["colocated"]:
        counts["generator"] = counts["trainer"] = 0
    elif not counts["generator"] or not counts["trainer"]:
        raise AdviseError(f"{run_dir}/config.yaml: world has no generator or no trainer ranks")
    if not counts["reward"]:
        raise AdviseError(f"{run_dir}/config.yaml: world has no reward ranks")
    overlapped = not counts["colocated"] and section(run.config, "run").get("max_staleness", 1) != 0
    steps = run.metrics[1:] or run.metrics  # the first step carries start-up costs

    def median(key: str) -> float:
        values = sorted(v for m in steps if (v := number(m, key)) is not None)
        if not values:  # absent, or not a finite number (null, NaN, a string) in every step
            raise AdviseError(f"{run_dir}/metrics.jsonl: no step has a number for {key}")
        return values[len(values) // 2]

    if not steps:
        why = "".join(f"; {note}" for note in run.notes)
        raise AdviseError(f"{run_dir}/metrics.jsonl has no steps{why}")
    trainers = counts["colocated"] or counts["trainer"]  # training_s is the slowest trainer's
    work = RoleWork(generate=median("generation_s"), reward=median("reward_s"), train=median("training_s") * trainers)
    return work, counts, overlapped


def _prompts_per_step(config: dict) -> int | None:
    """``rollout.prompts_per_step`` of a run's role map; when it gives none, the default the run
    had (the trainer counts the advice may give must divide it all the same), None when it is not
    a count."""
    from launch.tools.report.runs import section
    from roles.sections.rollout import RolloutConfig

    rollout = section(config, "rollout")
    value = rollout.get("prompts_per_step", RolloutConfig.model_fields["prompts_per_step"].default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _rows_per_step(config: dict) -> tuple:
    """What a step's work is made of: prompts and samples per prompt (None where not given)."""
    from launch.tools.report.runs import section

    rollout = section(config, "rollout")
    return rollout.get("prompts_per_step"), rollout.get("samples_per_prompt")


def advise_from_run(run_dir: Path, total_ranks: int | None = None) -> str:
    return advise_from_runs([run_dir], total_ranks)


def advise_from_runs(run_dirs: list[Path], total_ranks: int | None = None) -> str:
    """The advice for the first run's job and mode; further runs of the same job on other
    layouts let each role's per-rank time be fitted as fixed plus divisible (``fit_work``)."""
    runs = [_read_run(d) for d in run_dirs]  # each once: the work and the role map come from it
    measured = [_work_of(run) for run in runs]
    run_dir, run = run_dirs[0], runs[0]
    for other_dir, other in zip(run_dirs[1:], runs[1:]):
        if _rows_per_step(other.config) != _rows_per_step(run.config):
            raise AdviseError(
                f"{other_dir} makes (prompts_per_step, samples_per_prompt) = {_rows_per_step(other.config)} "
                f"a step, {run_dir} {_rows_per_step(run.config)}: runs given together must be the same job "
                "on different layouts"
            )
    _, counts, overlapped = measured[0]
    work = fit_work([(w, c) for w, c, _ in measured])
    total = sum(counts.values()) if total_ranks is None else total_ranks
    prompts_per_step = _prompts_per_step(run.config)
    if counts["colocated"]:
        n = counts["colocated"]
        now = predict_colocated(work, n, counts["reward"])
        current = f"current split   colocated {n}, reward {counts['reward']} (generate, then train)"
        mode = "colocated (the same ranks generate, then train)"
    else:
        now = predict(work, counts["generator"], counts["reward"], counts["trainer"], overlapped)
        current = (
            f"current split   generator {counts['generator']}, reward {counts['reward']}, trainer {counts['trainer']}"
        )
        mode = "asynchronous (roles overlap)" if overlapped else "synchronous (roles take turns)"
    lines = [f"run: {run_dir}  mode: {mode}"]
    if len(runs) > 1:
        lines.append(f"fitted with: {', '.join(str(d) for d in run_dirs[1:])}")
    # Advice from fewer steps than the run logged should say so, as mpirl report's page does.
    for d, r in zip(run_dirs, runs):
        if r.notes:
            lines.append(f"read from {d}: {'; '.join(r.notes)}")
    lines.append(
        f"measured work per step (rank-seconds that divide over the role's ranks): generate {work.generate:.3f}, "
        f"reward {work.reward:.3f}, train {work.train:.3f}"
    )
    fixed = [(f, getattr(work, f"{f}_fixed")) for f in _ROLE_OF_WORK if getattr(work, f"{f}_fixed") > 0]
    if fixed:
        lines.append(
            "plus, per step, seconds each rank pays however many share the work: "
            + ", ".join(f"{field} {value:.3f}" for field, value in fixed)
        )
    lines.append(f"{current}: predicted {now:.3f} s/step")
    # A synchronous or colocated run is also advised as separate roles that overlap
    # (run.max_staleness: 1), LlamaRL's layout: the figure it would be worth switching for.
    for label, overlap in [("advised split", overlapped)] + ([] if overlapped else [("asynchronous", True)]):
        if counts["colocated"] and not overlap:
            continue  # colocated is its own synchronous layout: its advice is the async one
        best = best_split(work, total, overlap, prompts_per_step)
        how = " with max_staleness 1" if overlap and not overlapped else ""
        lines.append(
            f"{label + ' ' * max(1, 16 - len(label))}generator {best.generator}, reward {best.reward}, "
            f"trainer {best.trainer} (of {total} compute ranks){how}: predicted {best.step_s:.3f} s/step "
            f"({now / best.step_s:.2f}x)"
        )
    return "\n".join(lines)
