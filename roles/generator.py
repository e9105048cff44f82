"""Generator rank: samples prompt batches with its engine, sends each group to a reward rank.

New weights arrive in the background and are swapped in at a batch boundary, so generation
never stops for a transfer it does not need yet. The receives for the next version are posted
into staging buffers as soon as the current one is loaded, before the trainer pushes: the
trainer's sends then go straight onto the wire while this rank generates, instead of waiting
for it to reach a batch boundary and post them. It stops and waits only when a batch demands
a newer policy than it holds (the staleness bound).
"""

from __future__ import annotations

import collections
import time

import numpy as np

from roles.protocol import (
    CONTROLLER,
    BatchDone,
    FinalVersion,
    ForwardsStopSignals,
    PromptBatch,
    Rollout,
    RolloutConfig,
    Routes,
    SavesRandomStates,
    Schedule,
    WeightsPushed,
)
from roles.stream_generator import StreamsRollouts, sampling_for
from runtime import Actor, Backoff, Envelope, handles
from runtime.loop_clock import LOOP


def generate_batch(engine, batch: PromptBatch, rollout: RolloutConfig, spans) -> tuple[list, float]:
    """Sample ``batch`` with ``engine`` under its sampling settings; (groups, seconds taken)."""
    sampling = sampling_for(batch, rollout)
    t0 = time.perf_counter()
    with spans.span("generate"):
        groups = engine.generate(batch.prompts, batch.samples_per_prompt, sampling)
    return groups, time.perf_counter() - t0


def publish_batch(
    mailbox,
    routes: Routes,
    batch: PromptBatch,
    groups,
    version: int,
    generate_s: float,
    *,
    wait_s: float = 0.0,
    weight_load_s: float = 0.0,
    weight_syncs: int = 0,
    window_s: float = 0.0,
) -> None:
    """Send each sampled group of ``batch`` to its reward rank, then the batch's notice to the controller."""
    tokens = 0
    for eid, group_id, prompt, samples in zip(batch.example_ids, batch.group_ids, batch.prompts, groups):
        mailbox.send(
            routes.reward_for(group_id),
            Rollout(
                example_id=eid,
                group_id=group_id,
                step=batch.step,
                prompt_ids=np.asarray(prompt, dtype=np.int32),
                response_ids=[s.response_ids for s in samples],
                logprobs=[s.logprobs for s in samples],
                finish_reasons=[s.finish_reason for s in samples],
                policy_version=version,
                timings={"generate_s": generate_s},
                purpose=batch.purpose,
                eval_round=batch.eval_round,
            ),
        )
        tokens += sum(len(s.response_ids) for s in samples)
    tail_wait_s = generate_s * tail_wait_share([len(s.response_ids) for g in groups for s in g])
    mailbox.send(
        CONTROLLER,
        BatchDone(
            batch_id=batch.batch_id,
            step=batch.step,
            groups=len(groups),
            tokens=tokens,
            policy_version=version,
            generate_s=generate_s,
            wait_s=wait_s,
            weight_load_s=weight_load_s,
            weight_syncs=weight_syncs,
            eval_round=batch.eval_round,
            tail_wait_s=tail_wait_s,
            window_s=window_s,
        ),
    )


def tail_wait_share(lengths: list[int]) -> float:
    """The share of a batch's decode time its rows spend finished, waiting for the longest.

    A batch decodes until its longest sample ends: a row of length l idles for (longest - l)
    of the longest's steps. Averaged over rows, weighting each decode step alike (the real cost
    of a step also grows with the rows still decoding; this is the simple, engine-free figure).
    """
    longest = max(lengths, default=0)
    if longest == 0:
        return 0.0
    return sum(longest - n for n in lengths) / (len(lengths) * longest)


