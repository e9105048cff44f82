"""``mpirl run --restarts N``: relaunch a failed job from its newest checkpoint, up to N times.

A rank that dies (a crash, an out-of-memory kill, a lost node) still takes the whole job down
at once (``runtime.failure``); this is what comes after. The relaunch is the same command:
``run.resume: auto`` makes it continue from the newest complete checkpoint, so what is lost
is at most ``checkpoint.every_steps`` steps. Each restart is logged with the rank that failed,
its role, how it failed and the step the run had reached. A job that stopped for a reason a
relaunch would not fix — a config error (exit 2), a checkpoint on a signal (exit 75), or a
signal to ``mpirl run`` itself — is not restarted.
"""

from __future__ import annotations

import re
from pathlib import Path

from roles.run_files import METRICS, read_jsonl

# runtime.failure's report, and Open MPI (PRRTE)'s for a rank that died without one.
_REPORTED = re.compile(r"\[mpirl\] rank (\d+) \((\w+)\) failed with ([^\n]*)")
_PRTE_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on\s+signal (\d+)")
_PRTE_PROC = re.compile(r"Process name: \[[^\]@]*@\d+,(\d+)\]")
_PRTE_HOW = re.compile(r"(Exit code):\s*([^\n]+)")


def describe_failure(output_tail: str, roles_by_rank: list[str]) -> str:
    """Which rank failed, its role and how, from the end of the job's output.

    A rank that died of a signal (SIGKILL from the OOM killer, a segfault) comes first: its
    peers then fail too, reporting the closed connection (gloo's "Connection closed by peer"),
    and one of those reports may reach the output before Open MPI's word on the dead rank."""
    signalled = _PRTE_SIGNALLED.search(output_tail)
    if signalled:
        rank = int(signalled.group(1))
        return f"rank {rank} ({_role(roles_by_rank, rank)}) died (signal {signalled.group(2)})"
    reported = _REPORTED.search(output_tail)
    if reported:
        rank, role, what = reported.groups()
        return f"rank {rank} ({role}) failed with {what.strip()}"
    proc = _PRTE_PROC.search(output_tail)
    if proc:
        rank = int(proc.group(1))
        how = _PRTE_HOW.search(output_tail, proc.end())
        detail = f" ({how.group(1).lower()} {how.group(2).strip()})" if how else ""
        return f"rank {rank} ({_role(roles_by_rank, rank)}) died{detail}"
    return "no rank named in the output (a lost node or the launcher itself)"


def _role(roles_by_rank: list[str], rank: int) -> str:
    return roles_by_rank[rank] if 0 <= rank < len(roles_by_rank) else "unknown role"


def steps_reached(run_out: str | Path) -> int:
    """Steps logged in the run's metrics.jsonl (complete lines only)."""
    path = Path(run_out) / METRICS
    if not path.is_file():
        return 0
    return len(read_jsonl(path)[0])
