"""Colocated synchronous baseline: each rank generates, then trains, taking turns.

This is the DeepSpeed-Chat-like layout LlamaRL measures itself against: the same ranks
hold the policy for training and for generation. A step is: generate this rank's share
of the prompts, send the groups to the reward ranks, wait for them to come back scored,
train (gradients averaged over the colocated ranks), refresh the engine's weights, and
only then start the next step. Nothing overlaps, by construction.
"""

from __future__ import annotations

import collections
import time

from roles.generator import generate_batch, publish_batch
from roles.protocol import PromptBatch
from roles.trainer import TrainerActor
from runtime import Envelope, handles
from transports.weights.endpoints import SyncStats


class LocalEngineSync:
    """The "weight push" of a colocated rank: copy its own trained weights into its engine.

    When the engine samples with the very module being trained (the torch engine can),
    there is nothing to copy; otherwise (vLLM) this is the weight reload the paper counts
    against colocated systems.
    """

    def __init__(self, engine, shares_module: bool):
        self.engine = engine
        self.shares_module = shares_module
        self.last_s = 0.0
        self.stats = SyncStats()  # as a WeightSender's: nothing goes on a wire (nbytes 0)

    def push(self, shards, version: int) -> None:
        """``shards``: the rank's LocalShards; a replica's are whole tensors."""
        t0 = time.perf_counter()
        if not self.shares_module:
            self.engine.load_weights([(s[0], s[1]) for s in shards])
        self.last_s = time.perf_counter() - t0

    def wait(self) -> None:
        pass


class ColocatedActor(TrainerActor):
    def __init__(
        self,
        mailbox,
        config: TrainerActor.Config,
        *,
        rollout,
        schedule,
        routes,
        policy,
        engine,
        weight_sync,
        dp_group=None,
        on_finish=None,
        checkpoints=None,
        resume=None,
        warmup_steps=0,  # no critic beside colocated ranks (launch.config refuses one)
    ):
        super().__init__(
            mailbox,
            config,
            rollout=rollout,
            schedule=schedule,
            routes=routes,
            policy=policy,
            sender=weight_sync,
            dp_group=dp_group,
            on_finish=on_finish,
            allreduce_grads=True,
            checkpoints=checkpoints,
            resume=resume,
        )
        self.rollout = rollout
        self.engine = engine
        self.queue: collections.deque[PromptBatch] = collections.deque()

    @handles(PromptBatch)
    def on_batch(self, env: Envelope) -> None:
        self.queue.append(env.msg)

    def step(self) -> bool:
        if self.queue:
            self._generate(self.queue.popleft())
            return True
        return super().step()  # trains once this rank's groups of the step are all back

    def _generate(self, batch: PromptBatch) -> None:
        self.model.eval()
        groups, generate_s = generate_batch(self.engine, batch, self.rollout, self.spans)
        publish_batch(
            self.mailbox, self.routes, batch, groups, self.version, generate_s, weight_load_s=self.sender.last_s
        )
