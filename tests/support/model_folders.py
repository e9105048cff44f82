"""Model folders for tests that need one to pass the preflight, not to load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_placeholder_weights(folder: str | Path) -> Path:
    """A one-tensor ``model.safetensors``: the preflight refuses a folder without weights,
    and reads only headers, so this passes it (no rank could load it as the model)."""
    path = Path(folder) / "model.safetensors"
    save_file({"placeholder": np.zeros(1, np.float32)}, str(path))
    return path
