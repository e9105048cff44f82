"""Reward rank: scores each rollout group and forwards it to its trainer."""

from __future__ import annotations

import time

from roles.messages import Rollout, Scored
from roles.verifiers import SafeVerifier, resolve
from runtime import Actor, Envelope, handles


class RewardActor(Actor):
    def __init__(self, mailbox, cfg, tokenizer):
        super().__init__(mailbox)
        self.tokenizer = tokenizer
        self.verifier = SafeVerifier(resolve(cfg.task.verifier), cfg.task.verifier_timeout_s)
        self.train_role = cfg.world.train_role  # "trainer", or "colocated" in the baseline mode
        self.n_trainers = cfg.world.counts()[self.train_role]

    @handles(Rollout)
    def on_rollout(self, env: Envelope) -> None:
        r: Rollout = env.msg
        t0 = time.perf_counter()
        failures, timeouts = self.verifier.failures, self.verifier.timeouts
        with self.spans.span("score"):
            prompt = self.tokenizer.decode(r.prompt_ids, skip_special_tokens=True)
            r.rewards = [
                self.verifier(prompt, self.tokenizer.decode(ids, skip_special_tokens=True))
                for ids in r.response_ids
            ]
        score_s = time.perf_counter() - t0
        r.timings["score_s"] = score_s
        # Data-parallel trainers each take a fixed share of the groups of every step.
        self.mailbox.send((self.train_role, r.group_id % self.n_trainers), r)
        self.mailbox.send(("controller", 0), Scored(
            step=r.step, groups=1, score_s=score_s,
            failures=self.verifier.failures - failures, timeouts=self.verifier.timeouts - timeouts,
        ))
