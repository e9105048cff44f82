"""The long-tail workload's reward: the sum, then filler only.

A response is ``<a+b><filler>``: the answer, then a run of the filler character the prompt
names, whose length is heavy-tailed (``examples.long_tail.prepare``). The answer comes first so that a response's
length has no bearing on its reward: RL then leaves the length distribution (what the
benchmark is about) as it is instead of learning to cut the tail, and a response cut at
``max_new_tokens`` keeps its answer. Named in the role map as
``examples.long_tail.reward:tail_answer``; it imports nothing heavy, since every reward rank's
scoring processes import it.
"""

from __future__ import annotations

# One character per length class (prepare.LENGTH_CLASSES), named by the prompt's first character:
# the model then only has to learn a constant stop rate per character.
FILLER = "abc"
EOS_MARK = "<eos>"


def tail_answer(response: str, example) -> dict[str, float]:
    """1.0 if ``response`` (up to an ``<eos>`` marker) is exactly the answer then filler characters."""
    text = response.split(EOS_MARK, 1)[0]
    ok = 1.0 if text.rstrip(FILLER) == example.answer else 0.0
    return {"score": ok, "correct": ok}
