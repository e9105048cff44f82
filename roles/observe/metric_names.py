"""The names metrics go by in TensorBoard and W&B, from the lines of ``metrics.jsonl``.

One function per kind of line, so every backend shows the same numbers under the same names,
grouped the way users of those tools expect (``reward/mean``, ``train/loss``, ``timing/...``):
each group is one section of TensorBoard's and W&B's dashboards. ``metrics.jsonl`` keeps its
own flat keys (``summary.json`` and the tools under ``launch/`` read them).
"""

from __future__ import annotations

import math

# metrics.jsonl key -> name, for the per-step figures the controller computes itself.
_STEP = {
    "reward_mean": "reward/mean",
    "correct_mean": "reward/correct_mean",
    "response_length_mean": "response/length_mean",
    "response_length_max": "response/length_max",
    "response_clip_ratio": "response/clip_ratio",
    "zero_advantage_group_share": "response/zero_advantage_group_share",
    "loss": "train/loss",
    "tokens": "train/tokens",
    "step_s": "timing/step_s",
    "generation_s": "timing/generate_s",
    "reward_s": "timing/reward_s",
    "training_s": "timing/train_s",
    "weight_sync_s": "timing/weight_sync_s",
    "generator_wait_s": "timing/generator_wait_s",
    "generator_tail_wait_s": "timing/generator_tail_wait_s",
    "carried_over_share": "rollout/carried_over_share",
    "dropped_groups": "rollout/dropped_groups",
    "discarded_tokens": "rollout/discarded_tokens",
    "checkpoint_save_s": "timing/checkpoint_save_s",
    "staleness_mean": "staleness/mean",
    "staleness_max": "staleness/max",
    "verifier_failures": "reward/verifier_failures",
    "verifier_timeouts": "reward/verifier_timeouts",
    "nonfinite_skipped": "train/nonfinite_skipped",
    "weight_sync_bytes": "weights/sync_bytes",
    "controller_busy_cpu": "busy/controller_cpu",
}

# The trainer's own figures (the ``trainer`` dict of a line): the optimizer and AIPO's ratio.
_TRAINER = {
    "grad_norm": "train/grad_norm",
    "clip_frac": "train/ratio_clip_frac",  # share of tokens whose ratio pi/mu was clipped at rho
    "ratio_mean": "train/ratio_mean",
    "ratio_max": "train/ratio_max",
    "kl_mu_pi": "train/kl_mu_pi",
    # |log pi - log mu| on the sampled tokens: what the generator's precision (and, when
    # max_staleness > 0, its lag) costs; AIPO's ratio corrects both
    "logp_mismatch_mean": "train/logp_mismatch_mean",
    "logp_mismatch_max": "train/logp_mismatch_max",
    "kl_ref": "train/kl_ref",
    "kl_reward_penalty": "train/kl_reward_penalty",  # algorithm.kl_in_reward: per sample
    "trainer_wait_s": "timing/trainer_wait_s",
    # streamed with in-flight updates, a sample's tokens may come from several versions
    "token_staleness_mean": "staleness/token_mean",
    "version_spread_max": "staleness/version_spread_max",
    "mixed_version_samples": "staleness/mixed_version_samples",
    "weight_send_stall_s": "timing/weight_send_stall_s",
}


def _number(value) -> float | None:
    """A finite float, or None for what no dashboard can plot (None, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def step_scalars(record: dict) -> dict[str, float]:
    """The scalars of one ``metrics.jsonl`` line, by dashboard name."""
    out: dict[str, float] = {}

    def put(name, value):
        value = _number(value)
        if value is not None:
            out[name] = value

    for key, name in _STEP.items():
        put(name, record.get(key))
    for label, value in (record.get("reward_components") or {}).items():
        put(f"reward/{label}", value)
    for role, share in (record.get("busy") or {}).items():
        put(f"busy/{role}", share)
    for key, value in (record.get("episodes") or {}).items():  # multi-turn episodes and their tools
        put(f"episodes/{key}", value)
    for key, value in (record.get("dynamic_sampling") or {}).items():  # rollout.dynamic_sampling
        put(f"dynamic_sampling/{key}", float(value) if isinstance(value, bool) else value)
    trainer = record.get("trainer") or {}
    for key, name in _TRAINER.items():
        put(name, trainer.get(key))
    step_s, tokens = _number(record.get("step_s")), _number(record.get("tokens"))
    if step_s and tokens is not None:
        put("perf/tokens_per_s", tokens / step_s)  # response tokens sampled and trained per second
    put("perf/elapsed_s", record.get("elapsed_s"))
    put("perf/policy_version", record.get("policy_version"))
    return out


def eval_scalars(record: dict) -> dict[str, float]:
    """The scalars of one ``eval.jsonl`` line: every figure of the round as ``eval/<key>``
    (``eval/pass@1``, ``eval/pass@k``, ``eval/mean@k``, ``eval/reward_mean``, ...)."""
    skip = {"eval_round", "step", "policy_version", "sampled_versions", "elapsed_s"}
    out = {}
    for key, value in record.items():
        value = _number(value)
        if key not in skip and value is not None:
            out[f"eval/{key}"] = value
    return out
