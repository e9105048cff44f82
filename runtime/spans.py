"""Wall-clock spans per rank: what each rank was doing, when, for timelines.

Each rank records ``(name, start, end)`` in wall-clock seconds (``time.time()``: comparable
across the ranks of one node, and across nodes as far as their clocks agree) and writes
them as JSON lines at the end of the run. ``mpirl trace`` turns the files of all ranks into
a Perfetto/Chrome trace and a PNG timeline.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time
from pathlib import Path

# Start-up and shutdown phases (launch/main.py, launch/job.py): spans named with these
# prefixes, so that a timeline shows where the time before the first step and after the last
# one goes, rank by rank (bench/scale.py reports them as startup_s and shutdown_s).
START_PREFIX = "start."
STOP_PREFIX = "stop."


def process_started_at() -> float:
    """When this process started, in ``time.time()`` seconds: before the interpreter and its
    imports, which a clock started in Python would miss. Linux reads it from /proc; elsewhere
    it is the time of this call."""
    try:
        # Field 22 of /proc/self/stat: start time in clock ticks since boot (the command name,
        # field 2, may hold spaces, so fields are counted from its closing parenthesis).
        # Its age against /proc/uptime (1/100 s), not against the boot time in /proc/stat, which
        # is in whole seconds.
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        pass
    return time.time()


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far.

    Linux: the address space's high-water mark (VmHWM in /proc/self/status). Not getrusage's
    ru_maxrss, which a child inherits from its parent at fork and keeps across exec: a rank
    started by a 2 GB process would report 2 GB. Elsewhere ru_maxrss (KiB, bytes on macOS).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class Spans:
    def __init__(self, rank: int, role: str, index: int):
        self.rank, self.role, self.index = rank, role, index
        self.records: list[tuple[str, float, float]] = []

    @contextlib.contextmanager
    def span(self, name: str):
        t0 = time.time()
        try:
            yield
        finally:
            self.records.append((name, t0, time.time()))

    def add(self, name: str, start: float, end: float) -> None:
        self.records.append((name, start, end))

    def busy_seconds(self, since: float, names: tuple[str, ...] | None = None) -> float:
        """Seconds spent in spans (of ``names``) that ended after ``since`` (clipped to it)."""
        total = 0.0
        for name, t0, t1 in reversed(self.records):
            if t1 <= since:
                break
            if names is None or name in names:
                total += t1 - max(t0, since)
        return total

    def write(self, out_dir: str | Path) -> Path:
        path = Path(out_dir) / "spans" / f"rank-{self.rank:04d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            header = {
                "rank": self.rank,
                "role": self.role,
                "index": self.index,
                "peak_rss_bytes": peak_rss_bytes(),
                # Seconds of start-up on a small machine: only the ranks holding a model should (docs/log.md).
                "torch_imported": "torch" in sys.modules,
            }
            f.write(json.dumps(header) + "\n")
            for name, t0, t1 in self.records:
                f.write(json.dumps({"name": name, "start": t0, "end": t1}) + "\n")
        return path


class NoSpans(Spans):
    """A recorder that records nothing (for actors built outside a job, e.g. in tests)."""

    def __init__(self):
        super().__init__(-1, "none", 0)

    @contextlib.contextmanager
    def span(self, name: str):
        yield

    def add(self, name: str, start: float, end: float) -> None:
        pass
