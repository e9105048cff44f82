"""``world.trainer.device``: the role map's checks, the trainers' group backend it chooses, the
GPU slot order a trainer takes its GPU by, and the launch's check of the trainers' devices
against the GPUs each rank reports (``launch.preflight.devices``), all without a GPU."""

from __future__ import annotations

import pytest

from launch import config
from launch.distributed import CUDA_TRAIN_BACKEND, node_slot, train_group_backend
from launch.preflight.devices import RankReport, device_problem, rank_report
from support.role_maps import config_error

pytestmark = pytest.mark.timeout(60)


def test_trainers_stay_on_the_cpu_unless_told(base_config):
    assert config.parse(base_config).world.trainer.device == "cpu"
    base_config["world"]["trainer"] = 2
    base_config["rollout"]["prompts_per_step"] = 4
    assert config.parse(base_config).world.trainer.device == "cpu"  # the shorthand keeps the default


@pytest.mark.parametrize("device", ["cpu", "cuda", "auto"])
def test_each_device_is_accepted(base_config, device):
    base_config["world"]["trainer"] = {"ranks": 1, "device": device}
    assert config.parse(base_config).world.trainer.device == device


def test_an_unknown_device_is_named(base_config):
    base_config["world"]["trainer"] = {"ranks": 1, "device": "gpu"}
    message = config_error(base_config)
    assert "world.trainer.device" in message and "'gpu'" in message


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_colocated_ranks_refuse_a_trainer_device(base_config, device):
    base_config["world"] = {"controller": 1, "colocated": 2, "reward": 1, "generator": 0}
    base_config["world"]["trainer"] = {"ranks": 0, "device": device}
    base_config["run"]["max_staleness"] = 0
    message = config_error(base_config)
    assert message.startswith("roles.yaml: world: world.trainer.device") and "colocated" in message


def test_colocated_ranks_keep_the_default(base_config):
    base_config["world"] = {"controller": 1, "colocated": 2, "reward": 1, "generator": 0, "trainer": 0}
    base_config["run"]["max_staleness"] = 0
    assert config.parse(base_config).world.colocated_mode


@pytest.mark.parametrize(
    ("device", "cuda", "backend"),
    [
        ("cpu", False, None),
        ("cpu", True, None),  # a CPU trainer on a GPU node: the world's own (gloo for its tensors)
        ("auto", False, None),
        ("auto", True, CUDA_TRAIN_BACKEND),
        ("cuda", True, CUDA_TRAIN_BACKEND),
    ],
)
def test_the_trainers_group_backend_follows_their_device(device, cuda, backend):
    assert train_group_backend(device, cuda) == backend


def test_the_cuda_backend_maps_both_kinds_of_tensor():
    # The step's scalars and DCP's plans are CPU tensors; FSDP2's collectives CUDA ones.
    pairs = dict(part.split(":") for part in CUDA_TRAIN_BACKEND.split(","))
    assert pairs == {"cpu": "gloo", "cuda": "nccl"}


def test_gpu_slots_go_to_model_ranks_first_then_reward_ranks():
    roles = ["controller", "generator", "reward", "trainer", "trainer", "reward"]
    assert [node_slot(roles, i) for i in range(1, 6)] == [0, 3, 1, 2, 4]


def _reports(roles, gpus, hosts=None):
    hosts = hosts or ["n0"] * len(roles)
    return [RankReport(h, r, g if r == "trainer" else None) for h, r, g in zip(hosts, roles, gpus)]


ONE_TRAINER = ["controller", "generator", "reward", "trainer"]
TWO_TRAINERS = ["controller", "generator", "reward", "trainer", "trainer"]


def test_cpu_trainers_need_no_gpu():
    assert device_problem("cpu", _reports(TWO_TRAINERS, [0] * 5)) is None


def test_cuda_on_a_trainer_that_sees_no_gpu_is_named():
    message = device_problem("cuda", _reports(ONE_TRAINER, [None, None, None, 0]))
    assert message.startswith("world.trainer.device is cuda, but trainer rank 3 (on n0) sees no GPU")


def test_one_trainer_may_share_the_gpu_with_a_generator():
    assert device_problem("cuda", _reports(ONE_TRAINER, [None, None, None, 1])) is None


def test_two_trainers_on_one_gpu_are_refused():
    message = device_problem("cuda", _reports(TWO_TRAINERS, [None] * 3 + [1, 1]))
    assert "trainer ranks 3 and 4 both take GPU 0 of n0" in message and "world.trainer.device" in message


def test_two_trainers_with_a_gpu_each_pass():
    # generator slot 0, trainers slots 1 and 2: GPUs 1 and 2 of 3
    assert device_problem("cuda", _reports(TWO_TRAINERS, [None] * 3 + [3, 3])) is None
    # slots 1, 2 over 2 GPUs: 1 and 0, apart (the generator shares GPU 0 with one of them)
    assert device_problem("auto", _reports(TWO_TRAINERS, [None] * 3 + [2, 2])) is None


def test_trainers_on_two_nodes_count_slots_per_node():
    hosts = ["n0", "n0", "n0", "n0", "n1"]
    assert device_problem("cuda", _reports(TWO_TRAINERS, [None] * 3 + [1, 1], hosts)) is None


def test_auto_with_a_gpu_on_some_trainers_only_is_refused():
    hosts = ["n0", "n0", "n0", "n0", "n1"]
    message = device_problem("auto", _reports(TWO_TRAINERS, [None] * 3 + [1, 0], hosts))
    assert message.startswith("world.trainer.device is auto: trainer ranks [3] see a GPU and [4] do not")


def test_auto_without_any_gpu_trains_on_the_cpu():
    assert device_problem("auto", _reports(TWO_TRAINERS, [None] * 3 + [0, 0])) is None


def test_a_rank_asks_torch_only_as_a_trainer_that_may_take_a_gpu(base_config, monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: calls.append("asked") or True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    cfg = config.parse(base_config)
    assert rank_report(cfg, 3, "n0") == RankReport("n0", "trainer", None) and not calls
    base_config["world"]["trainer"] = {"ranks": 1, "device": "auto"}
    cfg = config.parse(base_config)
    assert rank_report(cfg, 0, "n0") == RankReport("n0", "controller", None) and not calls
    assert rank_report(cfg, 3, "n0") == RankReport("n0", "trainer", 4) and calls
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rank_report(cfg, 3, "n0").gpus == 0
