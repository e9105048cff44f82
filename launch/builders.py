"""This rank's actor, built from its own sections of the role map (steps 4-6 of ``launch/job.py``):

4. the policy, loaded and sharded on the training ranks (collective over their group), and
   the generators' engines, loaded meanwhile,
5. the weight transport between trainers and generators (collective over the model ranks),
6. this rank's actor: one builder per role, each given a :class:`BuildContext`.

Each actor receives only the sections it reads, plus ``Routes`` (who its reward ranks, trainers
and generators are) and ``Schedule`` (the version rules). Also here: what rank 0 prepares for the
controller before any rank does any work (:func:`prepare_controller`). Knows nothing of how the
rank runs its actor (``launch/job.py``) nor of the collective set-up before it
(``launch/distributed.py``), whose result it is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launch.config import RoleMap
from launch.distributed import Distributed
from runtime.backoff import wait_for_all
from runtime.liveness import LivenessMonitor

if TYPE_CHECKING:
    from roles.protocol import Routes, Schedule  # brings torch (the codec): not at run time here


@dataclass
class Prepared:
    """What rank 0, the controller's rank, prepared before any rank did any work (launch/main.py).
    The controller holds all of it; the other ranks are sent the tokenizer's class and EOS."""

    data: object = None  # launch.preflight.data.PreparedData: the prompts
    backends: list = field(default_factory=list)  # the started dashboards (roles.observe.backends)
    tokenizer_class: str | None = None  # roles.models.tokenizer.class_ref_of the controller's tokenizer
    # Its EOS, where generation stops besides the model's own (the generators need not load
    # the tokenizer again for it).
    stop_ids: tuple[int, ...] = ()


@dataclass
class BuildContext:
    """What a role's builder takes: the role map, this rank's collective set-up, what was built
    before its actor (steps 4-5 above) and what rank 0 prepared."""

    cfg: RoleMap
    dist: Distributed
    routes: Routes
    schedule: Schedule
    policy: object = None  # the trained policy (trainer and colocated ranks)
    transport: object = None  # the weight transport (the ranks that hold a model)
    engine: object = None  # a generator's engine, loaded before the transport
    prepared: Prepared | None = None
    resume: object = None  # the checkpoint this run continues from (launch.resume)


def build_actor(cfg: RoleMap, dist: Distributed, prepared: Prepared | None = None, resume=None):
    """Steps 4-6 above."""
    table = dist.role_table
    routes = cfg.routes()
    schedule = cfg.schedule(resumed_at=resume.steps_done if resume is not None else 0)
    policy = engine = None
    if table.role == routes.train_role:
        from roles.policy.model import load_policy

        device = _trainer_device(cfg, dist)
        policy = load_policy(
            cfg.model,
            dist.train_group,
            shard=table.role == "trainer" and dist.train_group is not None,
            reference=cfg.algorithm.needs_reference,
            device=device,
        )
        if device is not None:
            policy.send_device = _send_device(cfg, device, announce=table.index == 0)
    elif table.role == "generator":
        # Before the exchange below: it loads while the trainers load the policy.
        engine = _engine(cfg, dist, prepared=prepared)
    # The transport is collective over the model ranks; colocated ranks take part with neither.
    transport = None
    if dist.model_comm is not None:
        from roles.policy.weight_transport import build_weight_transport

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
    context = BuildContext(
        cfg, dist, routes, schedule, policy=policy, transport=transport, engine=engine, prepared=prepared, resume=resume
    )
    return build(context)


def _trainer_device(cfg: RoleMap, dist: Distributed):
    """A trainer rank's device (``world.trainer.device``); None on colocated ranks (the CPU)."""
    if dist.role_table.role != "trainer":
        return None
    from roles.policy.placement import trainer_device

    return trainer_device(cfg.world.trainer.device, dist.gpu_slot)


def _send_device(cfg: RoleMap, device, announce: bool) -> str:
    """Where the trainers' weight sync sends from (``roles.policy.weight_transport.send_device``)."""
    from roles.policy.weight_transport import send_device

    out = send_device(cfg.weights.transport, device.type)
    if announce and out != device.type:
        print(f"mpirl: weights: trainers on {device.type} send through {out} memory (one copy a push)", flush=True)
    return out


def _generator_need(cfg: RoleMap):
    from transports.weights import Need

    # Full weights (a vLLM engine splits them over its own devices itself), in the generator's
    # dtype: a narrower one is cast by the trainers as they send.
    dtype = cfg.world.generator.dtype
    return Need(dtype=None if dtype in (None, cfg.model.dtype) else dtype)


