"""Wall-clock spans per rank: what each rank was doing, when, for timelines.

Each rank records ``(name, start, end)`` in wall-clock seconds (``time.time()``: comparable
across the ranks of one node, and across nodes as far as their clocks agree) into
``<run.out>/spans/rank-NNNN.jsonl``: a header line (rank, role, memory), then a JSON line per
span. ``mpirl trace`` turns the files of all ranks into a Perfetto/Chrome trace and a PNG
timeline.

The file is written as the run goes, not only at its end, so that a run that was killed, or
crashed, can still be traced up to its last seconds: the header and the start-up spans when
the actor starts (:meth:`Spans.start_file`), then what is new every ``FLUSH_EVERY_S`` (the
actor loop asks, one comparison a turn; no thread), appended in one write. At a normal end the
whole file is written again (:meth:`Spans.write`), replaced at once, with the header's peak
memory as of the end (a killed rank's header holds it as of its start). A rank killed mid-write
leaves a torn last line, which ``mpirl trace`` skips.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import socket
import sys
import time
from pathlib import Path

# Seconds between a rank's appends to its span file: a killed run loses at most the last few
# seconds of its timeline, for one small write every few seconds (spans are recorded per
# message hand-off, so writing each one as it came would cost a system call per message).
FLUSH_EVERY_S = 5.0

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


def span_file(out_dir: str | Path, rank: int) -> Path:
    return Path(out_dir) / "spans" / f"rank-{rank:04d}.jsonl"


def clear_spans(out_dir: str | Path) -> None:
    """Remove the span files an earlier start of this run left (a resumed run may have fewer
    ranks, and a rank that dies before its first write would keep its old file): a trace shows
    the latest start alone. Call on one rank before any rank starts its file."""
    for f in (Path(out_dir) / "spans").glob("rank-*.jsonl"):
        f.unlink(missing_ok=True)


def _line(name: str, start: float, end: float) -> str:
    return json.dumps({"name": name, "start": start, "end": end}) + "\n"


class Spans:
    flush_every_s = FLUSH_EVERY_S

    def __init__(self, rank: int, role: str, index: int):
        self.rank, self.role, self.index = rank, role, index
        self.records: list[tuple[str, float, float]] = []
        self.path: Path | None = None  # the file being written as the run goes (start_file)
        self._written = 0  # records already in it
        # time.perf_counter() from which the next flush is due (the actor loop compares); never
        # until a file is started.
        self.flush_at = math.inf

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

    def _header(self) -> str:
        header = {
            "rank": self.rank,
            "role": self.role,
            "index": self.index,
            "peak_rss_bytes": peak_rss_bytes(),
            # torch costs seconds of start-up: the trace shows which ranks imported it.
            "torch_imported": "torch" in sys.modules,
            # What MPICH's mpiexec names a dead rank by: its process id, on its host.
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        return json.dumps(header) + "\n"

    def start_file(self, out_dir: str | Path) -> Path:
        """Begin this rank's file under ``out_dir`` afresh (a file an earlier start left is
        replaced, never appended to): the header and the spans so far, now; then the actor loop
        calls :meth:`flush` whenever ``flush_at`` has passed."""
        path = span_file(out_dir, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            f.write(self._header())
        self.path, self._written = path, 0
        self.flush()
        return path

    def flush(self) -> None:
        """Append the spans recorded since the last flush to the started file, in one write."""
        self.flush_at = time.perf_counter() + self.flush_every_s
        if self.path is None or self._written == len(self.records):
            return
        new = self.records[self._written :]
        try:
            with open(self.path, "a") as f:
                f.write("".join(_line(*r) for r in new))
        except OSError as e:  # a full disk must not stop the run: the timeline waits for write()
            print(
                f"mpirl: warning: rank {self.rank}: cannot append to {self.path} ({e.strerror or e}); "
                "its spans are written when the run ends",
                file=sys.stderr,
                flush=True,
            )
            self.path, self.flush_at = None, math.inf
            return
        self._written = len(self.records)

    def write(self, out_dir: str | Path) -> Path:
        """The whole file, once the run is over: every span, and the header's memory as of now.
        Written beside it and renamed over it, so the file is whole or the streamed one."""
        path = span_file(out_dir, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")  # not rank-*.jsonl: trace never reads it
        with open(tmp, "w") as f:
            f.write(self._header())
            f.write("".join(_line(*r) for r in self.records))
        os.replace(tmp, path)
        self.path, self._written = path, len(self.records)  # a later flush appends after these
        return path
