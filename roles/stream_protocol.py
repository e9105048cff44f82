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
    """A group handed out without a step (``PromptBatch.step`` -1) is ready: which step does it
    go to? Asked by its streaming generator when it ends (partial rollouts), or, with dynamic
    sampling, by its reward rank once it is scored."""

    ticket: int  # its id in the batch it came in
    oldest_version: int  # the policy version of its oldest token (the staleness rule's)
    tokens: int  # response tokens, counted as discarded if it is dropped
    all_equal: bool = False  # dynamic sampling: all its samples scored the same
    reward_sum: float = 0.0  # dynamic sampling: its samples' rewards, summed


@message
class SlotAssigned:
    """Controller -> whoever sent ``GroupReady``: the group's step and group id, or step -1:
    dropped (too stale for any step left: its example handed out again; or, with dynamic
    sampling, all its samples scored the same)."""

    ticket: int
    step: int
    group_id: int
