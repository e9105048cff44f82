"""Every rank's random states (Python, numpy, and torch where the rank has it: its CUDA
generator's too on a rank that uses a GPU), saved into a checkpoint as ``rng/rank-NNNNN.pkl``
and restored on resume."""

from __future__ import annotations

import os
import pickle
import random
import sys
from pathlib import Path

import numpy as np

from roles.checkpoint.layout import CheckpointIOError


def rng_state() -> dict:
    """This process's random states. torch's only where torch is imported: the controller and
    reward ranks never import it (launch/job.py), and their files must not need it to load."""
    state = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state().numpy().tobytes()
        if torch.cuda.is_initialized():  # a rank on a GPU (a trainer placed there, a generator)
            state["cuda"] = torch.cuda.get_rng_state().numpy().tobytes()  # its current device's
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch = sys.modules.get("torch")
    if torch is not None and state.get("torch") is not None:
        saved = state["torch"]
        if not isinstance(saved, torch.Tensor):  # bytes, as rng_state writes it
            saved = torch.frombuffer(bytearray(saved), dtype=torch.uint8)
        torch.set_rng_state(saved)
    cuda = state.get("cuda")
    if torch is not None and cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.frombuffer(bytearray(cuda), dtype=torch.uint8))


def rng_file(path: str | Path, rank: int) -> Path:
    return Path(path) / "rng" / f"rank-{rank:05d}.pkl"


def _torch_rng_file(path: str | Path, rank: int) -> Path:
    return Path(path) / "rng" / f"rank-{rank:05d}.pt"  # torch.save files, as earlier versions wrote them


def save_rng(path: str | Path, rank: int) -> None:
    out = rng_file(path, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        pickle.dump(rng_state(), f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())


def load_rng(path: str | Path, rank: int) -> bool:
    """Restore this rank's random states from checkpoint ``path``; False if it holds none for ``rank``."""
    f = rng_file(path, rank)
    if f.is_file():
        set_rng_state(read_rng(f))
        return True
    old = _torch_rng_file(path, rank)
    if not old.is_file():
        return False
    import torch

    set_rng_state(torch.load(old, weights_only=False))
    return True


def read_rng(f: Path) -> dict:
    """The random states in rng file ``f``; CheckpointIOError naming it when it is damaged."""
    try:
        with open(f, "rb") as fh:
            state = pickle.load(fh)
    except OSError as e:
        raise CheckpointIOError(f"{f}: cannot be read ({e.strerror or e})") from e
    except Exception as e:  # noqa: BLE001 - a damaged pickle raises any of a dozen types
        raise CheckpointIOError(f"{f}: damaged ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict) or "python" not in state or "numpy" not in state:
        raise CheckpointIOError(f"{f}: damaged (no Python and numpy random states in it)")
    return state
