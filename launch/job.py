"""Build and run the actor of this rank.

The order is fixed and the same on every rank (``setup_distributed`` does its collective part):

1. the role table (splits COMM_WORLD into one communicator per role),
2. the mailbox (duplicates COMM_WORLD for its messages),
3. torch.distributed over the ranks that hold a model (trainers, generators, colocated ranks)
   and the training ranks' group; the controller and reward ranks neither join nor import
   torch, which saves each of them seconds of CPU at start-up (docs/log.md),
4. the policy, loaded and sharded on the training ranks (collective over their group), and
   the generators' engines, loaded meanwhile,
5. the weight transport between trainers and generators (collective over the model ranks),
6. this rank's actor, from its own sections of the role map and the routes.

Every rank reaches each collective, in this order, whatever its role; one that gets there
early sleeps in ``wait_for_all`` rather than spinning in the collective (``runtime.backoff``:
an idle rank polling at full speed takes a core from a rank that is still importing or
loading a model). Each actor receives only the sections it reads, plus ``Routes``
(who its reward ranks, trainers and generators are) and ``Schedule`` (the version rules).
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from launch.config import RoleMap
from runtime import PREEMPTION, Mailbox, RoleTable, abort_on_error
from runtime.backoff import wait_for_all
from runtime.failure import report_and_abort
from runtime.liveness import ControllerBeat, Heartbeat, LivenessMonitor, SelfWatch, beat_interval


@dataclass
class Distributed:
    """What every rank holds once the collective set-up is done."""

    role_table: RoleTable
    mailbox: Mailbox
    train_group: object  # torch process group of the training ranks (None if just one)
    liveness_comm: MPI.Comm  # heartbeats to the controller (runtime.liveness), apart from the mailbox
    model_comm: MPI.Comm | None = None  # the ranks that hold a model (the torch world); None elsewhere


# The roles whose ranks hold a model: they alone import torch and join torch.distributed.
MODEL_ROLES = ("trainer", "generator", "colocated")


@dataclass
class Preflight:
    """What rank 0, the controller's rank, prepared before any rank did any work (launch/main.py).
    The controller holds all of it; the other ranks are sent the tokenizer's class and EOS."""

    data: object = None  # launch.data.PreparedData: the prompts
    backends: list = field(default_factory=list)  # the started dashboards (roles.observe.backends)
    tokenizer_class: str | None = None  # roles.tokenizer.class_ref_of the controller's tokenizer
    # Its EOS, where generation stops besides the model's own (the generators need not load
    # the tokenizer again for it).
    stop_ids: tuple[int, ...] = ()


def setup_distributed(comm: MPI.Comm, roles_by_rank: list[str], train_role: str) -> Distributed:
    """Steps 1-3 above. Collective over ``comm``: every rank calls it, in this order."""
    table = RoleTable(comm, roles_by_rank)
    mailbox = Mailbox(table)
    liveness_comm = comm.Dup()
    holds_model = table.role in MODEL_ROLES
    # Ranks of model_comm follow those of comm (key), so torch rank i is the i-th model rank.
    model_comm = comm.Split(0 if holds_model else MPI.UNDEFINED, key=comm.Get_rank())
    if not holds_model:
        return Distributed(table, mailbox, None, liveness_comm)
    from transports.torch_dist import init_torch_distributed, new_group

    init_torch_distributed(model_comm)
    model_ranks = [r for r, role in enumerate(roles_by_rank) if role in MODEL_ROLES]
    train_ranks = [model_ranks.index(r) for r in table.ranks(train_role)]
    # new_group is collective over the whole torch world, members or not.
    group = new_group(train_ranks) if len(train_ranks) > 1 else None
    return Distributed(table, mailbox, group if table.role == train_role else None, liveness_comm, model_comm)


def _controller_rank(roles: list[str]) -> int:
    return roles.index("controller")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")  # the model ranks imported it; the others have no torch to seed
    if torch is not None:
        torch.manual_seed(seed)


