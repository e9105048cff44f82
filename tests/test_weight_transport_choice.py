"""weights.transport: auto picks the transport per job, the same on every model rank."""

import pytest

from launch import config
from roles.weights import WeightsConfig, resolve_transport

ONE_HOST_CPU = [("node-a", None), ("node-a", "cpu"), ("node-a", None)]  # a generator, a trainer, a generator


def test_auto_is_mpi_only_for_a_synchronous_run_of_cpu_weights_on_one_host():
    assert resolve_transport("auto", ONE_HOST_CPU, synchronous=True) == "mpi"
    # Asynchronous: gloo's threads move the bytes while the trainer computes.
    assert resolve_transport("auto", ONE_HOST_CPU, synchronous=False) == "torch"
    # Across hosts: gloo (an MPI send moves only while both ranks call into MPI).
    two_hosts = [("node-a", None), ("node-b", "cpu")]
    assert resolve_transport("auto", two_hosts, synchronous=True) == "torch"
    # GPU weights: NCCL.
    gpus = [("node-a", None), ("node-a", "cuda")]
    assert resolve_transport("auto", gpus, synchronous=True) == "torch"


@pytest.mark.parametrize(
    "kind", ["torch", "mpi"], ids=["gloo-or-nccl", "mpi-buffers"]
)  # an id "mpi" reads as pytest-mpi's marker
def test_a_transport_named_in_the_role_map_is_kept(kind):
    for placements in (ONE_HOST_CPU, [("a", None), ("b", "cuda")]):
        for synchronous in (True, False):
            assert resolve_transport(kind, placements, synchronous) == kind


def test_auto_is_the_default_and_a_misspelt_transport_is_refused(base_config):
    assert WeightsConfig().transport == "auto"
    with pytest.raises(config.ConfigError, match="transport"):
        config.parse({**base_config, "weights": {"transport": "nccl"}})
