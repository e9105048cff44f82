"""The steps of the GPU trainer tests (tests/gpu: ``test_trainer_cuda.py``, and ``cuda_trainer_pair.py``
under mpirun on two GPUs): mpirl's own trainer (``roles.trainer.TrainerActor``) over a policy
that FSDP2 has sharded on CUDA devices, its collectives over the trainers' group with NCCL
beside gloo; a step, a checkpoint of its shards and random states, a second step, the checkpoint
loaded back and the second step taken again, and the shards' host copies for the weight sync.

Returns what the tests compare; asserts nothing itself (the pair's ranks report to rank 0)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import torch

from support.trainers import make_trainer, random_group


def base_config(folder: Path) -> dict:
    """tests/conftest.py's 4-rank role map over a model folder made in ``folder``."""
    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import save_char_tokenizer
    from support.model_folders import write_placeholder_weights

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    write_placeholder_weights(folder)
    save_char_tokenizer(folder, ALPHABET)
    return copy.deepcopy(
        {
            "world": {"controller": 1, "generator": 1, "reward": 1, "trainer": 1},
            "model": {"path": str(folder), "dtype": "float32"},
            "task": {"name": "arith"},
            "rollout": {"prompts_per_step": 4, "samples_per_prompt": 2, "max_new_tokens": 4},
            "algorithm": {"loss": "aipo", "rho": 4.0, "lr": 3.0e-5},
            "run": {"steps": 3, "max_staleness": 1, "seed": 0, "out": "runs/test"},
        }
    )


def _groups(seed: int, rank: int, count: int) -> list:
    rng = np.random.default_rng(seed * 100 + rank)
    return [random_group(rng, i, rng.integers(2, 7, 4), [1, 0, 0.5, 0], vocab=37) for i in range(count)]


def _local(t):
    from torch.distributed.tensor import DTensor

    return (t.to_local() if isinstance(t, DTensor) else t).detach().clone()


def _optimizer_state(optimizer) -> list[dict]:
    params = [p for g in optimizer.param_groups for p in g["params"]]
    return [{k: _local(v) for k, v in optimizer.state[p].items()} for p in params]


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b)
    )


def step_and_round_trip(config: dict, model, group, trainers: int, rank: int, ckpt: Path) -> dict:
    """The trainer's steps and checkpoint round trip above; figures and flags for the tests."""
    from roles.checkpoint.rng import read_rng, rng_file
    from roles.checkpoint.trainer_state import load_trainer_state
    from roles.policy.model import Policy
    from roles.policy.sharding import full_state, local_shards

    sections = {"world": {"trainer": trainers}}
    trainer = make_trainer(config, model, dp_group=group, rank=rank, sections=sections, lr=1e-2, micro_batch=3)
    start = full_state(model)
    first = trainer.train_on(_groups(0, rank, 4 // trainers))
    after_first = full_state(model)
    saved_optimizer = _optimizer_state(trainer.optimizer)
    trainer.version = 1
    trainer._save(ckpt)
    second = trainer.train_on(_groups(1, rank, 4 // trainers))
    after_second = full_state(model)
    load_trainer_state(ckpt, model, trainer.optimizer, group)
    restored = full_state(model)
    restored_optimizer = _optimizer_state(trainer.optimizer)
    again = trainer.train_on(_groups(1, rank, 4 // trainers))
    staged = Policy(model, "", sharded=group is not None, send_device="cpu").local_params()
    on_device = local_shards(model)
    return {
        "device": str(next(model.parameters()).device),
        "losses": [first["loss"], second["loss"], again["loss"]],
        "grad_norms": [first["grad_norm"], second["grad_norm"], again["grad_norm"]],
        "first_step_moved": any(not torch.equal(start[k], after_first[k]) for k in start),
        "second_step_moved": any(not torch.equal(after_first[k], after_second[k]) for k in start),
        "weights_restored": all(torch.equal(after_first[k], restored[k]) for k in start),
        "optimizer_restored": _same(saved_optimizer, restored_optimizer),
        "optimizer_moved_since": not _same(saved_optimizer, _optimizer_state(trainer.optimizer)),
        "step_retaken": max(abs(after_second[k] - v).max().item() for k, v in full_state(model).items()),
        "cuda_rng_saved": "cuda" in read_rng(rng_file(ckpt, rank)),
        "staged_on_cpu": all(s.tensor.device.type == "cpu" for s in staged),
        "staged_equal": all(torch.equal(s.tensor, d.tensor.cpu()) for s, d in zip(staged, on_device)),
        "shards_on_device": all(d.tensor.is_cuda for d in on_device),
    }
