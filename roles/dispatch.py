"""How the controller hands prompt batches to the generators.

Batch mode: each batch to one generator, round-robin by batch id, as soon as it may go.
Streaming (``rollout.mode: stream``): generators pull. Each grants ``Credit`` for the groups
it has room for; batches wait in an outbox, in the order made, and go out split to the
generators' credit (most credit first), so no generator is handed more than it can start
soon and none sits empty while another holds a queue.
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
        while self.outbox:
            generator = max(range(len(self.credit)), key=lambda g: (self.credit[g], -g))
            room = self.credit[generator]
            if room == 0:
                return
            head = self.outbox[0]
            if len(head.group_ids) <= room:
                part = self.outbox.popleft()
            else:
                part, self.outbox[0] = split(head, room)
            self.credit[generator] -= len(part.group_ids)
            self.mailbox.send(Address(self.routes.generate_role, generator), part)


def split(batch: PromptBatch, k: int) -> tuple[PromptBatch, PromptBatch]:
    """The batch's first ``k`` groups, and the rest (the same batch otherwise)."""
    first, rest = {}, {}
    for name in _PER_GROUP:
        value = getattr(batch, name)
        first[name], rest[name] = (None, None) if value is None else (value[:k], value[k:])
    return dataclasses.replace(batch, **first), dataclasses.replace(batch, **rest)
