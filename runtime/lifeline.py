"""A rank must not outlive the process that launched it.

A rank orphaned by a killed ``mpirun`` (or ``srun`` step daemon) while deep in a long
computation would run on, holding memory or a GPU; likewise mpiexec when ``mpirl run`` is
killed (``end_with_parent``). A rank has two ties, both set once when it starts:

- Linux's ``PR_SET_PDEATHSIG``: SIGKILL the moment the parent exits, whatever the rank does;
- a daemon thread that checks every ``interval_s`` that the parent is still the one that
  started the rank: the fallback where ``prctl`` is missing (it needs the GIL).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1


def tie_to_launcher(interval_s: float = 1.0) -> bool:
    """Make this process die with its parent. Returns whether the kernel's tie was set."""
    parent = os.getppid()
    tied = _set_parent_death_signal()
    if parent == 1 or os.getppid() != parent:  # already orphaned (the parent died meanwhile)
        _die(parent)
    watcher = threading.Thread(target=_watch, args=(parent, interval_s), name="mpirl-lifeline", daemon=True)
    watcher.start()
    return tied


def _load_prctl():
    """libc's prctl, found now (at import) so that a forked child can call it before exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # the process's own symbols include libc's
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    return _PRCTL is not None and _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def end_with_parent() -> None:
    """For ``preexec_fn`` of a launcher's child (``mpirl run``'s mpiexec): SIGTERM it when the
    launcher dies, which ends the job as a ``kill`` of mpiexec would. Only async-signal-safe
    work happens here (one prctl), as a forked child before exec requires."""
    _set_parent_death_signal(signal.SIGTERM)


def _watch(parent: int, interval_s: float) -> None:
    stop = threading.Event()
    while not stop.wait(interval_s):
        if os.getppid() != parent:
            _die(parent)


def _die(parent: int) -> None:
    try:
        sys.stderr.write(f"[mpirl] rank process {os.getpid()}: its launcher (pid {parent}) is gone; exiting\n")
        sys.stderr.flush()
    finally:
        os.kill(os.getpid(), signal.SIGKILL)
