"""transports/torch_dist.py: the rendezvous address, checked before anyone waits on it."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from transports import torch_dist


def test_a_master_address_of_another_node_is_refused_naming_the_setting(monkeypatch):
    # 192.0.2.1 (TEST-NET-1) is never an address of this machine.
    monkeypatch.setenv("MPIRL_MASTER_ADDR", "192.0.2.1")
    with pytest.raises(RuntimeError, match=r"MPIRL_MASTER_ADDR=192\.0\.2\.1 is not an address of .*rendezvous store"):
        torch_dist.init_torch_distributed(MPI.COMM_SELF, backend="gloo", timeout_s=5)


def test_an_address_of_this_node_passes_the_check():
    torch_dist._check_local_address("127.0.0.1")
    with pytest.raises(ValueError, match="MPIRL_MASTER_ADDR"):
        torch_dist._check_local_address("192.0.2.1")


def test_a_host_name_of_this_node_passes_and_one_that_does_not_resolve_is_refused():
    torch_dist._check_local_address("localhost")
    with pytest.raises(ValueError, match="does not resolve"):
        torch_dist._check_local_address("no-such-host.invalid")
