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
