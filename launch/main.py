"""One MPI job: validate the role map on every rank, assign roles, run each rank's actor.

Every rank parses and validates the file itself (they all read the same file, so they
all reach the same verdict without talking). On a bad file rank 0 prints the one message
and every rank exits with code 2, before any collective call could leave a peer waiting.
Then rank 0 prepares the data (``launch/preflight/data.py``) and tells every rank whether it could.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# Threads: each rank is one process among several on a node; letting every one of them
# spawn a thread per core oversubscribes the machine. Must precede importing torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from mpi4py import MPI  # noqa: E402

from launch import preflight, ranks  # noqa: E402
from launch.config import EXIT_CONFIG, ConfigError, RoleMap  # noqa: E402


def _fail_config(message: str) -> None:
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"mpirl: config error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CONFIG)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m launch", description=__doc__)
    parser.add_argument("config", help="role-map YAML file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="set a value of the role map")
    args = parser.parse_args(argv)
    entered = time.time()
    from runtime.lifeline import tie_to_launcher

    tie_to_launcher()  # a rank never outlives mpirun / srun, even deep in C code
    cfg = _read_role_map(args.config, args.overrides)
    prepared, resume = _prepare(cfg, args.config, args.overrides)
    _run(cfg, args.config, prepared, resume, startup_at=(entered, time.time()))


def _read_role_map(path: str, overrides=()) -> RoleMap:
    """The role map, read and checked by every rank alike: a bad one stops them all with exit 2."""
    try:
        cfg = preflight.load(path, overrides)
        preflight.check_world_size(cfg, MPI.COMM_WORLD.Get_size(), path)
    except ConfigError as e:
        _fail_config(str(e))
    return cfg


def _prepare(cfg: RoleMap, config_path: str, overrides=()):
    """Rank 0 prepares the data, the others import meanwhile; then rank 0's verdict reaches
    every rank. Returns what this rank needs of it (``launch.builders.Prepared``) and the resume."""
    from runtime.backoff import wait_for_all

    # The data next, on rank 0 only (it feeds the prompts); its verdict reaches every rank
    # before any of them starts collective work, so a bad file stops all of them alike.
    # The checkpoint to resume from is found (and checked against the role map) the same way,
    # and the dashboards started: one that cannot start is a config error before any work.
    world = MPI.COMM_WORLD
    prepared, resume, problem = None, None, None
    from launch.preflight.devices import rank_report

    reports = world.gather(rank_report(cfg, world.Get_rank(), MPI.Get_processor_name()), root=0)
    if world.Get_rank() == 0:
        prepared, resume, problem = _prepare_on_rank_0(cfg, reports)
    else:
        _warm_imports(cfg)  # while rank 0 prepares the data
    tokenizer = (prepared.tokenizer_class, prepared.stop_ids) if prepared is not None else (None, ())
    wait_for_all(world)  # asleep, not spinning, while rank 0 prepares the data and the others import
    problem, resume, (tokenizer_class, stop_ids) = world.bcast((problem, resume, tokenizer), root=0)
    if problem is not None:
        _stop(problem, config_path)
    if world.Get_rank() == 0:  # every rank has read the role map: its copy for report and advise
        _record_run(cfg, config_path, overrides)
    else:
        from launch.builders import Prepared

        prepared = Prepared(tokenizer_class=tokenizer_class, stop_ids=stop_ids)
    return prepared, resume


def _prepare_on_rank_0(cfg: RoleMap, reports: list) -> tuple:
    """(what rank 0 prepared, the resume, the problem as (exit code, message) or None).
    ``reports``: every rank's ``launch.preflight.devices.RankReport``."""
    from launch.builders import prepare_controller
    from launch.preflight.devices import device_problem
    from launch.resume import find_resume
    from roles.observe.backends import BackendError

    prepared, resume, hosts = None, None, [r.host for r in reports]
    if why := device_problem(cfg.world.trainer.device, reports):
        return prepared, resume, (EXIT_CONFIG, why)
    try:
        resume = find_resume(cfg)
        prepared = prepare_controller(cfg, resume)
        _announce(cfg, hosts, prepared, resume)
    except (ConfigError, BackendError) as e:
        return prepared, resume, (EXIT_CONFIG, str(e))
    except Exception:  # noqa: BLE001 - a crash here must still release the other ranks
        import traceback

        traceback.print_exc()
        return prepared, resume, (1, "preparing the data failed (traceback above)")
    return prepared, resume, None


