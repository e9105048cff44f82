"""The launchers: ``mpirl check`` / ``mpirl run --dry-run``, the mpiexec command they build, and
``python -m launch CONFIG`` stopping a bad job under mpirun with exit code 2 and one message."""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from launch import cli, mpi_settings
from support.mpi_helpers import REPO, find_mpirun, run_mpi

ROOT_VARS = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture
def as_user(monkeypatch):
    """``as_user(root: bool)``: pretend to run as root or not, with a clean environment."""

    def set_user(root: bool):
        for k in ROOT_VARS:
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)

    return set_user


# ------------------------------------------------------------------- mpirl check


def test_check_prints_the_rank_table(base_config, write_config, capsys):
    path = write_config(base_config)
    code, out, err = run_cli(["check", str(path)], capsys)
    assert code == 0, err
    assert "valid" in out and "4 ranks" in out
    rows = [line.split() for line in out.splitlines()]
    assert ["rank", "role", "index"] in rows
    for rank, role in enumerate(["controller", "generator", "reward", "trainer"]):
        assert [str(rank), role, "0"] in rows


def test_check_bad_config_exits_2_naming_the_field(base_config, write_config, capsys):
    base_config["run"]["steps"] = 0
    code, out, err = run_cli(["check", str(write_config(base_config))], capsys)
    assert code == 2
    assert err.count("mpirl: config error") == 1 and "run.steps" in err
    assert out == ""


def test_check_refuses_what_the_resume_would_refuse_and_names_the_checkpoint(
    base_config, write_config, capsys, monkeypatch
):
    # A run's start-up refuses a resume that would be wrong (launch/resume.py); `mpirl check`
    # of the same file must say so too, not "valid".
    from launch.config import parse
    from launch.preflight.data import prepare_data
    from roles.prompt_stream import PromptStream, fingerprint

    base_config["run"].update(steps=8, out=str(write_config("").parent / "run"))
    base_config["checkpoint"] = {"every_steps": 2}
    cfg = parse(copy.deepcopy(base_config))
    prompts = prepare_data(cfg).train_prompts
    stream = PromptStream(prompts, seed=0, digest=fingerprint(prompts))
    plan = cfg.checkpoints()
    part = plan.write_controller_part(4, {"position": {"stream": stream.position()}, "next_eval_group": 0})
    (part / "trainer").mkdir()
    (part / "trainer" / ".metadata").write_bytes(b"the trainers' shard index (not read by check)")
    newest = plan.finalize(4)

    code, out, err = run_cli(["check", str(write_config(base_config))], capsys)
    assert code == 0, err
    assert f"resumes from {newest} (4 steps done)" in out

    base_config["run"]["steps"] = 3  # below the steps done: a run refuses it, so must check
    code, out, err = run_cli(["check", str(write_config(base_config))], capsys)
    assert code == 2 and out == ""
    assert err.startswith("mpirl: config error: ") and "run.steps (3) is below the 4 steps" in err, err
    # mpirl run refuses it too, before mpiexec starts ranks that would each exit 2.
    monkeypatch.setattr(cli, "run_forwarding_signals", lambda *a, **k: pytest.fail("mpiexec was started"))
    code, out, err = run_cli(["run", str(write_config(base_config))], capsys)
    assert code == 2 and err.count("mpirl: config error: ") == 1 and "run.steps (3) is below" in err, err

    base_config["run"]["steps"] = 8
    base_config["run"]["seed"] = 5
    code, out, err = run_cli(["check", str(write_config(base_config))], capsys)
    assert code == 2 and "run.seed: differs from the checkpoint" in err, err

    base_config["run"]["seed"] = 0
    code, out, err = run_cli(["check", "--no-data", str(write_config(base_config))], capsys)
    assert code == 0 and "resumes from" not in out, err  # the file alone: no checkpoint read


