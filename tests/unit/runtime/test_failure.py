"""The failure report reaches the launcher before the abort: the wait on unread output."""

from __future__ import annotations

import os
import threading
import time

from runtime import failure


def test_a_pipe_counts_what_its_reader_has_not_taken(tmp_path):
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"[mpirl] rank 0 (controller) failed\n")
        assert failure._unread_bytes(write_end) == 35
        os.read(read_end, 10)
        assert failure._unread_bytes(write_end) == 25
        os.read(read_end, 100)
        assert failure._unread_bytes(write_end) == 0
    finally:
        os.close(read_end), os.close(write_end)
    with open(tmp_path / "log", "wb") as file:  # a file is written through: nothing to wait for
        file.write(b"x" * 100)
        file.flush()
        assert failure._unread_bytes(file.fileno()) == 0


def _pipe_as_stderr():
    read_end, write_end = os.pipe()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    return read_end, saved


def _restore_stderr(read_end, saved):
    os.dup2(saved, 2)
    os.close(saved), os.close(read_end)


def test_the_abort_waits_until_the_launcher_read_the_report():
    read_end, saved = _pipe_as_stderr()
    try:
        os.write(2, b"the report\n")
        taken = []
        reader = threading.Timer(0.3, lambda: taken.append((time.monotonic(), os.read(read_end, 100))))
        t0 = time.monotonic()
        reader.start()
        failure.wait_until_output_is_read(timeout_s=5.0)
        waited = time.monotonic() - t0
        reader.join()
    finally:
        _restore_stderr(read_end, saved)
    assert taken[0][1] == b"the report\n"
    assert 0.25 < waited < 2.0, waited  # until the read, not the bound


def test_a_launcher_that_never_reads_delays_the_abort_only_to_the_bound():
    read_end, saved = _pipe_as_stderr()
    try:
        os.write(2, b"nobody reads this\n")
        t0 = time.monotonic()
        failure.wait_until_output_is_read(timeout_s=0.3)
        waited = time.monotonic() - t0
    finally:
        _restore_stderr(read_end, saved)
    assert 0.25 < waited < 1.5, waited
