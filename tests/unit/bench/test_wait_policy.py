"""bench/wait_policy.py: the benchmarks' Python wait loops give the core away where Open MPI's
``Wait`` would, so the mailbox is not charged a system call per poll that the raw side skips."""

import importlib.util

import pytest
from mpi4py import MPI

from support.paths import REPO

# Loaded by path: bench/ on sys.path would shadow the standard library's mailbox module.
_spec = importlib.util.spec_from_file_location("wait_policy", REPO / "bench" / "wait_policy.py")
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
yield_when_idle = _module.yield_when_idle


@pytest.mark.parametrize(("setting", "expected"), [("1", True), ("true", True), ("0", False), ("false", False)])
def test_an_explicit_open_mpi_setting_decides(monkeypatch, setting, expected):
    monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", setting)
    assert yield_when_idle(MPI.COMM_SELF) is expected


def test_ranks_spin_when_each_has_a_core(monkeypatch):
    monkeypatch.delenv("OMPI_MCA_mpi_yield_when_idle", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert yield_when_idle(MPI.COMM_SELF) is False


def test_ranks_yield_when_they_outnumber_the_cores(monkeypatch):
    monkeypatch.delenv("OMPI_MCA_mpi_yield_when_idle", raising=False)

    class TwoRanksOnOneCore:
        def allgather(self, affinity):
            return [affinity, affinity]

        def Get_size(self):
            return 2

        def Free(self):
            pass

    class Comm:
        def Split_type(self, kind):
            assert kind == MPI.COMM_TYPE_SHARED
            return TwoRanksOnOneCore()

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert yield_when_idle(Comm()) is True
