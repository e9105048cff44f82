"""The build of the compiled modules (transports/build.py): the MPI's flags, its failure rules, its record."""

from __future__ import annotations

import json
import os
import stat

import pytest
from mpi4py import MPI

from transports import build, choose


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
    record = choose.build_folder(MPI.get_vendor()[0]) / "build.json"
    if not record.exists():
        pytest.skip("the compiled transport is not built here")
    info = json.loads(record.read_text())
    assert info["mpi"] == MPI.get_vendor()[0]
    assert os.access(info["mpicc"], os.X_OK)
    assert len(info["source"]) == 16
