"""A ``TrainerActor`` for the trainer's unit and parity tests (no mailbox traffic, no weight
sender), built from a role map with the test's changes, and groups of random responses to train on."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np


def make_trainer(
    base_config,
    model,
    *,
    reference=None,
    rank=0,
    dp_group=None,
    replicas=False,
    sender=None,
    sections=None,
    **algorithm,
):
    """A trainer of ``model`` under ``base_config`` with ``algorithm`` set and the other
    ``sections`` ({"rollout": {...}, "world": {...}}) merged in; ``dp_group``: its trainers';
    ``replicas``: full copies averaging their gradients (the colocated layout), not FSDP2 shards."""
    from launch import config
    from roles.trainer import TrainerActor

    raw = copy.deepcopy(base_config)
    for name, values in (sections or {}).items():
        raw[name] = {**raw.get(name, {}), **values}
    raw["algorithm"].update(algorithm)
    cfg = config.parse(raw)
    table = SimpleNamespace(rank=rank, role="trainer", index=0, size=lambda role: 0)
    return TrainerActor(
        SimpleNamespace(role_table=table),
        cfg.algorithm,
        rollout=cfg.rollout,
        schedule=cfg.schedule(),
        routes=cfg.routes(),
        policy=SimpleNamespace(model=model, local_params=lambda: [], reference=reference),
        sender=sender,
        dp_group=dp_group,
        allreduce_grads=replicas,
    )


def random_group(rng, index: int, lengths, rewards, vocab: int, version: int = 0):
    """Group ``index`` of step 0: a 4-token prompt and responses of ``lengths`` drawn from
    ``rng`` over ids 3 .. vocab - 1, with random behaviour log-probs, scored ``rewards``."""
    from roles.protocol import Rollout

    return Rollout(
        example_id=index,
        group_id=index,
        step=0,
        prompt_ids=rng.integers(3, vocab, 4).astype(np.int32),
        response_ids=[rng.integers(3, vocab, n).astype(np.int32) for n in lengths],
        logprobs=[(-rng.random(n) * 2).astype(np.float32) for n in lengths],
        finish_reasons=["stop"] * len(lengths),
        policy_version=version,
        rewards=list(rewards),
    )
