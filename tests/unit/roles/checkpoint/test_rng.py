"""roles/checkpoint/rng.py: every rank's random states continue after a save and a restore,
on ranks with and without torch, from the files of earlier versions too."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import torch

from roles.checkpoint.rng import load_rng, save_rng


def test_random_streams_continue_after_a_round_trip(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_rng(tmp_path, 7)
    want = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    assert load_rng(tmp_path, 7)
    assert (random.random(), np.random.rand()) == want[:2] and torch.equal(torch.rand(3), want[2])
    assert not load_rng(tmp_path, 8)  # a rank it never had: nothing restored


def test_random_states_of_checkpoints_from_earlier_versions_still_load(tmp_path):
    """Earlier versions wrote each rank's states with torch.save, the torch state a tensor."""
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    old = tmp_path / "rng" / "rank-00007.pt"
    old.parent.mkdir()
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}, old)
    want = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    assert load_rng(tmp_path, 7)
    assert (random.random(), np.random.rand()) == want[:2] and torch.equal(torch.rand(3), want[2])


def test_a_rank_without_torch_saves_and_restores_its_states_without_importing_it(tmp_path):
    script = f"""
import random, sys
import numpy as np
from roles.checkpoint.rng import load_rng, save_rng
random.seed(1); np.random.seed(2)
save_rng({str(tmp_path)!r}, 3)
want = (random.random(), float(np.random.rand()))
random.seed(9); np.random.seed(9)
assert load_rng({str(tmp_path)!r}, 3)
assert (random.random(), float(np.random.rand())) == want
assert "torch" not in sys.modules, "torch was imported"
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # A rank that holds torch restores from the same file what the torch-free one saved.
    random.seed(9)
    assert load_rng(tmp_path, 3)
