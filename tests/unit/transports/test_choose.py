"""Which transport a mailbox gets (transports/choose.py) and the build that makes the compiled one."""

from __future__ import annotations

import json
import os
import stat

import pytest
from mpi4py import MPI

from transports import build, choose
from transports.mpi_transport import MPITransport


@pytest.fixture
def build_info(tmp_path, monkeypatch):
    """Point the chooser at a build record of the test's own; ``write(**fields)`` fills it."""
    path = tmp_path / "fast_transport.json"
    monkeypatch.setattr(choose, "_BUILD_INFO", path)
    choose.compiled_transport.cache_clear()
    yield lambda **fields: path.write_text(json.dumps(fields))
    choose.compiled_transport.cache_clear()


def test_python_is_chosen_on_request(monkeypatch):
    monkeypatch.setenv(choose.ENV, "python")
    assert choose.transport_class() is MPITransport


def test_an_unknown_choice_is_an_error_that_lists_the_choices(monkeypatch):
    monkeypatch.setenv(choose.ENV, "fastest")
    with pytest.raises(choose.TransportUnavailable, match="'fastest': expected auto, python or compiled"):
        choose.transport_class()


def test_without_a_build_auto_falls_back_and_compiled_says_why(build_info, monkeypatch):
    monkeypatch.setenv(choose.ENV, "auto")
    assert choose.transport_class() is MPITransport
    monkeypatch.setenv(choose.ENV, "compiled")
    with pytest.raises(choose.TransportUnavailable, match=r"not built \(python -m transports.build\)"):
        choose.transport_class()


def test_a_build_for_another_mpi_is_not_imported(build_info, monkeypatch):
    build_info(mpi="Some Other MPI", source=choose.source_digest())
    monkeypatch.setenv(choose.ENV, "compiled")
    loaded = MPI.get_vendor()[0]
    with pytest.raises(choose.TransportUnavailable, match=f"built for Some Other MPI, but mpi4py loaded {loaded}"):
        choose.transport_class()
    monkeypatch.setenv(choose.ENV, "auto")
    assert choose.transport_class() is MPITransport


def test_a_build_older_than_its_source_is_not_used(build_info, monkeypatch):
    build_info(mpi=MPI.get_vendor()[0], source="0" * 16)
    monkeypatch.setenv(choose.ENV, "compiled")
    with pytest.raises(choose.TransportUnavailable, match="older than its sources"):
        choose.transport_class()


def test_a_damaged_build_record_counts_as_no_build(build_info):
    build_info(mpi=MPI.get_vendor()[0])  # no source digest
    assert choose.compiled_transport() == "not built (python -m transports.build)"


def test_the_built_module_is_what_a_mailbox_gets(monkeypatch):
    """When ``make venv`` built it (the normal case), auto picks it; a mailbox then uses it."""
    choose.compiled_transport.cache_clear()
    found = choose.compiled_transport()
    if isinstance(found, str):
        pytest.skip(f"the compiled transport is {found}")
    from runtime import Mailbox, RoleTable

    monkeypatch.delenv(choose.ENV, raising=False)
    mb = Mailbox(RoleTable(MPI.COMM_SELF, ["solo"]))
    try:
        assert type(mb.transport) is found
    finally:
        mb.close(timeout_s=10)
        mb.comm.Free()


# ---------------------------------------------------------------------------------- build


def fake_mpicc(tmp_path, output: str, exit_code: int = 0) -> str:
    path = tmp_path / "mpicc"
    path.write_text(f"#!/bin/sh\necho '{output}'\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_compile_flags_are_read_from_the_mpi_wrapper(tmp_path):
    mpicc = fake_mpicc(tmp_path, "gcc -I/opt/mpi/include -pthread -L/opt/mpi/lib -Wl,-rpath -Wl,/opt/mpi/lib -lmpi")
    includes, links = build.compile_flags(mpicc)
    assert includes == ["/opt/mpi/include"]
    assert links == ["-L/opt/mpi/lib", "-Wl,-rpath", "-Wl,/opt/mpi/lib", "-lmpi"]


def test_a_wrapper_that_says_nothing_is_a_build_error(tmp_path):
    with pytest.raises(build.BuildError, match="does not say its flags"):
        build.compile_flags(fake_mpicc(tmp_path, "", exit_code=1))


def test_mpicc_named_in_the_environment_wins(tmp_path, monkeypatch):
    mpicc = fake_mpicc(tmp_path, "cc")
    monkeypatch.setenv("MPICC", mpicc)
    assert build.find_mpicc() == mpicc


def test_a_failed_build_warns_and_exits_0_unless_strict(monkeypatch, capsys):
    def fails(quiet=False):
        raise build.BuildError("no mpicc found")

    monkeypatch.setattr(build, "build", fails)
    assert build.main([]) == 0
    err = capsys.readouterr().err
    assert "not built: no mpicc found" in err and "Python transport" in err
    assert build.main(["--strict"]) == 1


def test_the_build_record_names_the_mpi_and_the_source(tmp_path):
    """The record that ``make venv``'s build wrote (skipped where it did not build)."""
    if not build.BUILD_INFO.exists():
        pytest.skip("the compiled transport is not built here")
    info = json.loads(build.BUILD_INFO.read_text())
    assert info["mpi"] == MPI.get_vendor()[0]
    assert os.access(info["mpicc"], os.X_OK)
    assert len(info["source"]) == 16


def test_a_job_says_when_it_runs_on_the_python_transport_unasked(build_info, monkeypatch):
    monkeypatch.delenv(choose.ENV, raising=False)
    assert choose.transport_notice() == (
        "note: the mailboxes use the Python transport (slower per message): "
        "the compiled one is not built (python -m transports.build)"
    )
    monkeypatch.setenv(choose.ENV, "python")  # asked for: nothing to say
    assert choose.transport_notice() is None
