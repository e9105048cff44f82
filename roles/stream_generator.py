"""The generator's streaming loop (``rollout.mode: stream``): its engine kept full, groups out as they end.

Groups arrive from the controller no faster than this rank has room for them (it grants
``Credit``: room for twice the groups its engine decodes at once, so the next ones are
already here when slots free). Each group is one engine request (seeded by its group's own
seed); it joins the running batch as soon as the engine holds a policy at least as new as its
``min_version``, in the order sent, and goes to its reward rank the moment its last sample
ends. New weights are loaded between decode steps while sequences are in flight
(``rollout.inflight_updates``; never while an evaluation group is: a round is sampled by one
version); without in-flight updates, when the engine has run empty. The life of a request is
told in docs/architecture.md.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np

from roles.engines.base import SamplingConfig
from roles.engines.requests import Request, version_segments
from roles.protocol import CONTROLLER, TRAIN, BatchDone, PromptBatch, Rollout, RolloutConfig
from roles.stream_protocol import Credit, GroupReady, SlotAssigned
from runtime import Envelope, handles


@dataclass
class _Group:
    """One group in the engine: the batch it came in, its place there, its samples so far."""

    batch: PromptBatch
    position: int
    samples: list
    left: int
    # Partial rollouts: the step and group id the controller gave it when it ended
    step: int | None = None
    slot: int | None = None
    # Multi-turn episodes (roles.episodes): per sample, its loss mask and its record
    masks: list | None = None
    infos: list | None = None
    prompt: np.ndarray | None = None  # the rendered opening (else the batch's prompt)

    @property
    def group_id(self) -> int:
        """Its id in the engine (a partial-rollout group: its ticket)."""
        return self.batch.group_ids[self.position]

    @property
    def trained_as(self) -> tuple[int, int]:
        """(step, group id) it goes on with."""
        if self.step is not None:
            return self.step, self.slot
        return self.batch.step, self.group_id


class StreamsRollouts:
    """The streaming half of ``GeneratorActor`` (a mixin: the actor owns the engine, weights
    and mailbox; this owns the groups in flight and the flow control)."""

    def _start_streaming(self) -> None:
        self.pending: collections.deque[tuple[PromptBatch, int]] = collections.deque()  # (batch, position)
        self.in_engine: dict[int, _Group] = {}  # group id -> group
        self.awaiting_slot: dict[int, _Group] = {}  # partial rollouts: ended, asked for a step
        per_group = max(1, self.rollout.samples_per_prompt)
        self.credit_groups = 2 * max(1, self.engine.capacity // per_group)
        self.engine.version = self.version
        self._engine_s = self._tail_s = self._wait_s = 0.0  # since the last notice
        self._idle_since: float | None = None
        if self.episodes is not None:  # a turn is a request: the runner adds them
            self.episodes.add = self.engine.add
            self.episodes.version = lambda: self.version

    def _grant_initial_credit(self) -> None:
        self.mailbox.send(CONTROLLER, Credit(groups=self.credit_groups))

    def _queue_stream(self, batch: PromptBatch) -> None:
        self.pending.extend((batch, i) for i in range(len(batch.group_ids)))

    def _stream_step(self) -> bool:
        """One turn: take finished transfers, admit what may run, decode once, release groups."""
        progressed = self._take_weights()
        self._admit_ready()
        if self.episodes is not None and self.episodes.live():
            # Waiting on tools alone: a short wait for them (not a spin); else just a look.
            done = self.episodes.pump(0.0 if self.engine.unfinished() or self.pending else 0.002)
            if done:
                self._groups_done([self._episodes_ended(d) for d in done])
                progressed = True
        if self.engine.unfinished():
            self._note_idle_end()
            self._decode_once()
            return True
        if self.pending:  # every waiting group needs a newer policy than the engine holds
            if self._idle_since is None:
                self._idle_since = time.perf_counter()
            if self.announced:
                self._apply_received()  # the engine is empty: block until the transfer is in
                return True
        return progressed

    def _take_weights(self) -> bool:
        took = False
        while self.announced and self.receiver.ready():
            busy = self._busy()
            if busy and (not self.rollout.inflight_updates or self._evals_in_flight()):
                break
            self._apply_received()
            took = True
        return took

    def _busy(self) -> bool:
        """Sequences in the engine, or episodes between turns (an update would land mid-episode)."""
        return self.engine.unfinished() > 0 or (self.episodes is not None and self.episodes.live())

    def _evals_in_flight(self) -> bool:
        return any(g.batch.purpose != TRAIN for g in self.in_engine.values())

    def _admit_ready(self) -> None:
        """Admit waiting groups in the order sent, while the engine holds a policy new enough."""
        while self.pending and self.pending[0][0].min_version <= self.version:
            if self._held_for_update():
                return
            batch, i = self.pending.popleft()
            n = batch.samples_per_prompt
            group = _Group(batch, i, [None] * n, n)
            self.in_engine[group.group_id] = group
            sampling = self._sampling(batch, i)
            if self.episodes is not None:
                self.episodes.start(group.group_id, batch.example_ids[i], n, sampling, batch.prompts[i])
            else:
                self.engine.add(Request(group.group_id, np.asarray(batch.prompts[i], np.int32), n, sampling))

    def _held_for_update(self) -> bool:
        """Hold admissions while a ready update waits for the engine to empty (an evaluation in
        flight, or no in-flight updates), so it does not wait forever."""
        return bool(self.announced) and self.receiver.ready() and self._busy()

    def _sampling(self, batch: PromptBatch, i: int):
        sampling = sampling_for(batch, self.rollout)
        if batch.group_seeds is not None:
            sampling.seed = batch.group_seeds[i]
        return sampling

    def _decode_once(self) -> None:
        live = min(self.engine.unfinished(), self.engine.capacity)
        waiting = self.engine.unfinished() > self.engine.capacity
        t0 = time.perf_counter()
        with self.spans.span("generate"):
            finished = self.engine.step()
        dt = time.perf_counter() - t0
        self._engine_s += dt
        if not waiting:  # slots empty while nothing waits for one: the stream's tail
            self._tail_s += dt * (1 - live / self.engine.capacity)
        done = []
        for f in finished:
            if self.episodes is not None:  # a turn ended: the episode goes on, or its group is done
                done += [self._episodes_ended(d) for d in self.episodes.turn_ended(f)]
                continue
            group = self.in_engine[f.tag]
            group.samples[f.index] = f.sample
            group.left -= 1
            if group.left == 0:
                done.append(self.in_engine.pop(f.tag))
        self._groups_done(done)

    def _episodes_ended(self, d) -> _Group:
        group = self.in_engine.pop(d.key)
        group.samples, group.masks, group.infos, group.left = d.samples, d.masks, d.infos, 0
        group.prompt = d.prompt_ids
        return group

    def _groups_done(self, done: list[_Group]) -> None:
        # Partial rollouts: which step, asked now. Dynamic sampling: its reward rank asks once it is scored.
        ask = [] if self.rollout.dynamic_sampling.enabled else [g for g in done if g.batch.step < 0]
        for g in ask:
            self.awaiting_slot[g.group_id] = g
            tokens = sum(len(s.response_ids) for s in g.samples)
            self.mailbox.send(CONTROLLER, GroupReady(ticket=g.group_id, oldest_version=_oldest(g), tokens=tokens))
        done = [g for g in done if all(g is not a for a in ask)]
        if done:
            self._release(done)

    @handles(SlotAssigned)
    def on_slot(self, env: Envelope) -> None:
        m: SlotAssigned = env.msg
        group = self.awaiting_slot.pop(m.ticket)
        if m.step < 0:  # too stale for any step left: dropped, its example goes out again
            self.mailbox.send(CONTROLLER, Credit(groups=1))
            return
        group.step, group.slot = m.step, m.group_id
        self._release([group])

    def _note_idle_end(self) -> None:
        if self._idle_since is not None:
            self._wait_s += time.perf_counter() - self._idle_since
            self._idle_since = None

    def _release(self, groups: list[_Group]) -> None:
        """Send each finished group to its reward rank; one notice per step (or eval round) to
        the controller, sharing the engine time since the last notice by tokens; the room back."""
        tokens: dict[tuple[int, int], int] = collections.Counter()
        for g in groups:
            rollout = _rollout(g)
            self.mailbox.send(self.routes.reward_for(rollout.group_id), rollout)
            tokens[(rollout.step, g.batch.eval_round)] += sum(len(x) for x in rollout.response_ids)
        total = max(sum(tokens.values()), 1)
        window_s = self._notice_window()
        counts = collections.Counter((g.trained_as[0], g.batch.eval_round) for g in groups)
        for (step, eval_round), n in counts.items():
            share = tokens[(step, eval_round)] / total
            self.mailbox.send(
                CONTROLLER,
                BatchDone(
                    batch_id=-1,
                    step=step,
                    groups=n,
                    tokens=tokens[(step, eval_round)],
                    policy_version=min(_oldest(g) for g in groups),
                    generate_s=self._engine_s * share,
                    wait_s=self._wait_s * share,
                    weight_load_s=self._load_s * share,
                    weight_syncs=self._syncs,
                    eval_round=eval_round,
                    tail_wait_s=self._tail_s * share,
                    window_s=window_s * share,
                ),
            )
        self._engine_s = self._tail_s = self._wait_s = self._load_s = 0.0
        self._syncs = 0
        self.mailbox.send(CONTROLLER, Credit(groups=len(groups)))


def _oldest(group: _Group) -> int:
    """The version of the group's oldest token (every sample has at least one)."""
    return min(int(s.versions.min()) for s in group.samples)


