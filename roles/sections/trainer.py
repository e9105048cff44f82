"""The ``algorithm:`` section: the loss (``roles.algorithm.losses``), the advantage
(``roles.algorithm.advantages``) and the optimisation of ``roles.trainer.TrainerActor``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from roles.sections.base import Section


class LossConfig(Section):
    """The loss of a training step (part of the role map's ``algorithm:`` section); the
    formulas and what combines with what: docs/algorithms.md."""

    # aipo: ratio clipped from above only (LlamaRL); grpo and ppo: the PPO-clipped surrogate (the
    # same objective: ppo names it with a critic's GAE advantages, grpo with group baselines);
    # decoupled: AReaL's decoupled PPO (behaviour mu, proximal policy pi_prox)
    loss: Literal["aipo", "grpo", "ppo", "decoupled"] = "aipo"
    rho: float = Field(4.0, ge=1)  # AIPO's clip on the importance ratio pi/mu; paper: 2..10
    clip_eps: float = Field(0.2, gt=0, lt=1)  # PPO's clip range: ratio kept in [1-eps, 1+eps_high]
    # DAPO's clip-higher: the upper clip 1 + clip_eps_high (DAPO: 0.28); None: clip_eps
    clip_eps_high: float | None = Field(None, gt=0, le=10)
    # decoupled: pi_prox is the policy at the step's start (recompute: free, one update per
    # step) or A-3PO's log-linear mix of mu and pi by the token's staleness (loglinear)
    proximal: Literal["recompute", "loglinear"] = "recompute"
    decoupled_cap: float | None = Field(None, ge=1)  # decoupled: truncate w = pi_prox/mu here; None: not
    # Generator/trainer mismatch, orthogonal to the loss: tis (weight min(pi/mu, correction_cap)),
    # icepop (tokens with pi/mu outside [low, high] masked), seq_mask (whole sequences masked
    # whose geometric-mean pi/mu is outside [low, high])
    correction: Literal["none", "tis", "icepop", "seq_mask"] = "none"
    correction_cap: float = Field(2.0, ge=1)
    correction_low: float = Field(0.5, gt=0, le=1)
    correction_high: float = Field(2.0, ge=1)
    # How the step's token terms become one loss: token_mean (every token alike), seq_mean_token_sum,
    # seq_mean_token_mean, constant (Dr. GRPO: token sums / loss_agg_constant, per sequence)
    loss_agg: Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"] = "token_mean"
    loss_agg_constant: int | None = Field(None, gt=0, le=1 << 20)  # None: rollout.max_new_tokens
    # The weight of a KL to the reference policy (the model.path weights, kept frozen, sharded):
    # with group advantages (grpo, ppo, decoupled) a kl_estimator term in the loss, on the
    # training ranks; with advantage: gae a per-token penalty in the reward, -kl_coef (log mu -
    # log ref), on the critic ranks (InstructGPT's). 0 = no reference model is loaded.
    kl_coef: float = Field(0.0, ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"  # Schulman's estimators of KL(pi || ref)
    # With group advantages: take the KL out of the loss and into each sample's reward before its
    # group baseline, r - kl_coef x sum_t k(log ref - log mu) (any loss, AIPO too)
    kl_in_reward: bool = False
    entropy_coef: float = Field(0.0, ge=0, le=1)  # a bonus on the policy's entropy at each token

    @model_validator(mode="after")
    def _kl_with_grpo(self) -> LossConfig:
        if getattr(self, "advantage", None) == "gae" and self.kl_in_reward:
            raise ValueError("algorithm.kl_in_reward: with advantage: gae the critic's reward holds the KL already")
        if self.kl_in_reward and not self.kl_coef:
            raise ValueError("algorithm.kl_in_reward puts the kl_coef term in the reward, but kl_coef is 0")
        if self.kl_coef and self.loss == "aipo" and getattr(self, "advantage", None) != "gae" and not self.kl_in_reward:
            raise ValueError(
                f"algorithm.kl_coef ({self.kl_coef}) applies to loss: grpo or ppo (AIPO has no KL term), to "
                "decoupled, or as a penalty in the reward (kl_in_reward: true, or advantage: gae); "
                f"loss is {self.loss!r}"
            )
        return self

    @model_validator(mode="after")
    def _options_fit_the_loss(self) -> LossConfig:
        given = self.model_fields_set
        clipped = ("grpo", "ppo", "decoupled")
        if "clip_eps_high" in given and self.clip_eps_high is not None and self.loss not in clipped:
            raise ValueError(
                f"algorithm.clip_eps_high applies to loss: {', '.join(clipped)} (AIPO clips its weight at rho)"
            )
        for name, default in (("proximal", "recompute"), ("decoupled_cap", None)):
            if getattr(self, name) != default and self.loss != "decoupled":
                raise ValueError(f"algorithm.{name} applies to loss: decoupled; loss is {self.loss!r}")
        if self.correction == "tis" and self.loss in ("aipo", "decoupled"):
            weight = "min(pi/mu, rho)" if self.loss == "aipo" else "pi_prox/mu, truncated at decoupled_cap"
            raise ValueError(
                f"algorithm.correction: tis does not combine with loss: {self.loss}, which already carries its "
                f"own truncated importance weight ({weight}): a second one would weight each token twice"
            )
        return self

    @model_validator(mode="after")
    def _thresholds_fit_the_correction(self) -> LossConfig:
        given = self.model_fields_set
        reads = {"tis": ("correction_cap",), "icepop": ("correction_low", "correction_high")}
        reads["seq_mask"] = reads["icepop"]
        for name in ("correction_cap", "correction_low", "correction_high"):
            if name in given and name not in reads.get(self.correction, ()):
                raise ValueError(
                    f"algorithm.{name} is a threshold of another correction; correction is {self.correction!r}"
                )
        if self.correction_low >= self.correction_high:
            raise ValueError(
                f"algorithm.correction_low ({self.correction_low}) must be below "
                f"correction_high ({self.correction_high})"
            )
        if "loss_agg_constant" in given and self.loss_agg_constant is not None and self.loss_agg != "constant":
            raise ValueError(
                f"algorithm.loss_agg_constant applies to loss_agg: constant; loss_agg is {self.loss_agg!r}"
            )
        if "kl_estimator" in given and getattr(self, "advantage", None) == "gae":
            raise ValueError("algorithm.kl_estimator: with advantage: gae the KL is the critic's reward penalty, k1")
        return self


class SimTrainConfig(Section):
    """``algorithm.sim``: a modelled training step, for benchmarks of the control plane."""

    per_token_s: float = Field(0.0001, ge=0, le=10)  # per response token on this trainer rank
    per_step_s: float = Field(0.0, ge=0, le=3600)  # fixed cost of a step (optimizer, collectives)


class TrainerConfig(LossConfig):
    """The role map's ``algorithm:`` section: the loss, the advantage and the optimisation."""

    # group_*, leave_one_out: each sample against the other samples of its prompt; gae: per
    # token, from a critic's values (world.critic ranks, the critic: section)
    advantage: Literal["group_mean", "group_std", "leave_one_out", "gae"] = "group_mean"
    gamma: float = Field(1.0, ge=0, le=1)  # GAE's discount per token
    lam: float = Field(0.95, ge=0, le=1)  # GAE's lambda: 0 one-step TD, 1 Monte Carlo returns
    # GAE: scale each step's advantages to mean 0, std 1 over its tokens (PPO's whitening)
    whiten_advantages: bool = True
    lr: float = Field(3.0e-5, gt=0)  # AdamW learning rate
    weight_decay: float = Field(0.0, ge=0)  # AdamW's decoupled weight decay
    grad_clip: float = Field(1.0, ge=0)  # max gradient norm; 0 disables clipping
    micro_batch: int = Field(64, gt=0, le=1 << 16)  # sequences per forward/backward (gradient accumulation)
    # Leave out of the forward/backward the groups whose samples all scored the same: their
    # advantages are 0, so the update is unchanged and their compute is saved. (Not with a KL
    # or entropy term, which such samples still feed.)
    skip_zero_advantage: bool = True
    # A step whose loss or gradient is not finite (NaN, inf) is never applied. skip: the run
    # goes on without that update (counted as nonfinite_skipped in the metrics, and warned);
    # stop: the job stops with an error naming the step.
    on_nonfinite: Literal["skip", "stop"] = "skip"
    # A benchmark instrument (bench/scale.py), not training: each step sleeps for a modelled
    # time (per_step_s + per_token_s x this rank's response tokens) and leaves the weights as
    # they are; the push, the metrics and everything around the step stay real. None: train.
    sim: SimTrainConfig | None = None

    @property
    def kl_in_loss(self) -> bool:
        """Whether the KL is a term of the trainers' loss (not a penalty in the reward)."""
        return self.kl_coef > 0 and self.advantage != "gae" and not self.kl_in_reward

    @property
    def kl_in_group_reward(self) -> bool:
        """Whether the trainers subtract the KL from each sample's reward before its group baseline."""
        return self.kl_coef > 0 and self.advantage != "gae" and self.kl_in_reward

    @property
    def needs_reference(self) -> bool:
        """Whether the trainers hold the frozen reference model (a KL in their loss or rewards)."""
        return self.kl_in_loss or self.kl_in_group_reward

    @property
    def trains_all_groups(self) -> bool:
        """Whether all-equal groups still feed the gradient (a KL or entropy term has one there)."""
        return self.kl_in_loss or self.entropy_coef > 0
