"""weights.transport: auto picks the transport per job, the same on every model rank."""

import pytest

from launch import config
from roles.policy.weight_transport import WeightsConfig, resolve_transport

# A generator, a trainer, a generator: host, shard device, single-copy shared memory.
ONE_HOST_CPU = [("node-a", None, True), ("node-a", "cpu", True), ("node-a", None, True)]


def test_auto_is_mpi_only_for_a_synchronous_run_of_cpu_weights_on_one_host():
    assert resolve_transport("auto", ONE_HOST_CPU, synchronous=True) == "mpi"
    # Asynchronous: gloo's threads move the bytes while the trainer computes.
    assert resolve_transport("auto", ONE_HOST_CPU, synchronous=False) == "torch"
    # Across hosts: gloo (an MPI send moves only while both ranks call into MPI).
    two_hosts = [("node-a", None, True), ("node-b", "cpu", True)]
    assert resolve_transport("auto", two_hosts, synchronous=True) == "torch"
    # GPU weights: NCCL.
    gpus = [("node-a", None, True), ("node-a", "cuda", True)]
    assert resolve_transport("auto", gpus, synchronous=True) == "torch"
    # A rank that cannot read its peers' memory (a container's seccomp): MPI's sends would move
    # only in the sender's MPI calls, so gloo.
    no_cma = [("node-a", None, False), ("node-a", "cpu", True)]
    assert resolve_transport("auto", no_cma, synchronous=True) == "torch"


def test_single_copy_is_found_where_process_vm_readv_works(monkeypatch):
    from transports.weights import mpi_buffers

    assert mpi_buffers.single_copy_shared_memory() in (True, False)  # never raises
    # A syscall that fails (as under a seccomp profile that forbids it): no single copy.
    import ctypes

    class NoReadv:
        def __init__(self, *a, **k):
            pass

        @property
        def process_vm_readv(self):
            def refused(*args):
                return -1

            return refused

    monkeypatch.setattr(ctypes, "CDLL", NoReadv)
    assert mpi_buffers.single_copy_shared_memory() is False


@pytest.mark.parametrize(
    "kind", ["torch", "mpi"], ids=["gloo-or-nccl", "mpi-buffers"]
)  # an id "mpi" reads as pytest-mpi's marker
def test_a_transport_named_in_the_role_map_is_kept(kind):
    for placements in (ONE_HOST_CPU, [("a", None, False), ("b", "cuda", True)]):
        for synchronous in (True, False):
            assert resolve_transport(kind, placements, synchronous) == kind


def test_auto_is_the_default_and_a_misspelt_transport_is_refused(base_config):
    assert WeightsConfig().transport == "auto"
    with pytest.raises(config.ConfigError, match="transport"):
        config.parse({**base_config, "weights": {"transport": "nccl"}})
