"""How the controller hands prompt batches to the generators.

Batch mode: each batch to one generator, round-robin by batch id, as soon as it may go.
Streaming (``rollout.mode: stream``): generators pull. Each grants ``Credit`` for the groups
it has room for; batches wait in an outbox, in the order made, and their groups go out one
by one to the generator with the most room (one message per generator and batch), so a
step's groups spread over every generator, none is handed more than it can start soon and
none sits empty while another holds a queue.
"""

from __future__ import annotations

import collections
import dataclasses

from roles.protocol import PromptBatch, Routes
from runtime import Address

# PromptBatch fields that hold one entry per group: a split batch takes its slice of each.
_PER_GROUP = ("example_ids", "group_ids", "prompts", "group_seeds")


class Dispatch:
    def __init__(self, mailbox, routes: Routes, streaming: bool):
        self.mailbox = mailbox
        self.routes = routes
        self.streaming = streaming
        self.outbox: collections.deque[PromptBatch] = collections.deque()
        self.credit = [0] * routes.generators  # groups each generator has room for

    def send(self, batch: PromptBatch) -> None:
        if not self.streaming:
            self.mailbox.send(self.routes.generator_for(batch.batch_id), batch)
            return
        self.outbox.append(batch)
        self._flush()

    def on_credit(self, generator: int, groups: int) -> None:
        if not 0 <= generator < len(self.credit) or groups < 0:
            raise ValueError(f"credit of {groups} groups from generator {generator}, which does not exist")
        self.credit[generator] += groups
        self._flush()

    def queued_groups(self) -> int:
        return sum(len(b.group_ids) for b in self.outbox)

    def _flush(self) -> None:
        """Hand out the outbox's groups one by one to the generator with the most room (so a
        step's groups spread over every generator, as round-robin does), one message each."""
        while self.outbox and sum(self.credit) > 0:
            head = self.outbox.popleft()
            take = min(len(head.group_ids), sum(self.credit))
            assigned: dict[int, list[int]] = {}
            for i in range(take):
                generator = max(range(len(self.credit)), key=lambda g: (self.credit[g], -g))
                self.credit[generator] -= 1
                assigned.setdefault(generator, []).append(i)
            for generator, indices in assigned.items():
                self.mailbox.send(Address(self.routes.generate_role, generator), subset(head, indices))
            if take < len(head.group_ids):
                self.outbox.appendleft(subset(head, range(take, len(head.group_ids))))


def subset(batch: PromptBatch, indices) -> PromptBatch:
    """The batch with only the groups at ``indices`` (the same batch otherwise)."""
    indices = list(indices)
    fields = {}
    for name in _PER_GROUP:
        value = getattr(batch, name)
        fields[name] = None if value is None else [value[i] for i in indices]
    return dataclasses.replace(batch, **fields)


def split(batch: PromptBatch, k: int) -> tuple[PromptBatch, PromptBatch]:
    """The batch's first ``k`` groups, and the rest (the same batch otherwise)."""
    n = len(batch.group_ids)
    return subset(batch, range(k)), subset(batch, range(k, n))