def test_check_as_a_command(base_config, write_config):
    # The console script is ``launch.cli:main``; run it as a module the same way.
    res = subprocess.run(
        [sys.executable, "-m", "launch.cli", "check", str(write_config(base_config))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    assert "controller" in res.stdout and "trainer" in res.stdout


# -------------------------------------------------------------- mpiexec_command


@pytest.mark.parametrize("n,cores,oversubscribe", [(2, 4, False), (4, 4, False), (4, 2, True), (5, 1, True)])
def test_oversubscribe_only_when_ranks_exceed_cores(n, cores, oversubscribe, as_user):
    as_user(root=False)
    cmd, _ = cli.mpiexec_command(n, ["prog", "arg"], mpiexec=find_mpirun(), cores=cores)
    assert cmd[:3] == [find_mpirun(), "-n", str(n)]
    assert ("--oversubscribe" in cmd) == oversubscribe
    assert cmd[-2:] == ["prog", "arg"]


@pytest.mark.parametrize("root", [True, False])
def test_root_switches_only_as_root(root, as_user):
    as_user(root=root)
    _, env = cli.mpiexec_command(2, ["prog"], mpiexec=find_mpirun(), cores=8)
    for k in ROOT_VARS:
        assert (env.get(k) == "1") == root
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in os.environ  # the caller's environment is untouched


def test_other_mpis_get_no_open_mpi_flags(tmp_path, as_user):
    as_user(root=True)
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'HYDRA build details:'\necho '    Version: 4.2.0'\n")
    fake.chmod(0o755)
    cmd, env = cli.mpiexec_command(8, ["prog"], mpiexec=str(fake), cores=1)
    assert cmd == [str(fake), "-n", "8", "prog"]
    assert not any(k in env for k in ROOT_VARS)


def test_find_mpiexec_prefers_the_one_beside_python():
    assert os.path.dirname(cli.find_mpiexec()) == os.path.dirname(sys.executable)


# ------------------------------------------------------------- mpirl run --dry-run


def dry_run(path, capsys) -> str:
    code, out, err = run_cli(["run", str(path), "--dry-run"], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("cores,oversubscribe", [(2, True), (4, False), (64, False)])
def test_dry_run_oversubscribes_only_past_the_cores(
    base_config, write_config, capsys, monkeypatch, as_user, cores, oversubscribe
):
    as_user(root=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    path = write_config(base_config)
    line = dry_run(path, capsys)
    words = shlex.split(line)
    assert words[words.index("-n") + 1] == "4"
    assert ("--oversubscribe" in words) == oversubscribe
    assert words[-3:] == ["-m", "launch", str(path)]


@pytest.mark.parametrize("root", [True, False])
def test_dry_run_shows_root_switches_only_as_root(base_config, write_config, capsys, monkeypatch, as_user, root):
    # The printed command must work when pasted: as root Open MPI refuses to start without them.
    as_user(root=root)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    line = dry_run(write_config(base_config), capsys)
    for k in ROOT_VARS:
        assert (f"{k}=1" in line) == root, line


def test_run_bad_config_exits_2_before_mpiexec(base_config, write_config, capsys, monkeypatch):
    monkeypatch.setattr(cli, "mpiexec_command", lambda *a, **k: pytest.fail("mpiexec was reached"))
    base_config["world"]["controller"] = 2
    code, _, err = run_cli(["run", str(write_config(base_config)), "--dry-run"], capsys)
    assert code == 2 and "world.controller" in err


# -------------------------------------------------- python -m launch under mpirun


def launch_under_mpirun(n: int, path) -> tuple[int, str]:
    res = run_mpi(n, [sys.executable, "-m", "launch", str(path)], timeout=60)
    return res.rc, res.stdout + res.stderr


def test_launch_bad_config_exits_2_with_one_message(base_config, write_config):
    base_config["run"]["stepz"] = 5
    rc, out = launch_under_mpirun(2, write_config(base_config))
    assert rc == 2, out
    assert out.count("mpirl: config error") == 1, out  # printed by rank 0 only
    assert out.count("run.stepz: unknown key") == 1, out


def test_launch_rank_count_mismatch_exits_2(base_config, write_config):
    rc, out = launch_under_mpirun(3, write_config(base_config))  # a 4-rank map on 3 ranks
    assert rc == 2, out
    assert out.count("mpirl: config error") == 1, out
    assert "world" in out and "has 3" in out and "mpirun -n 4" in out, out


def test_a_stale_session_folder_of_a_killed_mpirun_does_not_stop_the_next(tmp_path, monkeypatch):
    """A killed mpirun leaves /tmp/ompi.<pid>/pmix.<host>.tool behind; an mpirun that later gets
    that pid died at start (exit 213, "The PMIx server's listener thread failed to start").
    Here the next mpirun is given that pid (exec from the shell whose pid named the folder)."""
    tmp = Path(tempfile.mkdtemp(prefix="m", dir="/tmp"))  # short: PRRTE's paths are built under it
    try:
        monkeypatch.setenv("TMPDIR", str(tmp))
        _, env = cli.mpiexec_command(1, ["true"], mpiexec=find_mpirun(), cores=1)
        script = (
            f'mkdir -p "$TMPDIR/ompi.$$" && touch "$TMPDIR/ompi.$$/pmix.$(hostname).tool" '
            f"&& exec {find_mpirun()} -n 1 true"
        )
        done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_open_mpi_settings_leave_a_users_own_value(monkeypatch, as_user):
    as_user(root=False)
    monkeypatch.setenv("PRTE_MCA_pmix_tool_support", "1")
    _, env = cli.mpiexec_command(2, ["prog"], mpiexec=find_mpirun(), cores=8)
    assert env["PRTE_MCA_pmix_tool_support"] == "1"
    monkeypatch.delenv("PRTE_MCA_pmix_tool_support")
    _, env = cli.mpiexec_command(2, ["prog"], mpiexec=find_mpirun(), cores=8)
    assert env["PRTE_MCA_pmix_tool_support"] == "0"


def test_idle_libfabric_btl_is_left_out_only_where_it_could_not_run(monkeypatch, tmp_path, as_user):
    as_user(root=False)
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    monkeypatch.delenv("OMPI_MCA_mca_base_param_files", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.openmpi/mca-params.conf
    mpiexec = str(tmp_path / "bin" / "mpiexec")  # no etc/openmpi-mca-params.conf beside it
    # A host without fabric devices: btl/ofi could find no provider, so it is left out.
    monkeypatch.setattr(mpi_settings, "FABRIC_DEVICE_GLOBS", (str(tmp_path / "mlx5_*"),))
    assert cli.open_mpi_env(dict(os.environ), mpiexec)["OMPI_MCA_btl"] == "^ofi"
    assert not mpi_settings.has_fabric_device((str(tmp_path / "none*"),))
    # A host with one (an InfiniBand device, say): Open MPI chooses.
    (tmp_path / "mlx5_0").mkdir()
    assert mpi_settings.has_fabric_device((str(tmp_path / "mlx5_*"),))
    assert "OMPI_MCA_btl" not in cli.open_mpi_env(dict(os.environ), mpiexec)


def test_a_users_btl_choice_is_left_alone(monkeypatch, tmp_path, as_user):
    as_user(root=False)
    monkeypatch.setattr(mpi_settings, "has_fabric_device", lambda *a: False)
    monkeypatch.delenv("OMPI_MCA_mca_base_param_files", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    mpiexec = str(tmp_path / "bin" / "mpiexec")
    monkeypatch.setenv("OMPI_MCA_btl", "self,tcp")
    assert "OMPI_MCA_btl" not in cli.open_mpi_env(dict(os.environ), mpiexec)
    monkeypatch.delenv("OMPI_MCA_btl")
    # Set in a parameter file: an environment value would override it, so none is added.
    for conf in (tmp_path / ".openmpi" / "mca-params.conf", tmp_path / "etc" / "openmpi-mca-params.conf"):
        conf.parent.mkdir(parents=True)
        conf.write_text("# btl = self\nbtl_tcp_if_include = eth0\n")  # a comment and another key: not a choice
        assert cli.open_mpi_env(dict(os.environ), mpiexec)["OMPI_MCA_btl"] == "^ofi"
        conf.write_text("btl = self,sm,tcp\n")
        assert "OMPI_MCA_btl" not in cli.open_mpi_env(dict(os.environ), mpiexec)
        conf.unlink()
    listed = tmp_path / "site.conf"
    listed.write_text("btl=^tcp\n")
    monkeypatch.setenv("OMPI_MCA_mca_base_param_files", str(listed))
    assert "OMPI_MCA_btl" not in cli.open_mpi_env(dict(os.environ), mpiexec)


@pytest.mark.parametrize("users_btl", [None, "self,sm,tcp"])
def test_python_m_launch_sets_the_btl_before_mpi_starts(tmp_path, users_btl):
    # A job started by the user's own mpirun or srun gets the setting from the rank itself.
    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_MCA_btl", "OMPI_MCA_mca_base_param_files")}
    env["HOME"] = str(tmp_path)
    if users_btl:
        env["OMPI_MCA_btl"] = users_btl
    code = "import os, sys; sys.argv = ['x']; import launch.__main__; print(os.environ.get('OMPI_MCA_btl'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = users_btl or ("None" if mpi_settings.has_fabric_device() else "^ofi")
    assert done.stdout.strip().splitlines()[-1] == expected


def test_known_start_up_noise_is_dropped_and_nothing_else():
    # What each model-holding rank printed at every start (transformers imports torchao at the
    # first from_pretrained), emitted as torchao and torch emit it, beside lines that must stay.
    code = """
import logging
import launch  # noqa: F401
ao, tree = logging.getLogger("torchao"), logging.getLogger("torch.utils._pytree")
ao.warning("Failed to load /x/torchao/_C_mxfp8.so: Could not load this library")
tree.warning("%s is an Enum subclass and is now natively supported by torch.compile as an "
             "opaque value type.", "<enum 'KernelPreference'>")
ao.warning("torchao: some other warning")
tree.warning("some other pytree warning")
"""
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == ["torchao: some other warning", "some other pytree warning"]


def test_a_launcher_killed_by_a_signal_is_reported_as_128_plus_the_signal():
    # mpiexec SIGKILLed: the shell's 137, not the 247 sys.exit makes of Popen's -9.
    code, _, signalled = cli.run_forwarding_signals([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], None)
    assert (code, signalled) == (137, False)
    code, _, _ = cli.run_forwarding_signals([sys.executable, "-c", "raise SystemExit(3)"], None)
    assert code == 3


@pytest.mark.parametrize("case", ["no checkpoint", "out is a file", "out is the checkpoint"])
def test_export_refuses_what_it_cannot_write_before_reading_anything(tmp_path, case):
    ckpt = tmp_path / "step-00000004"
    ckpt.mkdir()
    out = tmp_path / "model"
    if case == "no checkpoint":
        ckpt = tmp_path / "missing"
    elif case == "out is a file":
        out.write_text("not a folder")
    else:
        out = ckpt
    run = subprocess.run(
        [sys.executable, "-m", "launch.cli", "export", str(ckpt), str(out)], cwd=REPO, capture_output=True, text=True
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert {"no checkpoint": "no such folder", "out is a file": "is a file", "out is the checkpoint": "inside"}[
        case
    ] in run.stderr
    if ckpt.exists():
        assert not any(ckpt.iterdir())  # nothing written into the checkpoint


def test_export_refuses_a_folder_that_holds_files_unless_forced(tmp_path, monkeypatch, capsys):
    """Written into, a non-empty OUT would mix the model's files with what was there, silently."""
    import roles.checkpoint.export

    ckpt = tmp_path / "step-00000004"
    ckpt.mkdir()
    out = tmp_path / "model"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "model-00001-of-00002.safetensors").write_bytes(b"another model's shard")
    written = []

    def fake_export(path, to, adapter=False):
        written.append(Path(to))
        (Path(to) / "model.safetensors").write_bytes(b"new")
        return Path(to)

    monkeypatch.setattr(roles.checkpoint.export, "export_hf", fake_export)
    code, _, err = run_cli(["export", str(ckpt), str(out)], capsys)
    assert code == 2 and not written, err
    assert "exists and is not empty (model-00001-of-00002.safetensors, notes.txt)" in err
    assert "choose a new or empty folder, or pass --force" in err
    assert sorted(p.name for p in out.iterdir()) == ["model-00001-of-00002.safetensors", "notes.txt"]

    code, out_text, err = run_cli(["export", str(ckpt), str(out), "--force"], capsys)
    assert code == 0 and written == [out], err
    assert (out / "model.safetensors").read_bytes() == b"new" and (out / "notes.txt").read_text() == "mine"
    # What it kept that a loader could take for the model's weights is named.
    assert "warning" in err and "model-00001-of-00002.safetensors" in err and "notes.txt" not in err

    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli(["export", str(ckpt), str(empty)], capsys)
    assert code == 0 and written[-1] == empty and "warning" not in err, err
    assert (
        "--force"
        in subprocess.run(
            [sys.executable, "-m", "launch.cli", "export", "--help"], cwd=REPO, capture_output=True, text=True
        ).stdout
    )


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory) -> Path:
    """A complete checkpoint of a one-layer tiny Llama, as one trainer writes it (no MPI)."""
    import torch
    import yaml

    from examples.toy.tiny_llama import build_tiny_llama
    from roles.checkpoint.layout import COMPLETE
    from roles.checkpoint.trainer_state import save_trainer_state
    from roles.models import ModelConfig
    from roles.policy.model import load_model

    root = tmp_path_factory.mktemp("export")
    model_dir = build_tiny_llama(root / "model", "0123456789+=", hidden_size=64, num_layers=1, intermediate_size=64)
    model = load_model(ModelConfig(path=str(model_dir)))
    save_trainer_state(root / "step-00000001", model, torch.optim.AdamW(model.parameters()), None)
    (root / "step-00000001" / "config.yaml").write_text(yaml.safe_dump({"model": {"path": str(model_dir)}}))
    (root / "step-00000001" / COMPLETE).write_text("1\n")
    return root / "step-00000001"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate the shard file", r"reading the policy from .* failed \(trainer 0: EOFError: checkpoint file ends"),
        ("garble .metadata", r"trainer/\.metadata: damaged \("),
        ("remove .metadata", r"trainer/\.metadata: missing \(the trainers' shards are not all there\)"),
        ("remove config.yaml", r"config\.yaml: cannot be read \(No such file"),
        ("move the model", r"its model\.path '.*gone', whose architecture and tokenizer .* is not a model folder here"),
    ],
)
def test_export_of_a_damaged_checkpoint_exits_2_naming_the_file(saved_checkpoint, tmp_path, capsys, damage, message):
    import yaml

    ckpt = tmp_path / saved_checkpoint.name
    shutil.copytree(saved_checkpoint, ckpt)
    if damage == "truncate the shard file":
        shard = next((ckpt / "trainer").glob("*.raw"))
        os.truncate(shard, 1000)  # into the model's tensors (the optimizer state lies after them)
    elif damage == "garble .metadata":
        (ckpt / "trainer" / ".metadata").write_bytes(b"garbage")
    elif damage == "remove .metadata":
        (ckpt / "trainer" / ".metadata").unlink()
    elif damage == "remove config.yaml":
        (ckpt / "config.yaml").unlink()
    else:
        (ckpt / "config.yaml").write_text(yaml.safe_dump({"model": {"path": str(tmp_path / "gone")}}))
    code, _, err = run_cli(["export", str(ckpt), str(tmp_path / "out")], capsys)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("mpirl: export: ") and re.search(message, err), err
    assert not (tmp_path / "out" / "model.safetensors").exists()  # nothing half-written


def test_export_of_an_intact_checkpoint_writes_a_model_folder(saved_checkpoint, tmp_path, capsys):
    code, _, err = run_cli(["export", str(saved_checkpoint), str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert {"model.safetensors", "config.json"} <= {p.name for p in (tmp_path / "out").iterdir()}


def test_a_stop_signal_before_mpiexec_exits_resumable_starting_nothing(base_config, write_config, capsys, monkeypatch):
    import signal

    from runtime.preemption import EXIT_RESUMABLE

    load = cli._load_or_exit

    def load_while_signalled(path, overrides=()):  # SIGTERM while the role map is read (Slurm, early)
        os.kill(os.getpid(), signal.SIGTERM)
        return load(path, overrides)

    monkeypatch.setattr(cli, "_load_or_exit", load_while_signalled)
    monkeypatch.setattr(cli, "run_forwarding_signals", lambda *a, **k: pytest.fail("mpiexec was started"))
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        code, _, err = run_cli(["run", str(write_config(base_config))], capsys)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert code == EXIT_RESUMABLE and "SIGTERM before the job started" in err
