"""Trainer rank: collects scored groups for a step, takes an AIPO (or GRPO) step, pushes weights.

A step (``train_on``) reads like a training loop's: collect the rows (``roles.train_batch``),
each micro-batch's loss and backward pass, apply the update, the step's figures; the
collectives over the trainers are ``roles.trainer_group``'s.

With several trainer ranks the policy is sharded (FSDP2) over the trainers' communicator
and each rank trains on its fixed share of the step's groups; the loss is scaled so that
FSDP's gradient average equals the token mean over the *whole* step's batch.

Groups whose samples all scored the same carry zero advantages and are left out of the
forward/backward passes (``algorithm.skip_zero_advantage``); their tokens still count in the
token mean, so the update is unchanged. A training rank left with fewer micro-batches than
another runs zero-weight passes, so that FSDP's collectives (and the metrics' all-reduce,
which needs the same keys on every rank) stay in step. GRPO's optional KL
term reads the frozen reference model that ``roles.policy.model.load_policy`` loads when ``kl_coef > 0``.
"""

from __future__ import annotations

import collections
import math
import time

import numpy as np
import torch

from roles.algorithm import losses
from roles.algorithm.aggregation import step_units
from roles.algorithm.kl import kl_terms
from roles.algorithm.logprobs import response_logprobs
from roles.checkpoint.lora_base import record_base
from roles.checkpoint.plan import CheckpointPlan
from roles.checkpoint.resume import Resume
from roles.checkpoint.rng import save_rng
from roles.checkpoint.trainer_state import inject_fault, load_trainer_state, save_trainer_state
from roles.models.lora import is_adapter
from roles.protocol import CONTROLLER, Preempt, Rollout, RolloutConfig, Routes, Schedule, StepDone, WeightsPushed
from roles.sections.trainer import TrainerConfig
from roles.train_batch import StepBatch, Tally, collect, loss_mask, pad, step_metrics, version_figures
from roles.trainer_group import TrainerGroup
from runtime import Actor, Envelope, handles
from runtime.faults import fault_injected
from runtime.loop_clock import LOOP