def _controller(ctx: BuildContext):
    from roles.controller import ControllerActor, ControllerData, Observers
    from roles.observe.progress import Progress

    cfg, prepared = ctx.cfg, ctx.prepared
    if prepared is None or prepared.data is None:
        prepared = prepare_controller(cfg, ctx.resume)
    progress = None
    if cfg.run.progress:
        progress = Progress(cfg.run.steps, ctx.schedule.resumed_at, every_s=cfg.logging.progress_every_s)
    return ControllerActor(
        ctx.dist.mailbox,
        cfg.run,
        rollout=cfg.rollout,
        evaluation=cfg.eval,
        routes=ctx.routes,
        schedule=ctx.schedule,
        data=ControllerData(
            train=prepared.data.train_prompts,
            eval=prepared.data.eval_prompts,
            stats=prepared.data.stats,
            digest=prepared.data.train_fingerprint,
        ),
        batch_prompts=cfg.world.generator.batch_prompts,
        observers=Observers(
            progress=progress,
            backends=prepared.backends,
            liveness=LivenessMonitor(
                ctx.dist.liveness_comm,
                {r: role for r, role in enumerate(cfg.world.roles_by_rank()) if role != "controller"},
                cfg.run.liveness_timeout_s,
                cfg.run.stall_timeout_s,
            ),
        ),
        checkpoints=cfg.checkpoints(),  # every_steps 0: only on a stop signal
        resume=ctx.resume,
    )


def prepare_controller(cfg: RoleMap, resume=None) -> Prepared:
    """The controller's inputs: the prompts, and its dashboards started (a failure to start one
    is a ``BackendError``). On rank 0, before any other rank does any work."""
    from pathlib import Path

    from launch.preflight.data import prepare_data
    from launch.run_folder import check_run_folder
    from roles.observe.backends import open_backends

    check_run_folder(cfg)
    data = prepare_data(cfg)
    if resume is not None:
        from launch.resume import check_data

        check_data(cfg, resume, data.train_prompts, data.train_fingerprint)  # rewritten since: exit 2
    resumed_at = resume.steps_done if resume is not None else 0
    backends = open_backends(cfg.logging, Path(cfg.run.out), cfg.model_dump(mode="json"), resumed_at)
    return Prepared(
        data=data,
        backends=backends,
        tokenizer_class=data.tokenizer_class,
        stop_ids=() if data.eos_id is None else (data.eos_id,),
    )


def _engine(cfg, dist, module=None, prepared: Prepared | None = None):
    from roles.engines import make_engine

    return make_engine(
        cfg.world.generator,
        cfg.model,
        seed=cfg.run.seed + dist.role_table.index,
        module=module,
        stop_ids=prepared.stop_ids if prepared else None,
        max_seqs=cfg.generator_batch_prompts() * cfg.rollout.samples_per_prompt,
    )


def _generator(ctx: BuildContext):
    from roles.generator import GeneratorActor

    # After a resume the engine's weights are placeholders, one version short of the trainers'
    # first push, which no batch may do without (Schedule.min_version).
    version = max(ctx.schedule.resumed_at - 1, 0)
    return GeneratorActor(
        ctx.dist.mailbox,
        ctx.cfg.rollout,
        schedule=ctx.schedule,
        routes=ctx.routes,
        engine=ctx.engine,
        receiver=ctx.transport,
        version=version,
        episodes=_episodes(ctx) if ctx.cfg.environment is not None else None,
    )


def _episodes(ctx: BuildContext):
    """The generator's episode runner: the task (for each group's example), the tokenizer (for
    observations) and the environment's sandboxed workers."""
    from roles.episodes import build_runner
    from roles.models.tokenizer import load_tokenizer
    from roles.tasks import build_task

    cfg = ctx.cfg
    tokenizer, _ = load_tokenizer(cfg.model.path, ctx.prepared.tokenizer_class if ctx.prepared else None)
    task = build_task(cfg.task, seed=cfg.run.seed)
    stop_ids = ctx.prepared.stop_ids if ctx.prepared else ()
    return build_runner(cfg, tokenizer, task, stop_ids, seed=cfg.run.seed + ctx.dist.role_table.index)


