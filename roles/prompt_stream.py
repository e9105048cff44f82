"""The order training examples are sent in: a seeded shuffle per epoch, and its saved position.

The controller takes each step's examples from here; a checkpoint records the position as it
was before the first step not yet trained, so a resumed run sends exactly the examples the
uninterrupted run would have (none skipped, none twice).

The position indexes the sorted example ids, so it is only valid for the same training prompts:
it carries a fingerprint of them (``fingerprint``), and ``data_changed`` says whether the prompts
of a new start differ from those a position was taken over (data files rewritten in place).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np


def fingerprint(prompts: Mapping[int, np.ndarray]) -> str:
    """A digest of the training prompts (ids and token ids) a data position indexes: another
    row count, another row or another rendering of a prompt gives another digest."""
    h = hashlib.blake2b(digest_size=16)
    for example_id in sorted(prompts):
        tokens = np.ascontiguousarray(prompts[example_id], dtype=np.int64)
        h.update(int(example_id).to_bytes(9, "little", signed=True))  # ids reach 2**64 - 1
        h.update(tokens.size.to_bytes(8, "little"))
        h.update(tokens.tobytes())
    return h.hexdigest()


def data_changed(position: dict, examples: int, digest: str | None) -> str | None:
    """Why ``position`` (``PromptStream.position``'s) does not fit ``examples`` training prompts
    with fingerprint ``digest``; None when it fits. A position saved without a fingerprint (an
    older checkpoint) is checked by its count alone."""
    saved = len(position.get("order", ()))
    if saved != examples:
        return f"the checkpoint's data position covers {saved} examples, the task now has {examples}"
    if digest is not None and position.get("data") is not None and position["data"] != digest:
        return f"the {examples} training prompts are not the ones the checkpoint's data position indexes"
    return None


class PromptStream:
    def __init__(self, example_ids, seed: int, digest: str | None = None):
        self.ids = sorted(example_ids)
        self.digest = digest  # fingerprint(...) of the prompts, kept with the position
        self.rng = np.random.default_rng(seed)
        self.order = self._epoch_order()
        self.cursor = 0  # position in the current epoch's order

    def _epoch_order(self) -> np.ndarray:
        return self.rng.permutation(len(self.ids))

    def take(self, n: int) -> list[int]:
        """The next ``n`` example ids, starting a new shuffled epoch whenever one runs out."""
        out = []
        while len(out) < n:
            if self.cursor == len(self.order):
                self.order, self.cursor = self._epoch_order(), 0
            take = min(n - len(out), len(self.order) - self.cursor)
            out.extend(self.ids[i] for i in self.order[self.cursor : self.cursor + take])
            self.cursor += take
        return out

    def position(self) -> dict:
        """Everything ``restore`` needs (cheap: taken before every step is sent). The order is the
        epoch's array itself, never changed in place; ``roles.checkpoint.layout.write_json`` writes it."""
        return {"rng": self.rng.bit_generator.state, "order": self.order, "cursor": self.cursor, "data": self.digest}

    def restore(self, position: dict) -> None:
        # launch.resume.check_data refuses this first; kept so no caller restores over other prompts.
        if (why := data_changed(position, len(self.ids), self.digest)) is not None:
            raise ValueError(f"{why}: the training data changed")
        self.rng.bit_generator.state = position["rng"]
        self.order = np.asarray(position["order"], dtype=np.int64)
        self.cursor = int(position["cursor"])
