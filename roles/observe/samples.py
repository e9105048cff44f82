"""Which generations of a step are shown (``logging.samples_per_step``), and what a shown one holds.

The choice is a rule every reward rank applies to the groups it scores, so the controller
needs no extra messages to ask for them: N samples per step, spread over the step's prompts
(sample 0 of each of the first N prompts; past the step's prompt count, sample 1 of each, and
so on), decoded by the reward rank (it has the text) and sent with its ``Scored`` notice.
"""

from __future__ import annotations


def shown_samples(position: int, prompts_per_step: int, samples_per_prompt: int, per_step: int) -> list[int]:
    """The indices of the samples to show from the group at ``position`` in its step."""
    return [
        k for k in range(samples_per_prompt) if k * prompts_per_step + position < per_step
    ]  # sample k of prompt p is the (k * P + p)-th shown


def shown_record(
    *, step, example_id, group_id, sample, prompt, response, reward, components, version, finish, notes=None
) -> dict:
    """One line of ``samples.jsonl``; ``notes``: what learned rewards said (a judge's verdict)."""
    record = {
        "step": int(step),
        "policy_version": int(version),
        "example_id": int(example_id),
        "group_id": int(group_id),
        "sample": int(sample),
        "prompt": prompt,
        "response": response,
        "reward": float(reward),
        "components": {k: float(v) for k, v in components.items()},
        "finish_reason": finish,
    }
    if notes:
        record["notes"] = {str(k): str(v) for k, v in notes.items()}
    return record