class GeneratorActor(StreamsRollouts, ForwardsStopSignals, SavesRandomStates, Actor):
    def __init__(
        self,
        mailbox,
        rollout: RolloutConfig,
        *,
        schedule: Schedule,
        routes: Routes,
        engine,
        receiver,
        version: int = 0,
        episodes=None,
    ):
        """``rollout``: the sampling settings of training batches (eval batches bring their own);
        ``episodes``: a ``roles.episodes.EpisodeRunner`` when the role map has an environment
        (streamed rollouts only: each group is then ``n`` multi-turn episodes)."""
        super().__init__(mailbox)
        self.rollout = rollout
        self.schedule = schedule
        self.routes = routes
        self.engine = engine
        self.receiver = receiver  # WeightReceiver: start(v) / ready() / finish() -> named tensors
        self.version = version  # policy version of the weights in the engine
        self.announced: collections.deque[int] = collections.deque()  # versions on their way
        self.queue: collections.deque[PromptBatch] = collections.deque()
        self.final_version = 0  # set by FinalVersion just before Stop
        # Weight-sync accounting since the last BatchDone (the controller logs it per step).
        self._load_s = 0.0
        self._syncs = 0
        self._last_notice = time.perf_counter()  # the start of the next BatchDone's window
        self.streaming = rollout.mode == "stream"
        self.episodes = episodes
        if self.streaming:
            self._start_streaming()
        self._post_next_receive()

    def on_start(self) -> None:
        if self.streaming:
            self._grant_initial_credit()

    @handles(PromptBatch)
    def on_batch(self, env: Envelope) -> None:
        if self.streaming:
            self._queue_stream(env.msg)
        else:
            self.queue.append(env.msg)

    @handles(WeightsPushed)
    def on_weights(self, env: Envelope) -> None:
        version = env.msg.version
        expected = self.version + len(self.announced) + 1  # the one its receives are posted for
        self.schedule.check_announcement(version, expected, f"generator {self.mailbox.role_table.index}")
        self.announced.append(version)

    @handles(FinalVersion)
    def on_final(self, env: Envelope) -> None:
        self.final_version = env.msg.version

    def on_stop(self, reason: str) -> None:
        """Take in every pushed version before leaving, so no trainer send is left hanging."""
        if self.episodes is not None:
            self.episodes.close()  # the environment's workers
        deadline = time.monotonic() + 300
        backoff = Backoff()
        while self.version < self.final_version:
            if self.announced:
                self._apply_received(load=False)  # nobody will sample with it: skip the load
                continue
            env = self.mailbox.poll()
            if env is not None and isinstance(env.msg, WeightsPushed):
                self.on_weights(env)
            elif env is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"version {self.final_version} was never announced")
                backoff.sleep()

    def _apply_received(self, load: bool = True) -> None:
        """Load the version whose transfer has completed and start receiving the next."""
        t0 = time.perf_counter()
        version = self.announced.popleft()
        with self.spans.span("weight_receive"):
            named = self.receiver.finish()
            if load:
                self.engine.load_weights(named, version=version)
        self.version = version
        self._load_s += time.perf_counter() - t0
        self._syncs += 1
        self._post_next_receive()

    def _notice_window(self) -> float:
        """Wall seconds since this rank's previous BatchDone (the window the next one covers)."""
        now = time.perf_counter()
        window, self._last_notice = now - self._last_notice, now
        return window

    def _post_next_receive(self) -> None:
        """Post the receives for the version after the one held, ahead of the trainer's push.

        The staging buffers are free again once the engine has copied the current version.
        With the receives already posted, each trainer send is matched on arrival (gloo
        otherwise adds a round trip per message) and its bytes land while this rank
        generates. Never past the last version pushed: a receive still posted when the job
        ends could not be taken back (gloo has no cancel).
        """
        following = self.version + 1
        if self.schedule.pushes(following):
            self.receiver.start(following)

    def _sync_weights(self, min_version: int) -> float:
        """Swap in finished transfers; block until ``min_version`` is held. Returns seconds waited."""
        while self.announced and self.receiver.ready():
            self._apply_received()
        waited = 0.0
        backoff = Backoff()
        while self.version < min_version:
            t0 = time.perf_counter()
            if not self.announced:
                # The trainer announces before it pushes; keep handling messages until it does.
                # Waiting for the trainers is this rank's idle loop (prompts come one version
                # early, so in sync mode it lasts a training step): it ticks as the actor loop's
                # idle turns do, or a training step over run.stall_timeout_s would read as a stall.
                LOOP.tick()
                if self.handle_pending() == 0:
                    backoff.sleep()
                if not self.running:
                    return waited
            else:
                self._apply_received()  # blocks in finish() until the transfer is in
            waited += time.perf_counter() - t0
        return waited

    def step(self) -> bool:
        if self.streaming:
            return self._stream_step()
        if not self.queue:
            # Idle: still take weights in as soon as they land, off the critical path.
            if self.announced and self.receiver.ready():
                self._apply_received()
                return True
            return False
        batch = self.queue.popleft()
        with self.spans.span("wait"):
            wait_s = self._sync_weights(batch.min_version)
        if not self.running:
            return True
        groups, generate_s = generate_batch(self.engine, batch, self.rollout, self.spans)
        publish_batch(
            self.mailbox,
            self.routes,
            batch,
            groups,
            self.version,
            generate_s,
            wait_s=wait_s,
            weight_load_s=self._load_s,
            weight_syncs=self._syncs,
            window_s=self._notice_window(),
        )
        self._load_s, self._syncs = 0.0, 0
        return True
