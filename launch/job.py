"""Run this rank: its collective set-up, its actor built, its actor's loop until it stops.

The order is fixed and the same on every rank: steps 1-3, the collective set-up
(``launch/distributed.py``: the role table, the mailbox, torch.distributed over the ranks that
hold a model), then steps 4-6, the actor built (``launch/builders.py``: the policy and engines,
the weight transport, the actor).

Every rank reaches each collective, in this order, whatever its role; one that gets there
early sleeps in ``wait_for_all`` rather than spinning in the collective (``runtime.backoff``:
an idle rank polling at full speed takes a core from a rank that is still importing or
loading a model). Beside its loop each rank runs a liveness thread (``runtime.liveness``).
"""

from __future__ import annotations

import os
import random
import sys
import time

import numpy as np
from mpi4py import MPI

from launch.builders import Prepared, build_actor
from launch.config import RoleMap
from launch.distributed import MODEL_ROLES, Distributed, setup_distributed
from runtime import PREEMPTION, abort_on_error
from runtime.backoff import wait_for_all
from runtime.failure import report_and_abort
from runtime.liveness import ControllerBeat, Heartbeat, SelfWatch, beat_interval


def _controller_rank(roles: list[str]) -> int:
    return roles.index("controller")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")  # the model ranks imported it; the others have no torch to seed
    if torch is not None:
        torch.manual_seed(seed)


def run_rank(
    cfg: RoleMap, config_path: str, prepared: Prepared | None = None, resume=None, startup: list | None = None
) -> str | None:
    """``prepared``: what rank 0 prepared for the controller before anything else (None: the
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
        _limit_torch_threads(role)
        wait_for_all(world)  # asleep while the slower ranks finish importing (runtime/backoff.py)
        dist = setup_distributed(world, roles, cfg.routes().train_role, cfg.world.trainer.device)
        phases.append(("start.distributed", t, t := time.time()))
        built = []  # the actor, once built
        heartbeat = _start_heartbeat(cfg, dist, roles, built)  # from now on, while it loads its model too
        _seed(cfg, dist, resume)
        actor = build_actor(cfg, dist, prepared, resume)  # the model, the weight transport, the engine
        built.append(actor)
        phases.append(("start.build", t, time.time()))
        _run_actor(cfg, dist, actor, heartbeat, phases)
    # Every rank returns here; MPI is finalized at exit (launch/fast_exit.py).
    return actor.stop_reason


def _limit_torch_threads(role: str) -> None:
    if role in MODEL_ROLES:
        import torch  # already imported (launch/main.py)

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


def _start_heartbeat(cfg: RoleMap, dist: Distributed, roles: list[str], built: list):
    """This rank's liveness thread: the controller's beat, which the others watch, or theirs,
    which watches the controller's. ``built`` holds the actor once there is one."""
    world = MPI.COMM_WORLD
    role = dist.role_table.role
    interval = beat_interval(cfg.run.liveness_timeout_s)
    if role == "controller":  # what the others' heartbeat threads watch
        others = [r for r in range(world.Get_size()) if r != world.Get_rank()]
        heartbeat = ControllerBeat(dist.liveness_comm, others, interval)
    else:

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
    heartbeat.start()
    return heartbeat


def _seed(cfg: RoleMap, dist: Distributed, resume) -> None:
    seed_everything(cfg.run.seed + 1000 * dist.role_table.rank)
    if resume is not None:
        from roles.checkpoint.rng import load_rng

        load_rng(resume.path, dist.role_table.rank)  # a rank the checkpoint did not have keeps its seed


def _run_actor(cfg: RoleMap, dist: Distributed, actor, heartbeat, phases: list) -> None:
    """The actor's loop, its timeline on disk as it goes, then its liveness thread stopped."""
    role = dist.role_table.role
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
