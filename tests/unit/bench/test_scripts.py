"""Every benchmark and demo script starts: its imports resolve and ``--help`` exits 0.

A module moved in the library must take the scripts' imports with it; nothing else imports them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.mpi_helpers import mpi_env
from support.paths import REPO

SCRIPTS = sorted(
    str(p.relative_to(REPO)) for p in [*(REPO / "bench").glob("*.py"), *(REPO / "examples").glob("*/demo.py")]
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_starts(script):
    done = subprocess.run(
        [sys.executable, script, "--help"],
        cwd=REPO,
        env=mpi_env(),  # the repository on PYTHONPATH, as a user runs them from a checkout
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