def run_rank(
    cfg: RoleMap, config_path: str, preflight: Preflight | None = None, resume=None, startup: list | None = None
) -> str | None:
    """``preflight``: what rank 0 prepared for the controller before anything else (None: the
    controller prepares it itself);
    ``resume``: the checkpoint to continue from (``launch.resume``), or None;
    ``startup``: (name, start, end) of the start-up phases before this call, for the timeline.
    Returns why the actor stopped ("finished", or ``runtime.PREEMPTED``)."""
    world = MPI.COMM_WORLD
    roles = cfg.world.roles_by_rank()
    role = roles[world.Get_rank()]
    PREEMPTION.install()  # SIGTERM/SIGUSR1/SIGINT: checkpoint after the step in progress
    with abort_on_error(role):
        phases = list(startup or [])
        t = time.time()
        if role in MODEL_ROLES:
            import torch  # already imported (launch/main.py)

            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        wait_for_all(world)  # asleep while the slower ranks finish importing (runtime/backoff.py)
        dist = setup_distributed(world, roles, cfg.routes().train_role)
        phases.append(("start.distributed", t, t := time.time()))
        interval = beat_interval(cfg.run.liveness_timeout_s)
        built = []  # the actor, once built
        if role != "controller":  # from now on, while it loads its model too

            def on_silent_controller(error: TimeoutError) -> None:
                # Told to stop, a rank needs the controller no more (a trainer may still be
                # writing the final policy when the controller has left its loop).
                if not (built and not built[0].running):
                    report_and_abort(role, error)

            heartbeat = Heartbeat(
                dist.liveness_comm,
                _controller_rank(roles),
                interval,
                controller_timeout_s=cfg.run.liveness_timeout_s,  # a stopped controller, named
                on_silent=on_silent_controller,
            )
        else:  # what the others' heartbeat threads watch
            others = [r for r in range(world.Get_size()) if r != world.Get_rank()]
            heartbeat = ControllerBeat(dist.liveness_comm, others, interval)
        heartbeat.start()
        seed_everything(cfg.run.seed + 1000 * dist.role_table.rank)
        if resume is not None:
            from roles.checkpoint import load_rng

            load_rng(resume.path, dist.role_table.rank)  # a rank the checkpoint did not have keeps its seed
        actor = build_actor(cfg, dist, preflight, resume)  # the model, the weight transport, the engine
        built.append(actor)
        phases.append(("start.build", t, time.time()))
        for phase in phases:
            actor.spans.add(*phase)
        actor.spans.start_file(cfg.run.out)  # from now on on disk as it goes: a killed run can be traced
        # The controller watches the others' loops; this thread watches its own.
        self_watch = None
        if role == "controller":
            self_watch = SelfWatch(cfg.run.stall_timeout_s, lambda e: report_and_abort(role, e)).start()
        t0 = time.perf_counter()
        actor.run()
        if self_watch is not None:
            self_watch.stop()
        actor.spans.write(cfg.run.out)
        heartbeat.stop()
        if dist.role_table.rank == 0:
            print(f"mpirl: {role} finished ({actor.stop_reason}) in {time.perf_counter() - t0:.1f} s", flush=True)
    # Every rank returns here; MPI is finalized at exit (launch/fast_exit.py).
    return actor.stop_reason


def build_actor(cfg: RoleMap, dist: Distributed, preflight: Preflight | None = None, resume=None):
    """Steps 4-6 above."""
    table = dist.role_table
    routes = cfg.routes()
    schedule = cfg.schedule(resumed_at=resume.steps_done if resume is not None else 0)
    policy = engine = None
    if table.role == routes.train_role:
        from roles.policy import load_policy

        policy = load_policy(
            cfg.model,
            dist.train_group,
            shard=table.role == "trainer" and dist.train_group is not None,
            reference=cfg.algorithm.kl_coef > 0,
        )
    elif table.role == "generator":
        # Before the exchange below: it loads while the trainers load the policy.
        engine = _engine(cfg, dist, preflight=preflight)
    # The transport is collective over the model ranks; colocated ranks take part with neither.
    transport = None
    if dist.model_comm is not None:
        from roles.weights import build_weight_transport

        wait_for_all(dist.model_comm)  # whoever loaded first sleeps while the others load
        transport = build_weight_transport(
            cfg.weights,
            dist.model_comm,
            shards=policy.local_params() if table.role == "trainer" else None,
            need=_generator_need(cfg) if table.role == "generator" else None,
            synchronous=cfg.run.max_staleness == 0,
        )
    build = _BUILDERS.get(table.role)
    if build is None:
        raise ValueError(f"unknown role {table.role!r}")
    return build(cfg, dist, routes, schedule, policy, transport, engine, preflight, resume)


def _generator_need(cfg: RoleMap):
    from transports.weights import Need

    # Full weights (a vLLM engine splits them over its own devices itself), in the generator's
    # dtype: a narrower one is cast by the trainers as they send.
    dtype = cfg.world.generator.dtype
    return Need(dtype=None if dtype in (None, cfg.model.dtype) else dtype)


def _controller(cfg, dist, routes, schedule, policy, transport, engine, preflight, resume):
    from roles.controller import ControllerActor
    from roles.observe.progress import Progress

    if preflight is None or preflight.data is None:
        preflight = prepare_controller(cfg, resume)
    progress = None
    if cfg.run.progress:
        progress = Progress(cfg.run.steps, schedule.resumed_at, every_s=cfg.logging.progress_every_s)
    return ControllerActor(
        dist.mailbox,
        cfg.run,
        rollout=cfg.rollout,
        evaluation=cfg.eval,
        routes=routes,
        schedule=schedule,
        prompts=preflight.data.train_prompts,
        prompts_digest=preflight.data.train_fingerprint,
        eval_prompts=preflight.data.eval_prompts,
        data_stats=preflight.data.stats,
        batch_prompts=cfg.world.generator.batch_prompts,
        progress=progress,
        backends=preflight.backends,
        liveness=LivenessMonitor(
            dist.liveness_comm,
            {r: role for r, role in enumerate(cfg.world.roles_by_rank()) if role != "controller"},
            cfg.run.liveness_timeout_s,
            cfg.run.stall_timeout_s,
        ),
        checkpoints=cfg.checkpoints(),  # every_steps 0: only on a stop signal
        resume=resume,
    )


