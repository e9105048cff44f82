"""A step's line in metrics.jsonl, from the notices of three roles: the generators' ``BatchDone``,
the reward ranks' ``Scored`` and the trainer's ``StepDone``; and the run's ``summary.json``.

The controller feeds the notices in as they come and asks for a step's line once all of them
are in (``StepNotices.complete``); ``roles.observe.run_log`` writes it.
"""

from __future__ import annotations

import collections

from roles.episodes.metrics import episode_figures
from roles.protocol import BatchDone, Routes, Scored, StepDone

_EPISODE = "episode:"  # the key prefix of the episodes' sums among a step's reward-rank sums

# The reward ranks' per-step counts that add up over their notices.
_SCORED_SUMS = (
    "samples", "reward_sum", "correct_sum", "length_sum", "clipped", "groups", "zero_advantage_groups", "window_s"
)  # fmt: skip


class StepNotices:
    """Per-step sums of the generators' and reward ranks' notices, until the step's line is written."""

    def __init__(self):
        self.gen = collections.defaultdict(collections.Counter)
        self.scored = collections.defaultdict(collections.Counter)
        self.components = collections.defaultdict(collections.Counter)  # per step: label -> sum
        self.shown = collections.defaultdict(list)  # per step: the generations shown (samples.jsonl)
        self.critic: dict[int, dict] = {}  # per step: the critic's figures (algorithm.advantage: gae)

    def add_batch(self, m: BatchDone) -> None:
        c = self.gen[m.step]
        c["generate_s"] += m.generate_s
        c["gen_tail_wait_s"] += m.tail_wait_s
        c["gen_wait_s"] += m.wait_s
        c["weight_load_s"] += m.weight_load_s
        c["weight_syncs"] += m.weight_syncs
        c["gen_tokens"] += m.tokens
        c["batches"] += 1
        c["groups"] += m.groups
        c["gen_window_s"] += m.window_s

    def add_scored(self, m: Scored) -> None:
        c = self.scored[m.step]
        c["score_s"] += m.score_s
        c["verifier_failures"] += m.failures
        c["verifier_timeouts"] += m.timeouts
        for key in _SCORED_SUMS:
            c[key] += getattr(m, key)
        c["length_max"] = max(c["length_max"], m.length_max)
        for key, value in m.episodes.items():  # multi-turn episodes' sums
            c[_EPISODE + key] += value
        self.components[m.step].update(m.components)
        self.shown[m.step].extend(m.shown)

    def add_critic(self, step: int, metrics: dict) -> None:
        self.critic[step] = dict(metrics)

    def complete(self, step: int, groups: int, critic: bool = False, generated: bool = True) -> bool:
        """Whether the generators (unless not ``generated``: their notices carry no step) and the
        reward ranks have both reported all ``groups`` of ``step`` (and the critic its update on
        it, when there is one)."""
        done = (not generated or self.gen[step]["groups"] >= groups) and self.scored[step]["groups"] >= groups
        return done and (not critic or step in self.critic)

    def pop(self, step: int) -> tuple:
        """The step's sums (generators', reward ranks', reward components) and its shown samples."""
        shown = sorted(self.shown.pop(step, []), key=lambda r: (r["sample"], r["group_id"]))
        return self.gen.pop(step, {}), self.scored.pop(step, {}), self.components.pop(step, {}), shown

    def pop_critic(self, step: int) -> dict | None:
        return self.critic.pop(step, None)


def step_record(
    m: StepDone, gen, scored, components, *, routes: Routes, data_stats: dict, step_s: float, controller: dict
) -> dict:
    """Step ``m.step``'s line. ``controller``: the controller's own figures (busy share, messages
    handled, elapsed seconds) over the step."""
    return {
        "step": m.step,
        "policy_version": m.version,
        "reward_mean": m.metrics.get("reward_mean"),
        **_response_metrics(scored, components),
        "loss": m.metrics.get("loss"),
        "tokens": int(m.metrics.get("tokens", 0)),
        "generation_s": gen.get("generate_s", 0.0),
        "reward_s": scored.get("score_s", 0.0),
        "training_s": m.metrics.get("train_s"),
        "weight_sync_s": m.metrics.get("weight_send_s", 0.0) + gen.get("weight_load_s", 0.0),
        "weight_sync_bytes": int(m.metrics.get("weight_send_bytes", 0)),  # the trainers' payload
        "generator_wait_s": gen.get("gen_wait_s", 0.0),
        "generator_tail_wait_s": gen.get("gen_tail_wait_s", 0.0),  # of generation_s (BatchDone)
        # partial rollouts (rollout.oversample): groups that carried over from an earlier step,
        # and groups dropped as too stale, with their tokens
        "carried_over_share": gen.get("carried_groups", 0) / max(gen.get("groups", 0), 1),
        "dropped_groups": int(gen.get("dropped_groups", 0)),
        "discarded_tokens": int(gen.get("discarded_tokens", 0)),
        **_dynamic_sampling(gen, scored, m.metrics),
        "staleness_max": m.metrics.get("staleness_max"),
        "staleness_mean": m.metrics.get("staleness_mean"),
        "verifier_failures": int(scored.get("verifier_failures", 0)),
        "verifier_timeouts": int(scored.get("verifier_timeouts", 0)),
        "prompts_too_long": int(data_stats.get("prompts_too_long", 0)),
        "step_s": step_s,
        "busy": {**_busy_fractions(routes, gen, scored, m.metrics, step_s), "controller": controller["busy"]},
        "controller_messages": controller["messages"],
        # the controller's busy share in CPU seconds: without the time the OS gave other ranks
        "controller_busy_cpu": controller.get("busy_cpu"),
        "elapsed_s": controller["elapsed_s"],
        "checkpoint_save_s": m.metrics.get("checkpoint_save_s"),
        "nonfinite_skipped": int(m.metrics.get("nonfinite_skipped", 0)),  # the update was not applied
        "trainer": m.metrics,
    }


