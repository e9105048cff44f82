"""A rank dies with its launcher, even deep in C code (runtime/lifeline.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support.paths import REPO

# A "launcher" that starts a "rank" and prints its pid; the rank ties itself to the launcher,
# says so, and then blocks for minutes: in C holding the GIL (nothing in Python can run), or
# in a sleep that releases it with the kernel's tie turned off (only the watcher can act).
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
    print(rank.pid, flush=True)
    time.sleep(600)
    """
)
RANK = textwrap.dedent(
    """
    import ctypes, ctypes.util, sys, time
    sys.path.insert(0, {repo!r})
    from runtime import lifeline
    if {no_kernel_tie}:
        lifeline._set_parent_death_signal = lambda: False
    if {tied}:
        print("kernel tie", lifeline.tie_to_launcher(interval_s=0.2), file=sys.stderr, flush=True)
    if {hold_gil}:
        ctypes.PyDLL(ctypes.util.find_library("c")).sleep(600)  # PyDLL: the GIL stays held
    else:
        time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent, the killed launcher, cannot reap it).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: prctl and /proc")
@pytest.mark.parametrize(
    "hold_gil, no_kernel_tie, tied",
    [(True, False, True), (False, True, True), (False, False, False)],
    ids=["in C, GIL held", "watcher", "untied: outlives it (the test can tell)"],
)
def test_a_rank_does_not_outlive_its_launcher(hold_gil, no_kernel_tie, tied):
    rank_code = RANK.format(repo=str(REPO), hold_gil=hold_gil, no_kernel_tie=no_kernel_tie, tied=tied)
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, rank_code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    rank = int(launcher.stdout.readline())
    try:
        time.sleep(1.5)  # the rank is tied and blocked
        assert alive(rank)
        launcher.send_signal(signal.SIGKILL)  # mpirun lost
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 5
        while alive(rank) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(rank) is not tied, "the rank outlived its launcher" if tied else "untied, yet it died"
    finally:
        if alive(rank):
            os.kill(rank, signal.SIGKILL)
