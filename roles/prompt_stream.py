"""The order training examples are sent in: a seeded shuffle per epoch, and its saved position.

The controller takes each step's examples from here; a checkpoint records the position as it
was before the first step not yet trained, so a resumed run sends exactly the examples the
uninterrupted run would have (none skipped, none twice).
"""

from __future__ import annotations

import numpy as np


class PromptStream:
    def __init__(self, example_ids, seed: int):
        self.ids = sorted(example_ids)
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
        epoch's array itself, never changed in place; ``roles.checkpoint.write_json`` writes it."""
        return {"rng": self.rng.bit_generator.state, "order": self.order, "cursor": self.cursor}

    def restore(self, position: dict) -> None:
        if len(position["order"]) != len(self.ids):
            raise ValueError(
                f"the checkpoint's data position covers {len(position['order'])} examples, "
                f"the task now has {len(self.ids)}: the training data changed"
            )
        self.rng.bit_generator.state = position["rng"]
        self.order = np.asarray(position["order"], dtype=np.int64)
        self.cursor = int(position["cursor"])
