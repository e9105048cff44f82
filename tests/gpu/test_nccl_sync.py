"""The weight sync between two GPUs over NCCL (tests/gpu/nccl_pair.py under mpirun): skipped on a
machine with fewer than two."""

from __future__ import annotations

import sys

import pytest
import torch

from support.mpi_helpers import REPO, run_mpi

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_weights_go_from_one_gpu_to_another_over_nccl():
    result = run_mpi(2, [sys.executable, str(REPO / "tests" / "gpu" / "nccl_pair.py")], timeout=300)
    assert result.rc == 0, result.stderr[-3000:]
    assert '"nccl_sync": "ok"' in result.stdout
