"""launch/fast_exit.py: a rank that finished leaves after the atexit handlers, skipping teardown."""

import subprocess
import sys

from support.mpi_helpers import REPO

PRELUDE = """\
import sys
sys.path.insert(0, sys.argv[1])
from launch import fast_exit
fast_exit.install()
import atexit
atexit.register(lambda: print("atexit handler ran", flush=True))


class Torn:  # its finalizer runs only in the interpreter's teardown
    def __del__(self):
        print("torn down", flush=True)


kept = Torn()
print("unflushed", end="")
"""


def run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + body, str(REPO)], capture_output=True, text=True, timeout=60)


def test_exit_now_runs_the_handlers_keeps_the_code_and_skips_teardown():
    done = run("fast_exit.exit_now(3)")
    assert done.returncode == 3
    assert done.stdout.startswith("unflushed") and "atexit handler ran" in done.stdout
    assert "torn down" not in done.stdout


def test_a_plain_exit_or_an_exception_ends_as_python_ends():
    done = run("sys.exit(4)")
    assert done.returncode == 4 and "torn down" in done.stdout and "atexit handler ran" in done.stdout
    done = run("raise RuntimeError('boom')")
    assert done.returncode == 1 and "torn down" in done.stdout and "boom" in done.stderr


def _proxy(reply: bytes):
    """A socket pair standing in for hydra's PMI connection: (the rank's fd, the proxy's end)."""
    import socket

    rank_end, proxy_end = socket.socketpair()
    if reply:
        proxy_end.sendall(reply)
    return rank_end, proxy_end


def test_under_hydra_the_rank_says_finalize_itself_and_waits_for_the_ack():
    """MPICH leaves PMI's finalize to a C atexit handler that os._exit skips (see the module)."""
    from launch.fast_exit import finish_hydra_pmi

    rank_end, proxy_end = _proxy(b"cmd=finalize_ack rc=0\n")
    with rank_end, proxy_end:
        env = {"PMI_FD": str(rank_end.fileno()), "HYDI_CONTROL_FD": "7"}
        assert finish_hydra_pmi(env, timeout_s=5) is True
        assert proxy_end.recv(64) == b"cmd=finalize\n"


def test_without_hydra_or_without_an_answer_nothing_is_said_or_waited_for_long():
    import time

    from launch.fast_exit import finish_hydra_pmi

    rank_end, proxy_end = _proxy(b"")
    with rank_end, proxy_end:
        proxy_end.setblocking(False)
        # Open MPI, Slurm's PMI-2 (PMI_FD alone): not hydra's, so nothing is written there.
        assert finish_hydra_pmi({"PMI_FD": str(rank_end.fileno())}) is False
        assert finish_hydra_pmi({}) is False
        try:
            written = proxy_end.recv(64)
        except BlockingIOError:
            written = b""
        assert written == b""
        started = time.monotonic()
        env = {"PMI_FD": str(rank_end.fileno()), "HYDI_CONTROL_FD": "7"}
        assert finish_hydra_pmi(env, timeout_s=0.3) is False  # a proxy that never answers
        assert time.monotonic() - started < 3
    assert finish_hydra_pmi({"PMI_FD": "not a number", "HYDI_CONTROL_FD": "7"}) is False
