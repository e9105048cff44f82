"""What `mpirl run --restarts` logs about a failed job, from the job's own output."""

from __future__ import annotations

import json

from launch.tools.restarts import describe_failure, steps_reached

ROLES = ["controller", "generator", "reward", "trainer"]

# What Open MPI 5 (PRRTE) printed here for a rank killed with SIGKILL, and for one that exited 75.
PRTE_KILLED = """--------------------------------------------------------------------------
prterun noticed that process rank 1 with PID 10614 on node vm exited on
signal 9 (Killed).
--------------------------------------------------------------------------
"""
PRTE_EXITED = """prterun detected that one or more processes exited with non-zero status,
thus causing the job to be terminated. The first process to do so was:

   Process name: [prterun-vm-7881@1,2]
   Exit code:    75
"""


def test_a_rank_that_reported_its_failure_is_named_with_its_error():
    tail = "noise\n[mpirl] rank 3 (trainer) failed with RuntimeError: boom\ntraceback...\n"
    assert describe_failure(tail, ROLES) == "rank 3 (trainer) failed with RuntimeError: boom"


def test_a_killed_rank_is_found_in_open_mpis_report():
    assert describe_failure(PRTE_KILLED, ROLES) == "rank 1 (generator) died (signal 9)"
    assert describe_failure(PRTE_EXITED, ROLES) == "rank 2 (reward) died (exit code 75)"


def test_a_killed_rank_comes_before_the_peers_that_lost_their_connection_to_it():
    peer = "[mpirl] rank 3 (trainer) failed with RuntimeError: Connection closed by peer [10.0.0.2]:4242\n"
    assert describe_failure(peer + PRTE_KILLED, ROLES) == "rank 1 (generator) died (signal 9)"


def test_no_rank_named():
    assert describe_failure("", ROLES).startswith("no rank named")


def test_steps_reached_counts_complete_lines(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0}) + "\n" + json.dumps({"step": 1}) + '\n{"st')
    assert steps_reached(tmp_path) == 2 and steps_reached(tmp_path / "none") == 0
