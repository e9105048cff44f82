"""Whether the ranks of a job just started can take a stop signal yet (``mpirl run``).

``mpirl run`` turns a SIGTERM into a SIGUSR1 that ``mpiexec`` forwards to every rank
(launch/cli.py). In the first second of a job, ``mpiexec`` and the ranks' Python are still
starting: a SIGUSR1 then meets the default action, which kills the process (exit 138), and the
job ends without a checkpoint instead of stopping resumably. So a first signal is held until
every rank on this node catches SIGUSR1 (``/proc/PID/status``, SigCgt; ``launch/__main__.py``
installs the handlers first thing), for at most ``HOLD_S`` after the start: ranks on other
nodes are not seen from here, and a job older than that is past its start anyway.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

HOLD_S = 30.0
PROC = Path("/proc")


def catches(pid: int, signum: int = signal.SIGUSR1) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (False if it is gone or unreadable)."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def local_ranks(root: int) -> list[int]:
    """The processes under ``root`` (mpiexec) that run ``python -m launch``: this node's ranks."""
    children: dict[int, list[int]] = {}
    commands: dict[int, list[bytes]] = {}
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(proc.name)] = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        argv = commands.get(pid, [])
        if any(a == b"-m" and b == b"launch" for a, b in zip(argv, argv[1:])):
            found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def ranks_ready(root: int, ranks: int) -> bool:
    """All ``ranks`` are running here and each catches SIGUSR1."""
    pids = local_ranks(root)
    return len(pids) >= ranks and all(catches(pid) for pid in pids)


def wait_until_ready(root: int, ranks: int, started_at: float, poll_s: float = 0.05) -> None:
    """Return once the ranks are ready, or ``HOLD_S`` after ``started_at`` (time.monotonic())."""
    if not PROC.is_dir():  # not Linux: nothing to look at
        return
    while time.monotonic() - started_at < HOLD_S and not ranks_ready(root, ranks):
        time.sleep(poll_s)