class TrainerActor(Actor):
    Config = TrainerConfig  # the role map's algorithm: section

    def __init__(
        self,
        mailbox,
        config: TrainerActor.Config,
        *,
        rollout: RolloutConfig,
        schedule: Schedule,
        routes: Routes,
        policy,
        sender,
        dp_group=None,
        on_finish=None,
        allreduce_grads=False,
        checkpoints: CheckpointPlan | None = None,
        resume: Resume | None = None,
        warmup_steps: int = 0,
    ):
        """``policy`` holds the (possibly FSDP-sharded) HF causal LM; ``sender`` pushes its weights.
        ``rollout``: the step's shape and the sampling temperature (the log-probs use it too).
        ``allreduce_grads``: the model is a full replica per rank (not FSDP): gradients are
        averaged over ``dp_group`` after the backward passes. ``checkpoints``: where this rank
        writes its part of a checkpoint; ``resume``: the checkpoint to continue from (loaded
        here, collectively over the trainers). ``warmup_steps``: critic.warmup_steps."""
        super().__init__(mailbox)
        self.config = config
        self.temperature = rollout.temperature
        self.schedule = schedule
        self.routes = routes
        self.model = policy.model
        self.reference = getattr(policy, "reference", None)  # frozen; GRPO's KL anchor
        if config.needs_reference and self.reference is None:
            raise ValueError("algorithm.kl_coef > 0 needs the policy's reference model")
        self.local_params = policy.local_params  # callable -> what the weight sender pushes
        self.lora_base = getattr(policy, "lora", None) and policy.tokenizer_dir  # LoRA: saves adapters only
        self.sender = sender
        self.dp_group = dp_group  # torch.distributed group of the trainers (None: one trainer)
        self.trainers = TrainerGroup(dp_group, routes.trainers)  # the step's collectives over them
        self.allreduce_grads = allreduce_grads and dp_group is not None
        self.is_leader = mailbox.role_table.index == 0
        trained = [p for p in self.model.parameters() if p.requires_grad]  # LoRA: the adapters only
        self.optimizer = torch.optim.AdamW(trained, lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.999))
        # A WeightSender with copy=False sends from the parameters themselves: the next update must
        # not overwrite them before they are out (colocated ranks reload synchronously: no sender).
        self._sends_read_params = not getattr(sender, "copy", True)
        if self._sends_read_params:
            sender.guard(self.optimizer)
        self.version = 0  # policy version = optimizer steps taken
        self.step_index = 0  # the step being collected
        self.groups_per_rank = rollout.prompts_per_step // self.trainers.size
        self.agg_constant = config.loss_agg_constant or rollout.max_new_tokens  # Dr. GRPO's length
        self.buffers: dict[int, list[Rollout]] = collections.defaultdict(list)
        self._collect_started: float | None = None
        self._last_done = time.perf_counter()  # when the previous StepDone went (window_s)
        self.last_metrics: dict[str, float] = {}
        self.checkpoints = checkpoints
        self.warmup_steps = warmup_steps
        self._preempt = False  # a stop signal reached this rank, or a Preempt message did
        if resume is not None:
            self._resume(resume)
        self.on_finish = on_finish  # called at Stop (e.g. to save the policy)

    @handles(Rollout)
    def on_rollout(self, env: Envelope) -> None:
        r: Rollout = env.msg
        if r.step < self.step_index:
            raise RuntimeError(f"trainer got a group for step {r.step} after training it (now {self.step_index})")
        self.buffers[r.step].append(r)

    def step(self) -> bool:
        if self.step_index >= self.schedule.steps:
            return False
        groups = self.buffers.get(self.step_index, [])
        if len(groups) < self.groups_per_rank:
            if self._collect_started is None:
                self._collect_started = time.perf_counter()
            return False
        # How long this rank sat idle waiting for the step's last group (0 if it was there).
        wait_s = 0.0 if self._collect_started is None else time.perf_counter() - self._collect_started
        del self.buffers[self.step_index]
        with self.spans.span("train"):
            metrics = self.train_on(groups)
        metrics["trainer_wait_s"] = wait_s
        if self._sends_read_params:  # how long this step's update waited for the last push
            metrics["weight_send_stall_s"] = self.sender.stats.stall_s
        self._collect_started = None
        t0 = time.perf_counter()
        self.version += 1
        # After the last step nobody samples again: pushing would only delay shutdown.
        if self._push(self.version):
            metrics["pushed_version"] = float(self.version)
            # What this rank put on the wire (each generator counted): halved by bf16 generators.
            metrics["weight_send_bytes"] = float(self.sender.stats.nbytes)
        metrics["weight_send_s"] = time.perf_counter() - t0
        preempted = self.trainers.agree(self._preempt)
        if preempted:
            metrics["preempted"] = 1.0
        if self.checkpoints is not None and (preempted or self.schedule.checkpoint_due(self.version)):
            # After the push, so the generators already have the new weights on their way.
            t0 = time.perf_counter()
            with self.spans.span("checkpoint"):
                self._save(self.checkpoints.partial(self.version))
            metrics["checkpoint_save_s"] = time.perf_counter() - t0
        now = time.perf_counter()  # the wall seconds this notice covers: its train and push fell inside
        metrics["window_s"], self._last_done = now - self._last_done, now
        metrics = self.trainers.reduce_metrics(metrics)
        if self.is_leader:
            self.mailbox.send(CONTROLLER, StepDone(step=self.step_index, version=self.version, metrics=metrics))
        self.last_metrics = metrics
        self.step_index += 1
        return True

    @handles(Preempt)
    def on_preempt_message(self, env: Envelope) -> None:
        self._preempt = True

    def on_preempt(self) -> None:
        self._preempt = True

    def _push(self, version: int) -> bool:
        """Announce and push ``version`` to the generators if the schedule says it is pushed."""
        if not self.schedule.pushes(version):
            return False
        if self.is_leader and not self.routes.colocated:
            self.mailbox.send_role(self.routes.generate_role, WeightsPushed(version=version))
        with self.spans.span("weight_send"):
            self.sender.push(self.local_params(), version)
        return True

    def _save(self, path) -> None:
        """This rank's part of a checkpoint: its random states, then its shards (collective)."""
        save_rng(path, self.mailbox.role_table.rank)
        save_trainer_state(path, self.model, self.optimizer, self.dp_group, only=self._saved_entries())
        if self.lora_base is not None and self.is_leader:
            record_base(path, self.lora_base)
        inject_fault("trainer-saved", self.version)

    def _resume(self, resume: Resume) -> None:
        """Load the policy and optimizer of ``resume`` and push that version: the generators
        hold placeholders until then (``Schedule.min_version``)."""
        load_trainer_state(resume.path, self.model, self.optimizer, self.dp_group, only=self._saved_entries())
        self.version = self.step_index = resume.steps_done
        self._push(self.version)

    def _saved_entries(self):
        """Which model entries a checkpoint holds: a LoRA policy's adapters, or everything (None)."""
        return is_adapter if self.lora_base is not None else None

    def on_stop(self, reason: str) -> None:
        self.sender.wait()  # the generators take in the last push before they stop
        if self.on_finish is not None:
            self.on_finish(self)

    # ------------------------------------------------------------------ the update

    def train_on(self, groups: list[Rollout]) -> dict[str, float]:
        """One optimizer step on this rank's share of the step: collect, micro-batch losses
        (gradients accumulated), apply the update, the step's figures."""
        if self.config.sim is not None:
            return self._simulated_step(groups)
        t0 = time.perf_counter()
        penalties = self._kl_penalties(groups) if self.config.kl_in_group_reward else None
        batch = collect(groups, self.config, self.version, penalties)
        if self.step_index < self.warmup_steps:  # critic-only steps: the policy stays as it is
            return {
                **step_metrics(batch, Tally(), 0.0, True, time.perf_counter() - t0),
                **version_figures(groups, self.version),
                "critic_warmup": 1.0,
            }
        # FSDP averages gradients over trainers; scaling by n/total makes that average the
        # mean over the whole step's units (tokens by default; ranks' counts differ).
        units = step_units(self.config.loss_agg, batch.tokens, batch.sequences, self.agg_constant)
        total = max(self.trainers.sum(units), 1.0)
        scale = self.trainers.size / total
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        tally = self._forward_backward(batch, groups[0], scale)
        grad_norm, finite = self._apply_update(tally.loss_sum, batch.tokens)
        metrics = step_metrics(batch, tally, grad_norm, finite, time.perf_counter() - t0)
        if self.config.loss_agg != "token_mean":
            # The trainers average "loss" weighted by their tokens: this rank's share, so
            # that the average is the step's loss over its units.
            tokens = self.trainers.sum(float(batch.tokens))
            metrics["loss"] = tally.loss_sum / total * tokens / max(batch.tokens, 1)
        return {**metrics, **version_figures(groups, self.version)}

    def _lockstep_starts(self, rows: int) -> list[int | None]:
        """The first row of each of this rank's micro-batches, then None for each pass it must
        still run (with zero weight) so that every trainer runs as many: FSDP's collectives pair up."""
        starts = list(range(0, rows, self.config.micro_batch))
        return starts + [None] * (self.trainers.most(len(starts)) - len(starts))

    @torch.no_grad()
    def _kl_penalties(self, groups: list[Rollout]) -> list[np.ndarray]:
        """Per group, each sample's ``kl_coef x sum_t k(log ref - log mu)`` over its trained
        tokens (``algorithm.kl_in_reward``): the reference's forward passes, in micro-batches
        run in step with the other trainers (the reference is sharded like the policy)."""
        rows = [(g.prompt_ids, ids, lp, m) for g in groups for ids, lp, m in _samples(g)]
        mb = self.config.micro_batch
        sums: list[float] = []
        for start in self._lockstep_starts(len(rows)):
            LOOP.tick()
            chunk = rows[start : start + mb] if start is not None else rows[:1]  # a filler: run, not counted
            prompts, responses, mus, masks = zip(*chunk)
            ref_logp, mask = response_logprobs(self.reference, list(prompts), list(responses), self.temperature)
            mask = loss_mask(list(masks), mask)
            mu = pad(mus, 0.0, torch.float32)[:, : ref_logp.shape[1]].to(ref_logp.device)
            kl = kl_terms(mu, ref_logp.float(), mask, self.config.kl_estimator).sum(dim=1)
            if start is not None:
                sums.extend((self.config.kl_coef * kl).tolist())
        out, at = [], 0
        for g in groups:
            out.append(np.asarray(sums[at : at + len(g.response_ids)]))
            at += len(g.response_ids)
        return out

    def _forward_backward(self, batch: StepBatch, first: Rollout, scale: float) -> Tally:
        """Every micro-batch's loss and backward pass; their gradients add up."""
        tally = Tally()
        mb = self.config.micro_batch
        for start in self._lockstep_starts(len(batch.responses)):
            LOOP.tick()  # each micro-batch is progress (runtime.liveness)
            if start is None:
                # This rank has run out of samples while another trainer still has some: a
                # pass with zero weight keeps the FSDP collectives of every rank in step.
                self._micro_batch(batch.filler(first), 0.0, scale, tally, batch.stale_rows(None))
            else:
                rows = slice(start, start + mb)
                self._micro_batch(batch.rows(rows), 1.0, scale, tally, batch.stale_rows(rows))
        return tally

    def _micro_batch(self, rows: tuple, weight: float, scale: float, tally: Tally, stale: list) -> None:
        """One micro-batch's forward and backward pass, weighted by its units (0: a filler)."""
        prompts, responses, mus, advs, masks = rows
        entropy = None
        if self.config.entropy_coef:
            logp, mask, entropy = response_logprobs(self.model, prompts, responses, self.temperature, with_entropy=True)
        else:
            logp, mask = response_logprobs(self.model, prompts, responses, self.temperature)
        mask = loss_mask(masks, mask)  # an episode's observations are never trained
        device = logp.device  # a trainer on CUDA: the batch's tensors go there too
        mu = pad(mus, 0.0, torch.float32)[:, : logp.shape[1]].to(device)
        # One advantage per sample (group baselines), or one per token (a critic's GAE).
        if len(advs) and not np.isscalar(advs[0]):
            adv = pad(advs, 0.0, torch.float32)[:, : logp.shape[1]].to(device)
        else:
            adv = torch.tensor(advs, dtype=torch.float32, device=device)
        ref_logp = None
        if self.config.kl_in_loss:  # with advantage: gae the critic puts the KL in the reward
            with torch.no_grad():
                ref_logp, _ = response_logprobs(self.reference, prompts, responses, self.temperature)
        staleness = None
        if self.config.proximal == "loglinear":  # A-3PO's mix of mu and pi, by each token's age
            ages = [np.resize(np.asarray(a, np.float32), len(r)) for a, r in zip(stale, responses)]
            staleness = pad(ages, 0.0, torch.float32)[:, : logp.shape[1]].to(device)
        loss, m = losses.policy_loss(self.config, logp, mu, adv, mask, ref_logp, entropy, staleness, self.agg_constant)
        with torch.no_grad():  # the generator's precision (and lag) on the sampled tokens
            gap = torch.where(mask, (logp.detach() - mu).abs(), torch.zeros_like(mu))
            m["logp_mismatch_mean"] = gap.sum() / mask.sum().clamp(min=1)
            if weight:
                tally.mismatch_max = max(tally.mismatch_max, float(gap.max()) if gap.numel() else 0.0)
        if fault_injected("nan-loss", self.step_index):  # the failure tests' hook
            loss = loss * float("nan")
        n_tok = units = float(mask.sum()) * weight
        if self.config.loss_agg != "token_mean":  # the loss is a mean over sequences
            seqs = int((mask.sum(dim=1) > 0).sum())
            units = step_units(self.config.loss_agg, int(mask.sum()), seqs, self.agg_constant) * weight
        (loss * units * scale).backward()
        tally.add(float(loss.detach()), m, n_tok, weight, units)

    def _apply_update(self, loss_sum: float, tokens: int) -> tuple[float, bool]:
        """Average replicas' gradients, clip, and step if the step is finite on every trainer.
        Returns the gradient norm and whether the update was applied."""
        if self.allreduce_grads:
            self.trainers.average_grads(self.model.parameters())
        # The norm over every trainer's shards (a collective under FSDP2), clipped if asked:
        # also the test of whether the gradient is finite.
        grad_clip = self.config.grad_clip or float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), grad_clip))
        finite = self.trainers.agree(math.isfinite(loss_sum) and math.isfinite(grad_norm), every=True)
        if finite:
            self.optimizer.step()
        else:
            self._nonfinite(loss_sum / max(tokens, 1), grad_norm)
        return grad_norm, finite

    def _simulated_step(self, groups: list[Rollout]) -> dict[str, float]:
        """``algorithm.sim``: the step's modelled time asleep, the weights unchanged, the metrics
        a real step reports (loss and gradient 0), so the rest of the loop cannot tell."""
        t0 = time.perf_counter()
        rewards = [r for g in groups for r in g.rewards]
        staleness = [self.version - g.policy_version for g in groups]
        tokens = sum(len(x) for g in groups for x in g.response_ids)
        modelled = self.config.sim.per_step_s + self.config.sim.per_token_s * tokens
        deadline = t0 + modelled
        while (left := deadline - time.perf_counter()) > 0:
            LOOP.tick()  # asleep on purpose: progress, not a stall
            time.sleep(min(left, 1.0))
        return {
            "loss": 0.0,
            "reward_mean": sum(rewards) / max(len(rewards), 1),
            "tokens": float(tokens),
            "samples": float(len(rewards)),
            "trained_samples": float(len(rewards)),
            "staleness_max": float(max(staleness)),
            "staleness_mean": sum(staleness) / len(staleness),
            "grad_norm": 0.0,
            "nonfinite_skipped": 0.0,
            "example_id_sum": float(sum(g.example_id for g in groups)),
            "example_id_sqsum": float(sum(float(g.example_id) ** 2 for g in groups)),
            "train_s": time.perf_counter() - t0,
            "sim_train_s": modelled,
            **version_figures(groups, self.version),
        }

    def _nonfinite(self, loss: float, grad_norm: float) -> None:
        """A step whose loss or gradient is NaN or inf: its update is dropped, never applied."""
        self.optimizer.zero_grad(set_to_none=True)
        what = f"step {self.step_index}: the loss ({loss}) or the gradient (norm {grad_norm}) is not finite"
        if self.config.on_nonfinite == "stop":
            raise FloatingPointError(f"{what}; algorithm.on_nonfinite is stop")
        if self.is_leader:
            print(f"mpirl: warning: {what}; its update is skipped (algorithm.on_nonfinite: skip)", flush=True)


def _samples(g: Rollout):
    """(response ids, behaviour log-probs, loss mask or None) of each of the group's samples."""
    return zip(g.response_ids, g.logprobs, g.loss_masks or [None] * len(g.response_ids))
