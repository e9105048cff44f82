"""launch/signal_ready.py: ``mpirl run`` holds a first stop signal until the ranks catch it."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import signal_ready

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux: /proc")


def _rank(catches: bool) -> subprocess.Popen:
    """A stand-in rank: a child whose arguments read ``-m launch``, with or without a SIGUSR1 handler."""
    body = "import signal, time\n"
    if catches:
        body += "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
    body += "print('up', flush=True)\ntime.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", body, "-m", "launch"], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"up\n"
    return child


@pytest.mark.parametrize("catches", [True, False])
def test_ranks_are_ready_once_each_catches_sigusr1(catches):
    child = _rank(catches)
    try:
        assert signal_ready.local_ranks(os.getpid()) == [child.pid]
        assert signal_ready.ranks_ready(os.getpid(), 1) is catches
        assert not signal_ready.ranks_ready(os.getpid(), 2)  # one of two ranks started so far
    finally:
        child.kill()
        child.wait()


def test_the_hold_ends_after_its_bound_whatever_the_ranks(monkeypatch):
    monkeypatch.setattr(signal_ready, "HOLD_S", 0.3)
    t0 = time.monotonic()
    signal_ready.wait_until_ready(os.getpid(), 1, started_at=t0)  # no rank at all: held, then let go
    assert 0.25 < time.monotonic() - t0 < 5