def _reward(ctx: BuildContext):
    from roles.checkpoint.reward_state import read_reward_state
    from roles.models.tokenizer import load_tokenizer
    from roles.reward import RewardActor
    from roles.rewards.learned.base import ScorerContext
    from roles.rewards.scoring import build_scoring
    from roles.tasks import build_task

    cfg = ctx.cfg
    # The controller's tokenizer class, loaded directly: the auto classes would import torch.
    tokenizer, _ = load_tokenizer(cfg.model.path, ctx.prepared.tokenizer_class if ctx.prepared else None)

    # The same task as the controller's (same config, same seed): answers are found by id.
    task = build_task(cfg.task, seed=cfg.run.seed)
    table = ctx.dist.role_table
    group = None
    if table.size("reward") > 1 and any(spec.options.get("shard") for spec in cfg.reward.component_specs()):
        from roles.rewards.learned.sharded import reward_ranks_group

        group = reward_ranks_group(table.role_comm)  # one reward model shared by the reward ranks
    context = ScorerContext(
        task_config=task.config,
        rank_index=table.index,
        gpu_slot=ctx.dist.gpu_slot,
        ranks=table.size("reward"),
        group=group,
        seed=cfg.run.seed,
    )
    scorer = build_scoring(cfg.reward, context)
    if ctx.resume is not None:
        scorer.load_state_dict(read_reward_state(ctx.resume.path, table.rank))
    return RewardActor(
        ctx.dist.mailbox,
        ctx.routes,
        tokenizer,
        task,
        scorer,
        prompts_per_step=cfg.rollout.prompts_per_step,
        shown_per_step=cfg.logging.samples_per_step,
        overlong=_overlong(cfg),
    )


def _overlong(cfg) -> tuple[int, int, float] | None:
    """(max_length, buffer, weight) of ``reward.overlong``, its length resolved (None: not set)."""
    from launch.combinations import overlong_max_length

    o = cfg.reward.overlong
    return None if o is None else (overlong_max_length(cfg), o.buffer, o.weight)


def _training_args(ctx: BuildContext) -> dict:
    """What trainer and colocated ranks share: their sections, the policy, its group, its save."""
    cfg, policy = ctx.cfg, ctx.policy
    save_dir, is_leader = os.path.join(cfg.run.out, "policy"), ctx.dist.role_table.index == 0
    return dict(
        rollout=cfg.rollout,
        schedule=ctx.schedule,
        routes=ctx.routes,
        policy=policy,
        dp_group=ctx.dist.train_group,
        on_finish=lambda actor: policy.save(save_dir, is_leader=is_leader),
        checkpoints=cfg.checkpoints(),  # every_steps 0: only on a stop signal
        resume=ctx.resume,
        warmup_steps=cfg.critic.warmup_steps if cfg.world.critic.ranks else 0,
    )


def _trainer(ctx: BuildContext):
    from roles.trainer import TrainerActor

    return TrainerActor(ctx.dist.mailbox, ctx.cfg.algorithm, sender=ctx.transport, **_training_args(ctx))


def _colocated(ctx: BuildContext):
    from roles.colocated import ColocatedActor, LocalEngineSync

    # The torch engine samples with the trained module itself, unless it samples in a dtype or
    # quantization of its own: then, like vLLM, it holds a copy that each step's push reloads
    # (cast, or requantized, as it is copied).
    g = ctx.cfg.world.generator
    shares = g.engine == "torch" and g.dtype in (None, ctx.cfg.model.dtype) and g.quantization is None
    engine = _engine(ctx.cfg, ctx.dist, module=ctx.policy.model if shares else None, prepared=ctx.prepared)
    sync = LocalEngineSync(engine, shares_module=shares)
    return ColocatedActor(
        ctx.dist.mailbox,
        ctx.cfg.algorithm,
        engine=engine,
        weight_sync=sync,
        **_training_args(ctx),
    )


def _critic(ctx: BuildContext):
    from roles.critic import CriticActor
    from roles.value.model import load_value_model
    from roles.value.training import ValueModel

    cfg, c, group = ctx.cfg, ctx.cfg.critic, ctx.dist.critic_group
    # On the device the trainers train on (the CPU), like the policy.
    model = load_value_model(c.path or cfg.model.path, c.dtype or cfg.model.dtype, group)
    value_model = ValueModel(
        model, group, lr=c.lr, weight_decay=c.weight_decay, grad_clip=c.grad_clip, micro_batch=c.micro_batch
    )
    kl_penalty = None
    if cfg.algorithm.kl_coef > 0:  # the per-token KL in the reward, against model.path's weights
        from roles.critic_reference import KLPenalty

        kl_penalty = KLPenalty(cfg.model, group, cfg.algorithm.kl_coef, cfg.rollout.temperature, c.micro_batch)
    return CriticActor(
        ctx.dist.mailbox,
        cfg.critic,
        cfg.algorithm,
        rollout=cfg.rollout,
        schedule=ctx.schedule,
        routes=ctx.routes,
        value_model=value_model,
        group=group,
        checkpoints=cfg.checkpoints(),
        resume=ctx.resume,
        kl_penalty=kl_penalty,
    )


_BUILDERS = {
    "controller": _controller,
    "generator": _generator,
    "reward": _reward,
    "trainer": _trainer,
    "colocated": _colocated,
    "critic": _critic,
}
