"""Running untrusted Python code in a child process: limits, no network, writes kept in one folder.

``run_code`` starts ``python -I -B`` (the rank's interpreter, isolated: no user site, no
PYTHON* variables, no current folder on the path) in a fresh scratch folder, removed after.
The child runs in a session of its own (its process group is killed at the wall-clock
limit), dies with its parent (PR_SET_PDEATHSIG), and has rlimits on CPU time, address space,
file size and processes. The network is cut where the kernel allows it (a new network
namespace: as root, or inside a new user namespace); in any case ``BOOTSTRAP`` installs an
audit hook (``sys.addaudithook``) before the code runs that refuses socket connects and binds,
writes outside the scratch folder, new processes (subprocess, os.system, exec, fork, spawn),
and signals to other processes.

This is a guard against accidents and the common escapes of a model's code, not a security
boundary against a determined attacker (an audit hook can be got round from native code):
run the workers in a container for that. Not known here: tools, episodes, the output's use.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

FILE_SIZE_LIMIT = 16 << 20  # bytes per file written (stdout and stderr included)
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

# Runs first in the child: reads the code, installs the hook, then runs the code as __main__.
BOOTSTRAP = r"""
import os, sys
def _install(scratch):
    # In a closure, so that the code cannot reach the hook's tables through __main__.
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    refused = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
               "os.forkpty", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
               "socket.connect", "socket.bind", "socket.sendto",
               "socket.sendmsg", "os.startfile", "sys.addaudithook"}
    paths_of = {"os.remove": slice(0, 1), "os.rename": slice(0, 2), "os.rmdir": slice(0, 1),
                "os.mkdir": slice(0, 1), "os.chmod": slice(0, 1), "os.chown": slice(0, 1),
                "os.symlink": slice(0, 2), "os.link": slice(0, 2), "os.truncate": slice(0, 1),
                "os.utime": slice(0, 1), "shutil.rmtree": slice(0, 1), "shutil.move": slice(1, 2),
                "shutil.copyfile": slice(1, 2)}
    realpath, join, fsdecode, sep = os.path.realpath, os.path.join, os.fsdecode, os.sep
    def inside(path):
        if isinstance(path, int):
            return True
        path = realpath(join(scratch, fsdecode(path)))
        return path == scratch or path.startswith(scratch + sep)
    def hook(event, args):
        if event in refused:
            raise PermissionError(f"not allowed in this sandbox: {event}")
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & write_flags)
            if writing and path is not None and not inside(path):
                raise PermissionError(f"writing outside the scratch folder is not allowed: {path!r}")
        elif event in paths_of:
            for path in args[paths_of[event]]:
                if path is not None and not inside(path):
                    raise PermissionError(f"{event} outside the scratch folder is not allowed: {path!r}")
    sys.addaudithook(hook)
sys.dont_write_bytecode = True
with open(sys.argv[1], encoding="utf-8") as _f:
    _code = compile(_f.read(), "<code>", "exec")
sys.argv = ["<code>"]
_install(os.path.realpath(os.getcwd()))
del _install, _f
try:
    exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
except SystemExit:
    raise
except BaseException as _e:  # the traceback from the code's own frame on, not this script's
    import traceback
    traceback.print_exception(type(_e), _e, _e.__traceback__.tb_next)
    sys.exit(1)
"""


@dataclass
class Outcome:
    stdout: str  # at most max_chars characters of each
    stderr: str
    cut: bool  # stdout or stderr had more
    returncode: int | None  # None: killed at the wall-clock limit
    timed_out: bool
    seconds: float


def _cut_network() -> None:
    """Enter a new network namespace (only a loopback that is down) where the kernel allows."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) != 0:
            libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)  # unprivileged: needs user namespaces
    except (OSError, AttributeError):
        pass  # not Linux: the audit hook still refuses sockets


def _limit(cpu_s: int, memory_bytes: int) -> None:
    """The child's limits, set between fork and exec (``preexec_fn``)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG: die with the worker
    _cut_network()
    limits = [
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
        (getattr(resource, "RLIMIT_NPROC", None), 0),  # no new processes (or threads): not enforced for root
        (getattr(resource, "RLIMIT_CORE", None), 0),
    ]
    for which, value in limits:
        if which is not None:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(which, (value, value))


def _read_head(path: str, max_chars: int) -> tuple[str, bool]:
    """The first ``max_chars`` characters of the file, and whether there was more."""
    with open(path, "rb") as f:
        data = f.read(max_chars * 4 + 4)  # at most 4 bytes a character in UTF-8
        more = bool(f.read(1))
    text = data.decode("utf-8", errors="replace")
    return text[:max_chars], more or len(text) > max_chars


def _read_tail(path: str, max_chars: int) -> tuple[str, bool]:
    """The last ``max_chars`` characters of the file (where a traceback's error is), and
    whether there was more."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - (max_chars * 4 + 4)))
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    return text[-max_chars:], size > len(data) or len(text) > max_chars


def run_code(code: str, timeout_s: float, memory_mb: int, max_chars: int) -> Outcome:
    """Run ``code`` under the limits. stdout and stderr go to files (a flood fills neither a pipe
    nor memory; FILE_SIZE_LIMIT stops it) and come back cut at ``max_chars`` each: the head of
    stdout, the tail of stderr."""
    home = tempfile.mkdtemp(prefix="mpirl-python-")
    scratch = os.path.join(home, "scratch")
    os.mkdir(scratch)
    try:
        source = os.path.join(home, "code.py")
        with open(source, "w", encoding="utf-8") as f:
            f.write(code)
        out_path, err_path = os.path.join(home, "stdout"), os.path.join(home, "stderr")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
        started = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", BOOTSTRAP, source],
                cwd=scratch,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed as one
                preexec_fn=functools.partial(_limit, math.ceil(timeout_s) + 1, memory_mb << 20),
            )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left behind, or itself at the limit
        proc.wait()
        seconds = time.monotonic() - started
        (stdout, cut_out), (stderr, cut_err) = _read_head(out_path, max_chars), _read_tail(err_path, max_chars)
        returncode = None if timed_out else proc.returncode
        return Outcome(stdout, stderr, cut_out or cut_err, returncode, timed_out, seconds)
    finally:
        shutil.rmtree(home, ignore_errors=True)
