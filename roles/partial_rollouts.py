"""Partial rollouts (``rollout.oversample``): training groups handed out ahead of need, each given
its step only when it ends.

The controller keeps ``oversample x prompts_per_step`` more groups in flight than the open
steps need. A group that ends asks for a slot: it takes the next free (step, position) in
order, so a step is made of the first groups to finish and its slowest ones carry over to
the next step instead of holding it up. The staleness rule decides at that moment: a group
whose oldest token is older than its step allows (``Schedule.min_version``) is dropped, its
tokens counted as discarded, and its example handed out again first, so no example is
skipped. Every example is assigned exactly one slot, so none is trained twice.

A checkpoint after ``s`` steps records, beside the data position, the examples taken from
the stream but not trained in the first ``s`` steps (assigned to later steps, in flight, or
waiting to go out again): a resumed run hands them out first (their samples are dropped and
regenerated). Which group lands in which step depends on timing, so this mode is not
bit-reproducible; ``max_staleness: 0`` cannot carry anything and refuses it.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from roles.stream_protocol import GroupReady, SlotAssigned
from runtime import Envelope, handles


@dataclass
class _Ticket:
    example_id: int
    expected_step: int  # the step it would have filled had groups ended in the order sent


class SlotBook:
    def __init__(self, prompts_per_step: int, steps: int, oversample: float, schedule, start_step: int = 0, carry=()):
        self.P = prompts_per_step
        self.steps = steps
        self.extra = math.ceil(oversample * prompts_per_step)  # groups in flight beyond the open slots
        self.schedule = schedule
        self.assigned = start_step * prompts_per_step  # slots filled so far, in order
        self.tickets: dict[int, _Ticket] = {}  # in flight: ticket -> what it samples
        self.next_ticket = 0
        self.carry: collections.deque[int] = collections.deque(carry)  # examples to hand out first
        self.by_step: dict[int, list[int]] = {}  # examples in each step not yet checkpointed past
        self.stats = collections.defaultdict(collections.Counter)  # per step: carried, dropped, discarded

    def wanted(self, open_steps: int) -> int:
        """How many more groups to hand out while steps ``< open_steps`` may be sampled."""
        open_slots = min(open_steps, self.steps) * self.P - self.assigned
        if open_slots <= 0:
            return 0
        return max(0, open_slots + self.extra - len(self.tickets))

    def expected_step(self, open_steps: int) -> int:
        """The step the next group handed out would fill if groups ended in order (capped at the
        last open one): its ``min_version`` is that step's."""
        return min((self.assigned + len(self.tickets)) // self.P, open_steps - 1, self.steps - 1)

    def hand_out(self, example_id: int) -> int:
        ticket = self.next_ticket
        self.next_ticket += 1
        expected = (self.assigned + len(self.tickets)) // self.P
        self.tickets[ticket] = _Ticket(example_id, expected)
        return ticket

    def assign(self, ticket: int, oldest_version: int, tokens: int) -> tuple[int, int] | None:
        """The (step, group id) of the slot a finished group takes; None: dropped (too stale,
        or the run's slots are all taken)."""
        t = self.tickets.pop(ticket)
        step = self.assigned // self.P
        if step >= self.steps or oldest_version < self.schedule.min_version(step):
            counts = self.stats[min(step, self.steps - 1)]
            counts["dropped_groups"] += 1
            counts["discarded_tokens"] += tokens
            if step < self.steps:
                self.carry.appendleft(t.example_id)
            return None
        position = self.assigned % self.P
        self.assigned += 1
        self.by_step.setdefault(step, []).append(t.example_id)
        if step > t.expected_step:  # a faster group took its place: it carried over
            self.stats[step]["carried_groups"] += 1
        return step, step * self.P + position

    def carry_list(self, steps_done: int) -> list[int]:
        """The examples a run resumed after ``steps_done`` steps hands out first, in order: those
        in later steps, those in flight, those waiting to go out again."""
        out = [e for s in sorted(self.by_step) if s >= steps_done for e in self.by_step[s]]
        out += [t.example_id for _, t in sorted(self.tickets.items())]
        return out + list(self.carry)

    def forget_before(self, step: int) -> None:
        """Steps before ``step`` are trained and checkpointed past: their examples are done."""
        for s in [s for s in self.by_step if s < step]:
            del self.by_step[s]


class HandsOutPartialRollouts:
    """The controller's side (a ``ControllerActor`` mixin; ``self.slots`` is its ``SlotBook``)."""

    def _top_up(self, open_steps: int) -> None:
        """Hand out groups (examples to go again first) until the open steps' free slots, plus
        the oversampled ones, are in flight; their steps are given as they end."""
        want = self.slots.wanted(open_steps)
        if want == 0:
            return
        step = self.slots.expected_step(open_steps)
        examples = [self.slots.carry.popleft() for _ in range(min(want, len(self.slots.carry)))]
        examples += self.stream.take(want - len(examples))
        for start in range(0, want, self.batch_prompts):
            chunk = examples[start : start + self.batch_prompts]
            self._send_batch(
                step=-1,
                min_version=self.schedule.min_version(step),
                example_ids=chunk,
                group_ids=[self.slots.hand_out(e) for e in chunk],
                prompts=[self.prompts[i] for i in chunk],
                samples_per_prompt=self.rollout.samples_per_prompt,
            )

    @handles(GroupReady)
    def on_group_ready(self, env: Envelope) -> None:
        m: GroupReady = env.msg
        slot = self.slots.assign(m.ticket, m.oldest_version, m.tokens)
        step, group_id = slot if slot is not None else (-1, -1)
        self.mailbox.send(env.sender, SlotAssigned(ticket=m.ticket, step=step, group_id=group_id))
        if slot is None:
            self._fill()  # its example goes out again
