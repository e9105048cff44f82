"""The ``algorithm:`` section: the loss (``roles.algorithm.losses``), the advantage
(``roles.algorithm.advantages``) and the optimisation of ``roles.trainer.TrainerActor``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from roles.sections.base import Section


class LossConfig(Section):
    """The loss of a training step (part of the role map's ``algorithm:`` section)."""

    # aipo: ratio clipped from above only (LlamaRL); grpo and ppo: the PPO-clipped surrogate (the
    # same objective: ppo names it with a critic's GAE advantages, grpo with group baselines)
    loss: Literal["aipo", "grpo", "ppo"] = "aipo"
    rho: float = Field(4.0, ge=1)  # AIPO's clip on the importance ratio pi/mu; paper: 2..10
    clip_eps: float = Field(0.2, gt=0, lt=1)  # GRPO's PPO clip range: ratio kept in [1-eps, 1+eps]
    # The weight of a KL to the reference policy (the model.path weights, kept frozen, sharded):
    # with group advantages (grpo, ppo) a k3 term in the loss, on the training ranks; with
    # advantage: gae a per-token penalty in the reward, -kl_coef (log mu - log ref), on the
    # critic ranks (InstructGPT's). 0 = no reference model is loaded.
    kl_coef: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _kl_with_grpo(self) -> LossConfig:
        if self.kl_coef and self.loss == "aipo" and getattr(self, "advantage", None) != "gae":
            raise ValueError(
                f"algorithm.kl_coef ({self.kl_coef}) applies to loss: grpo or ppo (AIPO has no KL term), or to "
                f"advantage: gae (a penalty in the reward); loss is {self.loss!r}"
            )
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
    # term, which such samples still feed.)
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
        """Whether the KL is a term of the trainers' loss (not the critic's reward penalty)."""
        return self.kl_coef > 0 and self.advantage != "gae"
