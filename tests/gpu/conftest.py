"""GPU tests (``make test-gpu``): each needs CUDA and is skipped, with the reason, without it, so
that the target passes (as a list of skips) on a machine with none, CI's included."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    for item in items:
        item.add_marker(skip)
