"""Which transport a mailbox gets (transports/choose.py)."""

from __future__ import annotations

import json

import pytest
from mpi4py import MPI

from transports import choose
from transports.mpi_transport import MPITransport

LOADED = MPI.get_vendor()[0]
NOT_BUILT = rf"not built for {LOADED} \(python -m transports.build\)"


@pytest.fixture
def build_info(tmp_path, monkeypatch):
    """Point the chooser at build folders of the test's own; ``write(vendor=loaded MPI, **fields)``
    fills that MPI's build record."""
    monkeypatch.setattr(choose, "BUILT", tmp_path)
    choose.compiled_transport.cache_clear()

    def write(vendor=LOADED, **fields):
        folder = choose.build_folder(vendor)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "build.json").write_text(json.dumps(fields))

    yield write
    choose.compiled_transport.cache_clear()


def test_each_mpi_family_has_its_own_build_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(choose, "BUILT", tmp_path)
    assert choose.build_folder("Open MPI") == tmp_path / "open-mpi"
    assert choose.build_folder("MPICH") == tmp_path / "mpich"
    assert choose.build_folder("Intel(R) MPI") == tmp_path / "intel-r-mpi"


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
    with pytest.raises(choose.TransportUnavailable, match=NOT_BUILT):
        choose.transport_class()


def test_a_build_for_another_mpi_is_not_taken_for_this_one(build_info, monkeypatch):
    """Another MPI's build (an MPICH environment on the same source tree) sits in its own folder."""
    build_info(vendor="Some Other MPI", mpi="Some Other MPI", source=choose.source_digest())
    monkeypatch.setenv(choose.ENV, "compiled")
    with pytest.raises(choose.TransportUnavailable, match=NOT_BUILT):
        choose.transport_class()


def test_a_record_naming_another_mpi_is_not_imported(build_info, monkeypatch):
    build_info(mpi="Some Other MPI", source=choose.source_digest())
    monkeypatch.setenv(choose.ENV, "compiled")
    with pytest.raises(choose.TransportUnavailable, match=f"built for Some Other MPI, but mpi4py loaded {LOADED}"):
        choose.transport_class()
    monkeypatch.setenv(choose.ENV, "auto")
    assert choose.transport_class() is MPITransport


def test_a_build_older_than_its_source_is_not_used(build_info, monkeypatch):
    build_info(mpi=LOADED, source="0" * 16)
    monkeypatch.setenv(choose.ENV, "compiled")
    with pytest.raises(choose.TransportUnavailable, match="older than its sources"):
        choose.transport_class()


def test_a_damaged_build_record_counts_as_no_build(build_info):
    build_info(mpi=LOADED)  # no source digest
    assert choose.compiled_transport() == f"not built for {LOADED} (python -m transports.build)"


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


def test_a_job_says_when_it_runs_on_the_python_transport_unasked(build_info, monkeypatch):
    monkeypatch.delenv(choose.ENV, raising=False)
    assert choose.transport_notice() == (
        "note: the mailboxes use the Python transport (slower per message): "
        f"the compiled one is not built for {LOADED} (python -m transports.build)"
    )
    monkeypatch.setenv(choose.ENV, "python")  # asked for: nothing to say
    assert choose.transport_notice() is None