def _rollout(g: _Group) -> Rollout:
    batch, samples = g.batch, g.samples
    oldest = _oldest(g)
    spans = [version_segments(s.versions) for s in samples]
    mixed = any(len(seg) > 1 or (len(seg) and seg[0, 1] != oldest) for seg in spans)
    step, group_id = g.trained_as
    return Rollout(
        example_id=batch.example_ids[g.position],
        group_id=group_id,
        step=step,
        prompt_ids=np.asarray(batch.prompts[g.position] if g.prompt is None else g.prompt, dtype=np.int32),
        response_ids=[s.response_ids for s in samples],
        logprobs=[s.logprobs for s in samples],
        finish_reasons=[s.finish_reason for s in samples],
        policy_version=oldest,
        purpose=batch.purpose,
        eval_round=batch.eval_round,
        version_segments=[seg.reshape(-1) for seg in spans] if mixed else None,
        loss_masks=g.masks,
        episodes=g.infos,
    )


def sampling_for(batch: PromptBatch, rollout: RolloutConfig) -> SamplingConfig:
    """The batch's sampling: the role map's rollout settings, or an eval batch's own."""
    return SamplingConfig(
        temperature=rollout.temperature if batch.temperature is None else batch.temperature,
        top_p=rollout.top_p if batch.temperature != 0 else 1.0,
        max_new_tokens=rollout.max_new_tokens if batch.max_new_tokens is None else batch.max_new_tokens,
        seed=batch.seed,
    )
