"""A trainer's share of one step, from scored groups to the step's figures: the rows it trains
on (each sample with its group advantage, all-equal groups left out), the micro-batches' tally
of token-weighted figures, and the metrics the step reports.

Plain data and arithmetic: knows nothing of the model, the optimizer or the other trainers
(``roles.trainer`` runs the passes, ``roles.trainer_group`` the collectives).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np
import torch

from roles.algorithm import advantages as adv_lib
from roles.protocol import Rollout
from roles.sections.trainer import TrainerConfig


def pad(arrays, pad_value, dtype):
    longest = max(len(a) for a in arrays)
    out = torch.full((len(arrays), longest), pad_value, dtype=dtype)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = torch.as_tensor(a, dtype=dtype)
    return out


@dataclass
class StepBatch:
    """This rank's share of a step: one row per sample trained on, and the figures of all."""

    prompts: list = field(default_factory=list)
    responses: list = field(default_factory=list)
    mus: list = field(default_factory=list)  # the generators' log-probs of the sampled tokens
    advs: list = field(default_factory=list)
    masks: list = field(default_factory=list)  # per row: its loss mask (episodes), or None: every token
    rewards: list = field(default_factory=list)  # of every sample, skipped ones too
    staleness: list = field(default_factory=list)  # per group: versions behind the trained one
    # per row: versions behind, per token (an array) or per sample; only with proximal: loglinear
    stale: list = field(default_factory=list)
    tokens: int = 0  # every sample's response tokens: what the token mean divides by
    sequences: int = 0  # every sample with a trained token: what the sequence means divide by
    id_sum: float = 0.0  # a fingerprint of the examples trained (resume checks it)
    id_sqsum: float = 0.0
    kl_penalty_sum: float = 0.0  # algorithm.kl_in_reward: the penalties taken from the rewards

    def rows(self, sl: slice) -> tuple:
        return self.prompts[sl], self.responses[sl], self.mus[sl], self.advs[sl], self.masks[sl]

    def stale_rows(self, sl: slice | None) -> list:
        """The rows' staleness (``sl`` None: a filler's, 0)."""
        return [0] if sl is None else self.stale[sl]

    def filler(self, first: Rollout) -> tuple:
        """A row for a zero-weight pass: any real one (``first``'s if this rank trains on none)."""
        if self.responses:
            return self.rows(slice(0, 1))
        response = first.response_ids[0]
        return [first.prompt_ids], [response], [first.logprobs[0]], [np.zeros(len(response), np.float32)], [None]


def collect(groups: list[Rollout], algo: TrainerConfig, version: int, kl_penalties=None) -> StepBatch:
    """The step's groups flattened to rows, each sample with its advantage: its group's
    (one number), or with ``advantage: gae`` the critic's per-token ones (an array).
    ``kl_penalties``: per group, each sample's KL penalty (``algorithm.kl_in_reward``), taken
    from its reward before the group baseline (the rewards reported stay the task's)."""
    batch = StepBatch()
    for k, g in enumerate(groups):
        batch.id_sum, batch.id_sqsum = batch.id_sum + g.example_id, batch.id_sqsum + float(g.example_id) ** 2
        batch.rewards.extend(g.rewards)
        batch.staleness.append(version - g.policy_version)
        batch.tokens += trained_tokens(g)
        batch.sequences += trained_sequences(g)
        if algo.advantage == "gae":
            if g.token_advantages is None:
                raise RuntimeError(f"group {g.group_id} reached the trainer without the critic's advantages")
            for ids, lp, a in zip(g.response_ids, g.logprobs, g.token_advantages):
                batch.prompts.append(g.prompt_ids)
                batch.responses.append(ids)
                batch.mus.append(lp)
                batch.advs.append(np.asarray(a, np.float32))
                batch.masks.append(None)
            if algo.proximal == "loglinear":  # only A-3PO's proximal policy reads token ages
                batch.stale.extend(token_staleness(g, version))
            continue
        rewards = np.asarray(g.rewards, np.float64)
        if kl_penalties is not None:
            rewards = rewards - kl_penalties[k]
            batch.kl_penalty_sum += float(np.sum(kl_penalties[k]))
        if algo.skip_zero_advantage and not algo.trains_all_groups and np.ptp(rewards) == 0:
            # Every sample scored the same: all advantages are 0, so the group adds
            # nothing to the gradient. Its tokens still count in the token mean,
            # which keeps the update exactly what training on it would give.
            continue
        a = adv_lib.group_advantages(rewards.tolist() if kl_penalties is not None else g.rewards, algo.advantage)
        masks = g.loss_masks or [None] * len(g.response_ids)
        for ids, lp, ai, m in zip(g.response_ids, g.logprobs, a.tolist(), masks):
            batch.prompts.append(g.prompt_ids)
            batch.responses.append(ids)
            batch.mus.append(lp)
            batch.advs.append(ai)
            batch.masks.append(m)
        if algo.proximal == "loglinear":
            batch.stale.extend(token_staleness(g, version))
    return batch


