"""A reward rank's own state in a checkpoint: its learned rewards' running statistics.

One small JSON file per reward rank beside its random states, written when the controller
asks for the rank's state (``SaveState``) and read when the rank is built on resume. A
checkpoint without one (written before a run had learned rewards) reads as empty.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from roles.checkpoint.layout import CheckpointIOError


def reward_state_file(path: str | Path, rank: int) -> Path:
    return Path(path) / "reward" / f"rank-{rank:05d}.json"


def save_reward_state(path: str | Path, rank: int, state: dict) -> None:
    if not state:
        return
    out = reward_state_file(path, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())


def read_reward_state(path: str | Path, rank: int) -> dict:
    f = reward_state_file(path, rank)
    if not f.is_file():
        return {}
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointIOError(f"{f}: cannot read the reward rank's state ({e})") from None