def prepare_controller(cfg: RoleMap, resume=None) -> Preflight:
    """The controller's inputs: the prompts, and its dashboards started (a failure to start one
    is a ``BackendError``). On rank 0, before any other rank does any work."""
    from pathlib import Path

    from launch.data import prepare_data
    from launch.run_folder import check_run_folder
    from roles.observe.backends import open_backends

    check_run_folder(cfg)
    data = prepare_data(cfg)
    if resume is not None:
        from launch.resume import check_data

        check_data(cfg, resume, data.train_prompts, data.train_fingerprint)  # rewritten since: exit 2
    resumed_at = resume.steps_done if resume is not None else 0
    backends = open_backends(cfg.logging, Path(cfg.run.out), cfg.model_dump(mode="json"), resumed_at)
    return Preflight(
        data=data,
        backends=backends,
        tokenizer_class=data.tokenizer_class,
        stop_ids=() if data.eos_id is None else (data.eos_id,),
    )


def _engine(cfg, dist, module=None, preflight: Preflight | None = None):
    from roles.engines import make_engine

    return make_engine(
        cfg.world.generator,
        cfg.model,
        seed=cfg.run.seed + dist.role_table.index,
        module=module,
        stop_ids=preflight.stop_ids if preflight else None,
        max_seqs=cfg.generator_batch_prompts() * cfg.rollout.samples_per_prompt,
    )


def _generator(cfg, dist, routes, schedule, policy, transport, engine, preflight, resume):
    from roles.generator import GeneratorActor

    # After a resume the engine's weights are placeholders, one version short of the trainers'
    # first push, which no batch may do without (Schedule.min_version).
    version = max(schedule.resumed_at - 1, 0)
    return GeneratorActor(
        dist.mailbox,
        cfg.rollout,
        schedule=schedule,
        routes=routes,
        engine=engine,
        receiver=transport,
        version=version,
    )


def _reward(cfg, dist, routes, schedule, policy, transport, engine, preflight, resume):
    from roles.reward import RewardActor
    from roles.rewards.sandbox import RewardSandbox
    from roles.tasks import build_task
    from roles.tokenizer import load_tokenizer

    # The controller's tokenizer class, loaded directly: the auto classes would import torch.
    tokenizer, _ = load_tokenizer(cfg.model.path, preflight.tokenizer_class if preflight else None)

    # The same task as the controller's (same config, same seed): answers are found by id.
    task = build_task(cfg.task, seed=cfg.run.seed)
    scorer = RewardSandbox(cfg.reward.component_specs(), cfg.reward.timeout_s, workers=cfg.reward.workers)
    return RewardActor(
        dist.mailbox,
        routes,
        tokenizer,
        task,
        scorer,
        prompts_per_step=cfg.rollout.prompts_per_step,
        shown_per_step=cfg.logging.samples_per_step,
    )


def _training_args(cfg, dist, routes, schedule, policy, resume) -> dict:
    """What trainer and colocated ranks share: their sections, the policy, its group, its save."""
    save_dir, is_leader = os.path.join(cfg.run.out, "policy"), dist.role_table.index == 0
    return dict(
        rollout=cfg.rollout,
        schedule=schedule,
        routes=routes,
        policy=policy,
        dp_group=dist.train_group,
        on_finish=lambda actor: policy.save(save_dir, is_leader=is_leader),
        checkpoints=cfg.checkpoints(),  # every_steps 0: only on a stop signal
        resume=resume,
    )


def _trainer(cfg, dist, routes, schedule, policy, transport, engine, preflight, resume):
    from roles.trainer import TrainerActor

    return TrainerActor(
        dist.mailbox, cfg.algorithm, sender=transport, **_training_args(cfg, dist, routes, schedule, policy, resume)
    )


def _colocated(cfg, dist, routes, schedule, policy, transport, engine, preflight, resume):
    from roles.colocated import ColocatedActor, LocalEngineSync

    # The torch engine samples with the trained module itself, unless it samples in a dtype or
    # quantization of its own: then, like vLLM, it holds a copy that each step's push reloads
    # (cast, or requantized, as it is copied).
    g = cfg.world.generator
    shares = g.engine == "torch" and g.dtype in (None, cfg.model.dtype) and g.quantization is None
    engine = _engine(cfg, dist, module=policy.model if shares else None, preflight=preflight)
    sync = LocalEngineSync(engine, shares_module=shares)
    return ColocatedActor(
        dist.mailbox,
        cfg.algorithm,
        engine=engine,
        weight_sync=sync,
        **_training_args(cfg, dist, routes, schedule, policy, resume),
    )


_BUILDERS = {
    "controller": _controller,
    "generator": _generator,
    "reward": _reward,
    "trainer": _trainer,
    "colocated": _colocated,
}
