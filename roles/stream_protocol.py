"""Messages of streamed rollouts (``rollout.mode: stream``): flow control, and the slots of
partial rollouts (``rollout.oversample``, ``roles.partial_rollouts``)."""

from __future__ import annotations

from transports.codec import message


@message
class Credit:
    """Streaming generator -> controller: room for ``groups`` more prompt groups (flow control:
    the controller sends a streaming generator no more groups than it has room for)."""

    groups: int


@message
class GroupReady:
    """Streaming generator -> controller: a partial-rollout group (``PromptBatch.step`` -1) has
    ended; which step does it go to?"""

    ticket: int  # its id in the batch it came in
    oldest_version: int  # the policy version of its oldest token (the staleness rule's)
    tokens: int  # response tokens, counted as discarded if it is dropped


@message
class SlotAssigned:
    """Controller -> generator: the answer to ``GroupReady``: the group's step and group id, or
    step -1: dropped (too stale for any step left), its example handed out again."""

    ticket: int
    step: int
    group_id: int
