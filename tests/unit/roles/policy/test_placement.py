"""A trainer's device (``world.trainer.device``) and its weight sync's path, without a GPU: the
device each setting resolves to (torch.cuda mocked), the device the shards are sent from for
each weight transport, and the policy's host copies of its shards for that sync."""

from __future__ import annotations

import pytest
import torch

from roles.policy.placement import trainer_device, wants_cuda
from roles.policy.weight_transport import RECEIVE_DEVICE, send_device

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: torch.cuda says it sees ``n`` GPUs; returns the devices set current."""

    def see(n: int) -> list:
        current = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", current.append)
        return current

    return see


@pytest.mark.parametrize(
    ("wanted", "cuda", "expected"),
    [("cpu", True, False), ("cpu", False, False), ("auto", True, True), ("auto", False, False), ("cuda", True, True)],
)
def test_wants_cuda(wanted, cuda, expected):
    assert wants_cuda(wanted, cuda) is expected


def test_an_unknown_device_is_named():
    with pytest.raises(ValueError, match="world.trainer.device: unknown device 'gpu'"):
        wants_cuda("gpu", True)


def test_cpu_never_asks_cuda(monkeypatch):
    def asked():
        raise AssertionError("torch.cuda was asked")

    monkeypatch.setattr(torch.cuda, "is_available", asked)
    assert trainer_device("cpu", 3) == torch.device("cpu")


def test_auto_without_a_gpu_is_the_cpu(gpus):
    current = gpus(0)
    assert trainer_device("auto", 1) == torch.device("cpu") and current == []


@pytest.mark.parametrize("wanted", ["auto", "cuda"])
def test_a_gpu_trainer_takes_its_slot_and_makes_it_current(gpus, wanted):
    current = gpus(4)
    assert trainer_device(wanted, 2) == torch.device("cuda", 2)
    assert current == [torch.device("cuda", 2)]


def test_more_slots_than_gpus_share_them_round_robin(gpus, caplog):
    current = gpus(2)
    with caplog.at_level("WARNING"):
        assert trainer_device("cuda", 3) == torch.device("cuda", 1)
    assert current == [torch.device("cuda", 1)] and "shares GPU 1" in caplog.text


def test_cuda_without_a_gpu_is_an_error_naming_the_field(gpus):
    gpus(0)
    with pytest.raises(RuntimeError, match="world.trainer.device is cuda, but this trainer rank sees no GPU"):
        trainer_device("cuda", 0)


# The weight sync's path: (transport, trainer device, generators' staging) -> the device sent from.
@pytest.mark.parametrize("kind", ["auto", "torch", "mpi"])
@pytest.mark.parametrize("trainer", ["cpu", "cuda"])
def test_generators_receiving_on_the_cpu_are_sent_from_the_cpu(kind, trainer):
    assert RECEIVE_DEVICE == "cpu"
    assert send_device(kind, trainer) == "cpu"


@pytest.mark.parametrize("kind", ["auto", "torch", "mpi"])
def test_gpu_to_gpu_sends_from_the_gpu(kind):
    # NCCL between GPUs; mpi only with a CUDA-aware MPI, which its channel asks at start-up.
    assert send_device(kind, "cuda", "cuda") == "cuda"


def test_cpu_trainers_to_gpu_staging_is_refused():
    with pytest.raises(ValueError, match="world.trainer.device: trainers on cpu cannot send"):
        send_device("torch", "cpu", "cuda")


def test_an_unknown_transport_is_named():
    with pytest.raises(ValueError, match="weights.transport: unknown transport 'nccl'"):
        send_device("nccl", "cuda")


def _policy(send_to: str):
    from roles.policy.model import Policy
    from support.tiny_models import tiny_llama

    return Policy(tiny_llama(), tokenizer_dir="", sharded=False, send_device=send_to)


def test_shards_on_the_send_device_go_as_they_are():
    policy = _policy("cpu")
    shards = policy.local_params()
    params = list(policy.model.parameters())
    assert len(shards) == len(params) and all(s.tensor.data_ptr() == p.data_ptr() for s, p in zip(shards, params))


def test_shards_elsewhere_are_copied_to_the_send_device():
    # "meta" stands for a device the shards are not on (a CUDA one on a GPU machine).
    policy = _policy("meta")
    shards = policy.local_params()
    whole = _policy("cpu").local_params()
    assert [s.tensor.device.type for s in shards] == ["meta"] * len(whole)
    assert [(s.name, s.global_shape, s.offset, tuple(s.tensor.shape)) for s in shards] == [
        (s.name, s.global_shape, s.offset, tuple(s.tensor.shape)) for s in whole
    ]
    assert policy._staged is shards  # kept alive while the sends read them


def test_a_checkpoint_keeps_the_cuda_generator_state(monkeypatch):
    from roles.checkpoint import rng

    restored = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: torch.arange(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", restored.append)
    state = rng.rng_state()
    assert state["cuda"] == bytes(range(16))
    rng.set_rng_state(state)
    assert len(restored) == 1 and restored[0].tolist() == list(range(16))


def test_a_cpu_rank_saves_no_cuda_state(monkeypatch):
    from roles.checkpoint import rng

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert "cuda" not in rng.rng_state()
    rng.set_rng_state({**rng.rng_state(), "cuda": None})  # an older file, or a CPU rank's
