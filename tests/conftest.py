"""Shared fixtures for the unit tests (one process) and the MPI tests.

The repository root goes on ``sys.path`` so ``runtime``, ``transports`` and ``launch`` import
without an install, and ``tests/`` itself so the ``support`` package does.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
for p in (str(REPO), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

# The tokenizer-class cache (roles/models/tokenizer.py) of the tests' throwaway model folders stays
# out of the user's home; the jobs the tests start inherit it.
os.environ.setdefault("MPIRL_CACHE_DIR", tempfile.mkdtemp(prefix="mpirl-test-cache-"))

# The CLI imports launch first, which quiets Hugging Face's progress bars before transformers
# reads its settings; in one test process that holds only if launch comes first here too.
import launch  # noqa: E402, F401


@pytest.fixture
def dummy_model(tmp_path) -> Path:
    """A folder that passes the role map's checks: a config.json, a one-tensor weight file
    (a folder without weights is refused) and the arith demo's character tokenizer, so the
    data step (``launch.preflight.data``) can render prompts. Nothing here can be
    loaded as a model."""
    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import save_char_tokenizer
    from support.model_folders import write_placeholder_weights

    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    write_placeholder_weights(d)
    save_char_tokenizer(d, ALPHABET)
    return d


@pytest.fixture
def base_config(dummy_model) -> dict:
    """A valid 4-rank role map (controller, generator, reward, trainer: one rank each)."""
    return copy.deepcopy(
        {
            "world": {"controller": 1, "generator": 1, "reward": 1, "trainer": 1},
            "model": {"path": str(dummy_model), "dtype": "float32"},
            "task": {"name": "arith"},
            "rollout": {"prompts_per_step": 4, "samples_per_prompt": 2, "max_new_tokens": 4},
            "algorithm": {"loss": "aipo", "rho": 4.0, "lr": 3.0e-5},
            "run": {"steps": 3, "max_staleness": 1, "seed": 0, "out": "runs/test"},
        }
    )


@pytest.fixture
def write_config(tmp_path):
    """``write_config(data) -> path``: dump a role map (a dict, or raw YAML text) to a file."""
    import yaml

    counter = iter(range(10_000))

    def write(data, name: str | None = None) -> Path:
        path = tmp_path / (name or f"config{next(counter)}.yaml")
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def sft_model(tmp_path_factory) -> Path:
    """The demo's warm-started tiny Llama, built once per test session."""
    from examples.arith import prepare as arith

    root = tmp_path_factory.mktemp("arith")
    arith.prepare_model(root, seed=0)
    return root / "sft"