def token_staleness(g: Rollout, version: int) -> list:
    """Per sample, how many versions behind ``version`` its tokens are: the group's one number,
    or an array per token when a streamed sample's tokens span versions."""
    from roles.engines.requests import expand_segments

    if g.version_segments is None:
        return [version - g.policy_version] * len(g.response_ids)
    return [version - expand_segments(s, len(ids)) for s, ids in zip(g.version_segments, g.response_ids)]


def trained_tokens(g: Rollout) -> int:
    """The group's tokens the loss covers: every response token, or an episode's sampled ones
    (its observations are masked)."""
    if g.loss_masks is None:
        return sum(len(x) for x in g.response_ids)
    return int(sum(int(np.asarray(m).sum()) for m in g.loss_masks))


def trained_sequences(g: Rollout) -> int:
    """The group's samples with at least one token the loss covers."""
    if g.loss_masks is None:
        return sum(len(x) > 0 for x in g.response_ids)
    return sum(int(np.asarray(m).sum()) > 0 for m in g.loss_masks)


def loss_mask(masks: list, like: torch.Tensor) -> torch.Tensor:
    """``like``'s mask (real response tokens) narrowed to the rows' loss masks, where they have one."""
    if all(m is None for m in masks):
        return like
    rows = [np.ones(int(like.shape[1]), np.uint8) if m is None else np.asarray(m, np.uint8) for m in masks]
    return like & pad(rows, 0, torch.bool)[:, : like.shape[1]].to(like.device)


# Loss-module figures that are a micro-batch's maximum: the step's is the largest of them.
_MICRO_BATCH_MAXIMA = ("ratio_max",)


@dataclass
class Tally:
    """The micro-batches' figures so far, token-weighted."""

    loss_sum: float = 0.0
    trained_tokens: float = 0.0
    sums: collections.Counter = field(default_factory=collections.Counter)
    maxima: dict = field(default_factory=dict)
    mismatch_max: float = 0.0

    def add(self, loss: float, m: dict, n_tok: float, weight: float, units: float | None = None) -> None:
        """``units``: what ``loss`` is a mean over, when not the tokens (``algorithm.loss_agg``)."""
        self.loss_sum += loss * (n_tok if units is None else units)
        self.trained_tokens += n_tok
        for k, v in m.items():
            if k in _MICRO_BATCH_MAXIMA:
                # A zero-weight pass trained on nothing: its maxima are not the step's (but
                # the key is there, as on every trainer: reduce_metrics needs the same keys).
                self.maxima[k] = max(self.maxima.get(k, 0.0), float(v) if weight else 0.0)
            elif k != "n_tokens":  # the micro-batch's: the step's is trained_tokens
                self.sums[k] += float(v) * n_tok


def version_figures(groups: list[Rollout], version: int) -> dict[str, float]:
    """How old the step's tokens are, token by token: a streamed sample's tokens may span
    versions (in-flight updates; ``Rollout.version_segments``), its staleness is its oldest's."""
    from roles.engines.requests import expand_segments

    tokens = stale_sum = mixed = spread = 0
    for g in groups:
        for i, ids in enumerate(g.response_ids):
            if g.version_segments is None:
                versions = np.full(len(ids), g.policy_version)
            else:
                versions = expand_segments(g.version_segments[i], len(ids))
            if len(versions):
                tokens += len(versions)
                stale_sum += int((version - versions).sum())
                width = int(versions.max() - versions.min())
                mixed += width > 0
                spread = max(spread, width)
    return {
        "token_staleness_mean": stale_sum / max(tokens, 1),
        "version_spread_max": float(spread),  # the most versions one sample's tokens span, less one
        "mixed_version_samples": float(mixed),  # samples whose tokens more than one version sampled
    }


def step_metrics(batch: StepBatch, tally: Tally, grad_norm: float, finite: bool, train_s: float) -> dict[str, float]:
    metrics = {
        # The objective's token mean over every sample (skipped ones contribute 0 to it).
        "loss": tally.loss_sum / max(batch.tokens, 1),
        "reward_mean": sum(batch.rewards) / max(len(batch.rewards), 1),
        "tokens": float(batch.tokens),
        "samples": float(len(batch.rewards)),
        "trained_samples": float(len(batch.responses)),  # the rest were in all-equal groups
        "staleness_max": float(max(batch.staleness)),
        "staleness_mean": sum(batch.staleness) / len(batch.staleness),
        "grad_norm": grad_norm,
        "nonfinite_skipped": 0.0 if finite else 1.0,
        "example_id_sum": batch.id_sum,
        "example_id_sqsum": batch.id_sqsum,
        "train_s": train_s,
    }
    # Ratio and KL figures describe the tokens trained on: means over them, and maxima.
    metrics.update({k: v / max(tally.trained_tokens, 1) for k, v in tally.sums.items() if k != "loss"})
    metrics.update(tally.maxima)
    metrics["trained_tokens"] = tally.trained_tokens
    metrics["logp_mismatch_max"] = tally.mismatch_max
    if batch.kl_penalty_sum:
        metrics["kl_reward_penalty"] = batch.kl_penalty_sum / max(len(batch.rewards), 1)  # per sample
    return metrics
