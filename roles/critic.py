"""Critic rank: the value model of PPO. For each step it takes its share of the scored groups
(``group_id % critics``), computes each response token's value, the GAE advantages and
returns (``roles.algorithm.gae``), sends every group with its advantages on to its trainer,
and only then trains the value model on the returns (the clipped value loss): a trainer waits
for a group's advantages, never for the critic's update. The values of step s come from the
value model trained on steps < s, so the critic is never more than one update behind.

Several critic ranks shard the value model (FSDP2) and so run in lockstep: once per turn of
their loops they agree (one small all-reduce) whether all have their share of the next step,
whether a checkpoint is to be written, and whether all are stopping; they act on it together.
A checkpoint holds the value model and its optimizer (``<checkpoint>/critic``). One the
schedule has due (``checkpoint.every_steps``) is written right after the step it ends with,
before the controller asks (the next step's groups may come first); one it has not (a stop
signal's) at the first turn at which any critic rank has been asked for it, which in
asynchronous mode may be a step later (such a resume is not bit-identical).
"""

from __future__ import annotations

import collections
import time

import numpy as np

from roles.algorithm.gae import gae_batch
from roles.critic_protocol import CriticDone
from roles.protocol import CONTROLLER, ForwardsStopSignals, Rollout, SaveState, StateSaved
from roles.sections.critic import CriticConfig
from runtime import Actor, Envelope, handles