def _announce(cfg: RoleMap, hosts: list[str], prepared, resume) -> None:
    """The job's opening lines: who runs where, the data, the transport, where it starts from."""
    from launch.resume import fresh_start_notice
    from transports.choose import transport_notice

    print(f"mpirl: ranks {ranks.rank_ranges(cfg)}", flush=True)
    if len(set(hosts)) > 1:
        print(f"mpirl: nodes {ranks.placement(cfg, hosts)}", flush=True)
    print(f"mpirl: {prepared.data.describe(cfg.task.name)}", flush=True)
    if notice := transport_notice():
        print(f"mpirl: {notice}", file=sys.stderr, flush=True)
    if resume is not None:
        print(f"mpirl: resuming from {resume.path} ({resume.steps_done} steps done)", flush=True)
    elif notice := fresh_start_notice(cfg, resume):
        print(f"mpirl: {notice}", file=sys.stderr, flush=True)


def _warm_imports(cfg: RoleMap) -> None:
    from launch.warm import unused_optional_packages, warm_imports

    role = cfg.world.roles_by_rank()[MPI.COMM_WORLD.Get_rank()]
    warm_imports(role, cfg.world.generator.engine, hide=unused_optional_packages(cfg))


def _stop(problem: tuple[int, str], config_path: str) -> None:
    """Every rank leaves with rank 0's verdict; rank 0 alone says why."""
    code, message = problem
    if code == EXIT_CONFIG:
        _fail_config(f"{config_path}: {message}")
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"mpirl: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def _record_run(cfg: RoleMap, config_path: str, overrides=()) -> None:
    from launch.run_folder import record_role_map
    from runtime.spans import clear_spans

    # Before any rank starts its span file (after the collective set-up, which waits for
    # this rank): an earlier start's files, of ranks this start may not have, would mix in.
    clear_spans(cfg.run.out)

    try:
        record_role_map(config_path, cfg.run.out, overrides)
    except OSError as e:  # the run's own files matter more than this copy
        print(f"mpirl: warning: could not copy the role map into {cfg.run.out}: {e}", file=sys.stderr, flush=True)


def _run(cfg: RoleMap, config_path: str, prepared, resume, startup_at: tuple[float, float]) -> None:
    """This rank's actor, its start-up phases on its timeline; then the process ends with its code."""
    entered, prepared_at = startup_at
    from launch.distributed import MODEL_ROLES
    from launch.job import run_rank
    from runtime.preemption import EXIT_RESUMABLE, exit_code_of
    from runtime.spans import process_started_at

    if cfg.world.roles_by_rank()[MPI.COMM_WORLD.Get_rank()] in MODEL_ROLES:
        import torch.distributed  # noqa: F401 - here, so start.imports holds what warm imports did not

    # The start-up so far, as spans of this rank's timeline (runtime/spans.py):
    startup = [
        ("start.python", process_started_at(), entered),  # the interpreter, mpi4py, MPI_Init
        ("start.preflight", entered, prepared_at),  # the role map; rank 0 prepares the data, the others import
        ("start.imports", prepared_at, time.time()),
    ]
    code = exit_code_of(run_rank(cfg, config_path, prepared, resume, startup=startup))
    from launch import fast_exit

    if code == EXIT_RESUMABLE:
        # A generator may hold a weight receive posted for a version the stopped trainers will
        # never send (gloo cannot cancel one). Python's finalization would tear its waiting
        # thread down mid-wait, which aborts the process: leave without it, MPI finalized.
        fast_exit.leave(code)
    fast_exit.exit_now(code)  # without the interpreter's teardown, when run as python -m launch
