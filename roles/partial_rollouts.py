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

Dynamic sampling (``rollout.dynamic_sampling``, ``roles.dynamic_sampling``) uses the same book,
but a group asks for its slot once scored, from its reward rank, and an all-equal one may be
dropped; its spares come from the measured drop rate, and groups are handed out tagged with the
first open step's ``min_version`` (never a later one, whose weights may wait on that very step).
It works at any ``max_staleness``: at 0 a spare sampled for a step that filled without it is
too stale for the next and goes again.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from roles.dynamic_sampling import DropRule
from roles.stream_protocol import GroupReady, SlotAssigned
from runtime import Envelope, handles


@dataclass
class _Ticket:
    example_id: int
    expected_step: int  # the step it would have filled had groups ended in the order sent


class SlotBook:
    def __init__(
        self,
        prompts_per_step: int,
        steps: int,
        oversample: float,
        schedule,
        start_step: int = 0,
        carry=(),
        dynamic=None,
    ):
        """``dynamic``: the role map's ``rollout.dynamic_sampling`` (None, or not enabled: no drops)."""
        self.P = prompts_per_step
        self.dynamic = DropRule(dynamic, prompts_per_step) if dynamic is not None and dynamic.enabled else None
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
        spares = self.dynamic.spares(open_slots) if self.dynamic is not None else 0
        return max(0, open_slots + self.extra + spares - len(self.tickets))

    def expected_step(self, open_steps: int) -> int:
        """The step the next group handed out would fill if groups ended in order (capped at the
        last open one): its ``min_version`` is that step's. Dynamic sampling: the first open
        step's, as groups may be dropped before the ones sent earlier fill it."""
        if self.dynamic is not None:
            return min(self.assigned // self.P, open_steps - 1, self.steps - 1)
        return min((self.assigned + len(self.tickets)) // self.P, open_steps - 1, self.steps - 1)

    def hand_out(self, example_id: int) -> int:
        ticket = self.next_ticket
        self.next_ticket += 1
        expected = (self.assigned + len(self.tickets)) // self.P
        self.tickets[ticket] = _Ticket(example_id, expected)
        return ticket

    def assign(
        self, ticket: int, oldest_version: int, tokens: int, equal: bool = False, reward_sum: float = 0.0
    ) -> tuple[int, int] | None:
        """The (step, group id) of the slot a finished group takes; None: dropped (all its
        samples scored the same, under dynamic sampling; too stale; or the run's slots are all
        taken). ``equal``, ``reward_sum``: the scored group's, with dynamic sampling."""
        t = self.tickets.pop(ticket)
        step = self.assigned // self.P
        if self.dynamic is not None and step < self.steps and self.dynamic.drops(step, equal):
            counts = self.stats[step]  # its example is used up, as in DAPO: not handed out again
            counts["filtered_groups"] += 1
            counts["filtered_tokens"] += tokens
            counts["filtered_reward_sum"] += reward_sum
            return None
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
        if self.dynamic is not None:
            self.dynamic.forget_before(step)

    def figures(self, step: int) -> dict:
        """What the book saw of ``step`` (carried, dropped as stale, filtered), taken out of it;
        with dynamic sampling also the drop rate and whether its refill bound was reached."""
        out = dict(self.stats.pop(step, {}))
        if self.dynamic is not None:
            out.update(drop_rate=self.dynamic.rate(), refill_bound_reached=self.dynamic.bound_reached(step))
        return out


class HandsOutPartialRollouts:
    """The controller's side (a ``ControllerActor`` mixin; ``self.slots`` is its ``SlotBook``)."""

    def _new_slot_book(self, start_step: int = 0, carry=()) -> SlotBook | None:
        """The book of groups handed out without a step (None: each step is sent its own groups)."""
        r = self.rollout
        if r.oversample <= 0 and not r.dynamic_sampling.enabled:
            return None
        return SlotBook(
            r.prompts_per_step,
            self.schedule.steps,
            r.oversample,
            self.schedule,
            start_step=start_step,
            carry=carry,
            dynamic=r.dynamic_sampling,
        )

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

    def _with_slot_figures(self, step: int, gen: dict) -> dict:
        """Step ``step``'s generation sums with the slot book's figures; with dynamic sampling
        also the generators' notices of groups not yet given a step when sampled (their time is
        charged to the step logged next)."""
        if self.slots is None:
            return gen
        gen = {**gen, **self.slots.figures(step)}
        if self.slots.dynamic is not None:
            for key, value in self.notices.gen.pop(-1, {}).items():
                gen[key] = gen.get(key, 0) + value
        return gen

    @handles(GroupReady)
    def on_group_ready(self, env: Envelope) -> None:
        """From a generator (partial rollouts: the group ended) or a reward rank (dynamic
        sampling: the group is scored): its slot, answered to whoever asked."""
        m: GroupReady = env.msg
        slot = self.slots.assign(m.ticket, m.oldest_version, m.tokens, m.all_equal, m.reward_sum)
        step, group_id = slot if slot is not None else (-1, -1)
        self.mailbox.send(env.sender, SlotAssigned(ticket=m.ticket, step=step, group_id=group_id))
        if slot is None:
            self._fill()  # its example goes out again (or, filtered, a new one in its place)
