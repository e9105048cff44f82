"""Jobs across nodes: Open MPI over TCP, the rendezvous and gloo over a network, roles on
different hosts — on one machine, its nodes network namespaces (``cluster.py``).

    make test-hpc        # root and network namespaces; skipped with the reason otherwise

Every job here is bounded in time; the namespaces and everything started in them are removed
after each test, pass or fail.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import preflight, recipe
from support.cluster import VirtualCluster, unavailable_reason
from support.jobs import CONFIG, run_timed
from support.mpi_helpers import find_mpirun, mpi_env

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 600
REASON = unavailable_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=f"virtual cluster: {REASON}"), pytest.mark.timeout(900)]


@pytest.fixture
def cluster(request):
    nodes = getattr(request, "param", 2)
    with VirtualCluster(nodes) as c:
        yield c
        deadline = time.monotonic() + 10  # a node's daemon may take a moment to exit after mpirun
        while (left := {h: p for h, p in c.running().items() if p}) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not left, f"processes were left on the nodes: {left}"


def launch_cmd(cluster: VirtualCluster, n: int, slots, argv: list[str]) -> list[str]:
    return cluster.mpirun(find_mpirun(), ["-n", str(n), *argv], slots)  # TCP only, unbound (cluster.py)


def run_job(cluster, tmp_path, sft_model, slots, overrides: dict, env_extra: dict | None = None):  # noqa: F811
    out = tmp_path / "run"
    base = {"model": {"path": str(sft_model)}, "run": {"out": str(out), "progress": False}}
    cfg_path = recipe.write_config(CONFIG, out, recipe.merge_overrides(base, overrides))
    size = preflight.load(cfg_path).world.size
    cmd = launch_cmd(cluster, size, slots, [sys.executable, "-m", "launch", str(cfg_path)])
    env = mpi_env(env_extra)
    return cmd, env, out


def test_a_failed_test_leaves_no_namespace_file_or_process_behind():
    cluster = VirtualCluster(2)
    sleeper = subprocess.Popen(cluster.on_node("vnode1", ["sleep", "600"]))
    with pytest.raises(RuntimeError, match="the test failed"), cluster:
        deadline = time.monotonic() + 10
        while not cluster.running()["vnode1"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cluster.running()["vnode1"]
        raise RuntimeError("the test failed")
    assert sleeper.wait(timeout=10) == -9  # killed with the node
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert cluster.tag not in listed
    assert not list(Path("/etc/netns").glob(f"{cluster.tag}*")) and not cluster.dir.exists()


def test_every_rank_is_on_its_own_node_and_mpi_talks_tcp(cluster, tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import socket\nfrom mpi4py import MPI\n"
        "c = MPI.COMM_WORLD\n"
        "local = c.Split_type(MPI.COMM_TYPE_SHARED).Get_size()\n"
        "hosts = c.allgather(socket.getfqdn())\n"
        "if c.Get_rank() == 0: print('HOSTS', hosts, 'LOCAL', local, flush=True)\n"
    )
    done = subprocess.run(
        launch_cmd(cluster, 4, 2, [sys.executable, str(probe)]),
        env=mpi_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "HOSTS ['vnode0', 'vnode0', 'vnode1', 'vnode1'] LOCAL 2" in done.stdout, done.stdout


def test_the_mpi_test_suite_passes_across_two_nodes(cluster):
    """tests/mpi (mailbox, actor loop, weight sync bit-identical on both transports, FSDP2
    parity, checkpoint resharding) with ranks 0-1 on one node and 2-3 on the other."""
    cmd = launch_cmd(
        cluster,
        4,
        2,
        [sys.executable, "-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "--with-mpi", "tests/mpi"],
    )
    done = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=str(REPO))
    summary = [line for line in done.stdout.splitlines() if " passed" in line or " failed" in line]
    assert done.returncode == 0 and summary and "failed" not in summary[-1], (done.stdout + done.stderr)[-4000:]


def _check_complete(out: Path, steps: int) -> list[dict]:
    metrics = recipe.read_metrics(out)
    assert [m["step"] for m in metrics] == list(range(steps))
    assert [m["policy_version"] for m in metrics] == list(range(1, steps + 1))
    assert all(m["tokens"] > 0 for m in metrics)
    assert (out / "policy" / "config.json").is_file()
    return metrics


@pytest.mark.parametrize("transport", ["torch", "mpi"], ids=["gloo", "mpi-buffers"])
def test_controller_and_generator_on_one_node_trainer_on_another(cluster, tmp_path, sft_model, transport):  # noqa: F811
    cmd, env, out = run_job(
        cluster, tmp_path, sft_model, 2, {"weights": {"transport": transport}, "run": {"steps": 4, "max_staleness": 1}}
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    assert "mpirl: nodes vnode0: 0-1 controller, generator; vnode1: 2-3 reward, trainer" in text, text[-3000:]
    metrics = _check_complete(out, 4)
    assert all(m["weight_sync_s"] >= 0 for m in metrics)


@pytest.mark.parametrize("transport", ["torch", "mpi"], ids=["gloo", "mpi-buffers"])
@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_fsdp2_trainers_split_over_two_nodes_feed_a_generator_on_a_third(cluster, tmp_path, sft_model, transport):  # noqa: F811
    """Two FSDP2 trainers, one per node, shard the policy over gloo between nodes and push their
    shards straight to the generator on the first node; a KL term loads the reference too."""
    cmd, env, out = run_job(
        cluster,
        tmp_path,
        sft_model,
        [3, 1, 1],
        {
            "world": {"trainer": 2},
            "weights": {"transport": transport},
            "algorithm": {"loss": "grpo", "kl_coef": 0.05},
            "run": {"steps": 3, "max_staleness": 1},
        },
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    assert "mpirl: nodes vnode0: 0-2 controller, generator, reward; vnode1: 3 trainer; vnode2: 4 trainer" in text
    metrics = _check_complete(out, 3)
    assert metrics[-1]["trainer"]["kl_ref"] > 0  # both shards of the policy moved


def test_a_rank_killed_on_the_second_node_ends_the_job_within_10_s(cluster, tmp_path, sft_model):  # noqa: F811
    cmd, env, out = run_job(
        cluster,
        tmp_path,
        sft_model,
        2,
        {"run": {"steps": 10000}},
        env_extra={"MPIRL_INJECT_FAULT": "kill-trainer:8"},
    )
    code, lines, ended_at = run_timed(cmd, env, timeout_s=300)
    text = "".join(line for _, line in lines)
    assert code not in (0, 2, -9), text[-3000:]
    (fault_at,) = [t for t, line in lines if "mpirl: fault injected" in line]
    took = ended_at - fault_at
    assert took < 10, f"the job ended {took:.1f} s after the trainer on vnode1 was killed"
    assert "mpirl: ranks 0 controller, 1 generator, 2 reward, 3 trainer" in text
    assert "rank 3 " in text and ("signal 9" in text or "Killed" in text), text[-3000:]


def test_eight_sim_generators_over_two_nodes_run_the_real_control_plane(cluster, tmp_path, sft_model):  # noqa: F811
    """The benchmark instruments (engine: sim, algorithm.sim) in a real job of 11 ranks: the
    controller, mailboxes, reward rank and weight pushes are the real ones."""
    sim = {"per_token_s": 0.001, "lengths": {"kind": "lognormal", "mean": 8, "sigma": 1.0}}
    cmd, env, out = run_job(
        cluster,
        tmp_path,
        sft_model,
        [6, 5],
        {
            "world": {"generator": {"ranks": 8, "engine": "sim", "sim": sim}},
            "rollout": {"prompts_per_step": 16, "samples_per_prompt": 4, "max_new_tokens": 24},
            "algorithm": {"sim": {"per_token_s": 0.0005}},
            "run": {"steps": 4, "max_staleness": 1},
        },
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    metrics = _check_complete(out, 4)
    for m in metrics:
        assert m["trainer"]["sim_train_s"] == pytest.approx(0.0005 * m["tokens"])
        assert 0 <= m["busy"]["controller"] < 1
        assert 1 <= m["response_length_max"] <= 24
    # Counted when each step's line is written, and lines may come in a burst: the total is
    # what is certain, at least a batch notice from each generator and the trainer's each step.
    assert sum(m["controller_messages"] for m in metrics) >= 4 * (8 + 1)
