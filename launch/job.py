"""Build and run the actor of this rank: distributed setup in one place.

Order matters and is the same on every rank: mesh (splits COMM_WORLD), mailbox (dups it),
torch.distributed (collective), the weight group (collective), then each rank builds its
own role. Collectives come before any role-specific work so no rank can wait on one that
is still loading a model.
"""

from __future__ import annotations

import os
import random
import time

import numpy as np
import torch
from mpi4py import MPI

from launch.config import RoleMap
from runtime import Mailbox, Mesh, abort_on_error


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def run_rank(cfg: RoleMap, config_path: str, data=None) -> None:
    """``data``: the controller's ``PreparedData`` (rank 0 prepared it before anything else)."""
    world = MPI.COMM_WORLD
    roles = cfg.world.roles_by_rank()
    role = roles[world.Get_rank()]
    with abort_on_error(role):
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        mesh = Mesh(world, roles)
        mailbox = Mailbox(mesh)
        seed_everything(cfg.run.seed + 1000 * mesh.rank)
        actor = build_actor(cfg, mesh, mailbox, data)
        t0 = time.perf_counter()
        actor.run()
        actor.spans.write(cfg.run.out)
        if mesh.rank == 0:
            print(f"mpirl: {role} finished ({actor.stop_reason}) in {time.perf_counter() - t0:.1f} s", flush=True)
    # Every rank returns here; mpi4py finalizes MPI at interpreter exit.


def build_actor(cfg: RoleMap, mesh: Mesh, mailbox: Mailbox, data=None):
    from roles.weights import WeightPath

    # The weight path spans trainers and generators; it is collective, so every rank
    # (controller and reward ranks too) takes part in building it.
    weights = WeightPath.build(cfg, mesh)

    if mesh.role == "controller":
        from launch.data import prepare_data
        from roles.controller import ControllerActor

        data = data if data is not None else prepare_data(cfg)
        progress = None
        if cfg.run.progress:
            from tqdm import tqdm

            progress = tqdm(total=cfg.run.steps, desc="mpirl steps", unit="step", dynamic_ncols=True)
        return ControllerActor(mailbox, cfg, data.train_prompts, progress=progress,
                               eval_prompts=data.eval_prompts, data_stats=data.stats)

    if mesh.role == "generator":
        from roles.engines import make_engine
        from roles.generator import GeneratorActor

        engine = make_engine(cfg, seed=cfg.run.seed + mesh.index)
        return GeneratorActor(mailbox, cfg, engine, weights.transport)

    if mesh.role == "reward":
        from transformers import AutoTokenizer

        from roles.reward import RewardActor
        from roles.rewards.combine import ComponentSpec
        from roles.rewards.sandbox import RewardSandbox
        from roles.tasks import build_task

        # The same task as the controller's (same config, same seed): answers are found by id.
        task = build_task(cfg.task, seed=cfg.run.seed)
        specs = [ComponentSpec(label=c.logged_as, name=c.name, weight=c.weight, options=c.options)
                 for c in cfg.reward.components]
        scorer = RewardSandbox(specs, cfg.reward.timeout_s, workers=cfg.reward.workers)
        return RewardActor(mailbox, cfg, AutoTokenizer.from_pretrained(cfg.model.path), task, scorer)

    policy = weights.policy
    save = lambda actor: policy.save(os.path.join(cfg.run.out, "policy"), is_leader=mesh.index == 0)  # noqa: E731

    if mesh.role == "trainer":
        from roles.trainer import TrainerActor

        return TrainerActor(mailbox, cfg, policy, weights.transport, dp_group=weights.trainer_group, on_finish=save)

    if mesh.role == "colocated":
        from roles.colocated import ColocatedActor, LocalEngineSync
        from roles.engines import make_engine

        # The torch engine samples with the trained module itself; vLLM needs a reload.
        engine = make_engine(cfg, seed=cfg.run.seed + mesh.index, model=policy.model)
        sync = LocalEngineSync(engine, shares_module=cfg.world.generator.engine == "torch")
        return ColocatedActor(mailbox, cfg, policy, engine, sync, dp_group=weights.trainer_group, on_finish=save)

    raise ValueError(f"unknown role {mesh.role!r}")