class CriticActor(ForwardsStopSignals, Actor):
    Config = CriticConfig  # the role map's critic: section

    def __init__(
        self,
        mailbox,
        config: CriticConfig,
        algorithm,
        *,
        rollout,
        schedule,
        routes,
        value_model,
        group=None,
        checkpoints=None,
        resume=None,
        kl_penalty=None,
    ):
        """``value_model``: ``values``, ``train_step``, ``save``, ``load`` (``roles.value``);
        ``algorithm``: the role map's ``algorithm:`` section (gamma, lam, whitening);
        ``group``: the critic ranks' process group (None: one critic); ``kl_penalty``: a
        ``roles.critic_reference.KLPenalty`` when ``algorithm.kl_coef`` > 0."""
        super().__init__(mailbox)
        self.config, self.algorithm = config, algorithm
        self.schedule, self.routes, self.model, self.group = schedule, routes, value_model, group
        self.checkpoints = checkpoints
        self.kl_penalty = kl_penalty
        self._kl: list[np.ndarray] = []  # the last step's KL penalties (its figures)
        self.groups_per_rank = rollout.prompts_per_step // routes.critics
        self.buffers: dict[int, list[Rollout]] = collections.defaultdict(list)
        self.step_index = 0
        self.asked: set[int] = set()  # checkpoints the controller asked this rank for
        self.saved: set[int] = set()  # checkpoints written (with the other critic ranks)
        self.is_leader = mailbox.role_table.index == 0
        if resume is not None:
            self.model.load(resume.path)  # its critic/ folder
            self.step_index = resume.steps_done

    @handles(Rollout)
    def on_rollout(self, env: Envelope) -> None:
        self.buffers[env.msg.step].append(env.msg)

    @handles(SaveState)
    def on_save_state(self, env: Envelope) -> None:
        self.asked.add(env.msg.steps_done)
        self._answer()

    def step(self) -> bool:
        return self._turn(stopping=False)[0]

    def _turn(self, stopping: bool) -> tuple[bool, bool]:
        """One turn in lockstep with the other critic ranks. Returns (did work, all stopping)."""
        ready = len(self.buffers.get(self.step_index, ())) >= self.groups_per_rank
        ready = ready and self.step_index < self.schedule.steps
        save = max(self.asked - self.saved, default=-1)
        ready, save, all_stopping = self._agree(ready, save, stopping)
        did = False
        if save >= 0 and save not in self.saved:
            self.model.save(self.checkpoints.partial(save))  # into its critic/ folder
            self.saved.add(save)
            self._answer()
            did = True
        if ready:
            self._critic_step(self.buffers.pop(self.step_index))
            self.step_index += 1
            # A checkpoint the schedule says ends with this step holds the value model as it is
            # now, before the next step's update (which may come before the controller asks).
            if self.checkpoints is not None and self.schedule.checkpoint_due(self.step_index):
                self.model.save(self.checkpoints.partial(self.step_index))
                self.saved.add(self.step_index)
                self._answer()
            did = True
        return did, all_stopping

    def _agree(self, ready: bool, save: int, stopping: bool) -> tuple[bool, int, bool]:
        if self.group is None:
            return ready, save, stopping
        from transports.torch_dist import agree_max, agree_min

        (save,) = agree_max(self.group, save)
        ready, stopping = agree_min(self.group, int(ready), int(stopping))
        return bool(ready), save, bool(stopping)

    def _answer(self) -> None:
        for steps in sorted(self.asked & self.saved):
            self.mailbox.send(CONTROLLER, StateSaved(steps_done=steps))
            self.asked.discard(steps)

    def _critic_step(self, groups: list[Rollout]) -> None:
        """Values, advantages on to the trainers, then the value model's update: the first
        update from the very forward passes that gave the values (``values_and_update``)."""
        t0 = time.perf_counter()
        prompts = [g.prompt_ids for g in groups for _ in g.response_ids]
        responses = [ids for g in groups for ids in g.response_ids]
        sent: dict = {}

        def send_advantages(values: list[np.ndarray]) -> list[np.ndarray]:
            sent["returns"] = returns = self._send_advantages(groups, prompts, responses, values)
            sent["at"] = time.perf_counter()
            return returns

        with self.spans.span("train"):
            values, metrics = self.model.values_and_update(prompts, responses, send_advantages)
            returns = sent["returns"]
            for _ in range(self.config.updates_per_step - 1):
                metrics = self.model.train_step(prompts, responses, returns, values, self.config.value_clip)
        values_s = sent["at"] - t0
        metrics = {
            **metrics,
            **_value_figures(values, returns),
            "values_s": values_s,
            "critic_train_s": time.perf_counter() - t0 - values_s,
        }
        if self.kl_penalty is not None:  # k1 KL(mu || ref) per token, over this rank's share
            tokens = max(sum(len(t) for t in self._kl), 1)
            metrics["kl_ref_mean"] = -float(sum(t.sum() for t in self._kl)) / self.kl_penalty.kl_coef / tokens
        if self.is_leader:
            self.mailbox.send(CONTROLLER, CriticDone(step=groups[0].step, metrics=metrics))

    def _send_advantages(self, groups, prompts, responses, values) -> list[np.ndarray]:
        """GAE (with the KL penalty, whitened) from ``values``; each group on to its trainer with
        its advantages; the returns the value model learns."""
        rewards = [float(r) for g in groups for r in g.rewards]
        token_rewards = None
        if self.kl_penalty is not None:
            mus = [lp for g in groups for lp in g.logprobs]
            token_rewards = self.kl_penalty.token_rewards(prompts, responses, mus)
            self._kl = token_rewards
        advantages, returns = gae_batch(values, rewards, self.algorithm.gamma, self.algorithm.lam, token_rewards)
        if self.algorithm.whiten_advantages:
            advantages = self._whiten(advantages)
        start = 0
        for g in groups:
            n = len(g.response_ids)
            g.token_advantages = [np.asarray(a, np.float32) for a in advantages[start : start + n]]
            start += n
            self.mailbox.send(self.routes.trainer_for(g.group_id), g)
        return returns

    def _whiten(self, advantages: list[np.ndarray]) -> list[np.ndarray]:
        """Mean 0, std 1 over every token of the step, across the critic ranks."""
        flat = np.concatenate(advantages) if advantages else np.zeros(0, np.float32)
        sums = np.array([flat.size, flat.sum(dtype=np.float64), np.square(flat, dtype=np.float64).sum()])
        if self.group is not None:
            import torch
            import torch.distributed as dist

            t = torch.from_numpy(sums)
            dist.all_reduce(t, group=self.group)
            sums = t.numpy()
        count, total, squares = sums
        mean = total / max(count, 1.0)
        std = np.sqrt(max(squares / max(count, 1.0) - mean**2, 0.0))
        return [((a - mean) / (std + 1e-8)).astype(np.float32) for a in advantages]

    def on_stop(self, reason: str) -> None:
        if self.group is not None:  # the others may still be inside a turn: take part until all stop
            while not self._turn(stopping=True)[1]:
                pass


def _value_figures(values: list[np.ndarray], returns: list[np.ndarray]) -> dict[str, float]:
    v = np.concatenate(values) if values else np.zeros(0)
    r = np.concatenate(returns) if returns else np.zeros(0)
    var = float(np.var(r)) if r.size else 0.0
    return {
        "value_mean": float(v.mean()) if v.size else 0.0,
        "return_mean": float(r.mean()) if r.size else 0.0,
        # 1: the values explain the returns; 0: no better than their mean
        "explained_variance": 1.0 - float(np.var(r - v)) / var if var > 0 else 0.0,
    }
