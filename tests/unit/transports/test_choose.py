"""Which transport a mailbox gets (transports/choose.py)."""

from __future__ import annotations

import json

import pytest
from mpi4py import MPI

from transports import choose
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


def test_a_job_says_when_it_runs_on_the_python_transport_unasked(build_info, monkeypatch):
    monkeypatch.delenv(choose.ENV, raising=False)
    assert choose.transport_notice() == (
        "note: the mailboxes use the Python transport (slower per message): "
        "the compiled one is not built (python -m transports.build)"
    )
    monkeypatch.setenv(choose.ENV, "python")  # asked for: nothing to say
    assert choose.transport_notice() is None
