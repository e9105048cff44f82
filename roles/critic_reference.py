"""The critic's KL penalty: with ``algorithm.kl_coef`` and GAE advantages, each response token's
reward is ``-kl_coef * (log mu - log ref)``, the generators' log-prob of the sampled token
against the frozen starting weights' (``model.path``), plus the task's reward at the last
token (InstructGPT's per-token KL in the reward, as OpenRLHF and verl's PPO do).

The reference is held by the critic ranks, sharded over them like the value model, so its
forward passes are collective: every critic rank runs the same number (filler rows when it
has fewer).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from roles.algorithm.logprobs import response_logprobs
from transports.torch_dist import agree_max


class KLPenalty:
    def __init__(self, model_config, group, kl_coef: float, temperature: float, micro_batch: int):
        from roles.policy.model import load_model
        from roles.policy.sharding import shard_model

        self.reference = shard_model(load_model(model_config).requires_grad_(False).eval(), group)
        self.group, self.kl_coef, self.temperature, self.micro_batch = group, kl_coef, temperature, micro_batch

    @torch.no_grad()
    def token_rewards(self, prompts: Sequence, responses: Sequence, mus: Sequence) -> list[np.ndarray]:
        """Per response token, ``-kl_coef * (mu - ref)`` (float32)."""
        starts = list(range(0, len(responses), self.micro_batch))
        passes = agree_max(self.group, len(starts))[0] if self.group is not None else len(starts)
        out: list[np.ndarray] = []
        for k in range(passes):
            if k >= len(starts):  # another critic rank has more rows: a pass to stay in step
                response_logprobs(self.reference, [prompts[0] if prompts else [0]], [[0]], self.temperature)
                continue
            rows = slice(starts[k], starts[k] + self.micro_batch)
            ref, _ = response_logprobs(self.reference, prompts[rows], responses[rows], self.temperature)
            for r, (ids, mu) in zip(ref.cpu().numpy(), zip(responses[rows], mus[rows])):
                n = len(ids)
                out.append((-self.kl_coef * (np.asarray(mu[:n], np.float32) - r[:n])).astype(np.float32))
        return out