def _response_metrics(scored, components) -> dict:
    """Per-step figures from the reward ranks' notices: correctness, components, lengths."""
    samples, groups = scored.get("samples", 0), scored.get("groups", 0)
    if not samples:
        return {"correct_mean": None, "reward_components": {}}
    episodes = episode_figures({k[len(_EPISODE) :]: v for k, v in scored.items() if k.startswith(_EPISODE)})
    return {
        **({"episodes": episodes} if episodes else {}),
        "correct_mean": scored["correct_sum"] / samples,
        "reward_components": {label: total / samples for label, total in components.items()},
        "response_length_mean": scored["length_sum"] / samples,
        "response_length_max": int(scored["length_max"]),
        "response_clip_ratio": scored["clipped"] / samples,  # cut at max_new_tokens
        "zero_advantage_group_share": scored["zero_advantage_groups"] / max(groups, 1),
    }


def _dynamic_sampling(gen, scored, trainer: dict) -> dict:
    """rollout.dynamic_sampling's block: groups dropped as all-equal before this step filled, the
    drop rate the spares are sized from, whether the refill bound was reached (all-equal groups
    then train), the trainer's wait for the step's data, and the reward over every scored group."""
    if "drop_rate" not in gen:
        return {}
    filtered, kept = int(gen.get("filtered_groups", 0)), int(scored.get("groups", 0))
    samples = scored.get("samples", 0)
    per_group = samples / max(kept, 1)
    return {
        "dynamic_sampling": {
            "filtered_groups": filtered,
            "filtered_share": filtered / max(filtered + kept, 1),
            "filtered_tokens": int(gen.get("filtered_tokens", 0)),
            "drop_rate": round(gen["drop_rate"], 4),
            "refill_bound_reached": bool(gen.get("refill_bound_reached")),
            "trainer_wait_s": trainer.get("trainer_wait_s"),
            "reward_mean_all": (scored.get("reward_sum", 0.0) + gen.get("filtered_reward_sum", 0.0))
            / max(samples + filtered * per_group, 1),
        }
    }


def _busy_fractions(r: Routes, gen, scored, trainer: dict, step_s: float) -> dict[str, float]:
    """Share of each role's rank-time spent working, over the notices folded into this line.

    Each rank reports its busy seconds with the wall seconds they fell in (``window_s``: since
    its previous notice), so a role's fraction, the sum of the one over the sum of the other,
    is never above 1 however unevenly steps end. Colocated ranks (no windows) and the trainer
    without one fall back to the step's interval.
    """
    if step_s <= 0:
        return {}
    train_s = (trainer.get("train_s") or 0.0) + (trainer.get("weight_send_s") or 0.0)
    gen_busy = gen.get("generate_s", 0.0) + gen.get("weight_load_s", 0.0)
    busy = {
        r.generate_role: _fraction(gen_busy, gen.get("gen_window_s", 0.0), r.generators * step_s),
        "reward": _fraction(scored.get("score_s", 0.0), scored.get("window_s", 0.0), r.rewards * step_s),
    }
    if r.train_role == r.generate_role:  # colocated: generating and training take turns on each rank
        busy[r.train_role] = (gen_busy / r.generators + train_s) / step_s
    else:
        busy[r.train_role] = _fraction(train_s, trainer.get("window_s") or 0.0, step_s)
    return {k: round(v, 4) for k, v in busy.items()}


def _fraction(busy: float, window: float, fallback: float) -> float:
    return busy / window if window > 0 else busy / fallback


def summary(history: list[dict], evals: list[dict], data_stats: dict, wall_s: float) -> dict:
    """``summary.json``: what a user looks at first (training reward, eval figures, data)."""

    def mean_of(key, rows):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    out = {
        "steps": len(history),
        "wall_s": wall_s,
        "train_reward_first10": mean_of("reward_mean", history[:10]),
        "train_reward_last10": mean_of("reward_mean", history[-10:]),
        "train_correct_first10": mean_of("correct_mean", history[:10]),
        "train_correct_last10": mean_of("correct_mean", history[-10:]),
        **data_stats,
    }
    if evals:
        out["eval_first"], out["eval_last"] = evals[0], evals[-1]
        out["eval"] = evals
    return out
