"""mpirl advise: the split that minimises the predicted step time, on synthetic timings."""

import json
import subprocess
import sys

import pytest
import yaml

from launch.tools.advise import RoleWork, advise_from_run, best_split, fit_work, predict, work_from_run
from support.mpi_helpers import REPO


def test_async_split_balances_the_slowest_role():
    # 6 s of generation, 2 s of training, 0.1 s of scoring per step, 8 compute ranks:
    # (5, 1, 2) gives max(1.2, 0.1, 1.0) = 1.2 s; every other split is slower.
    work = RoleWork(generate=6.0, reward=0.1, train=2.0)
    best = best_split(work, total=8, overlapped=True)
    assert (best.generator, best.reward, best.trainer) == (5, 1, 2)
    assert best.step_s == pytest.approx(1.2)
    for g in range(1, 7):
        for r in range(1, 8 - g):
            assert predict(work, g, r, 8 - g - r, True) >= best.step_s - 1e-12


def test_sync_split_minimises_the_sum():
    work = RoleWork(generate=4.0, reward=1.0, train=4.0)
    best = best_split(work, total=5, overlapped=False)
    # Sum of work/ranks: (2, 1, 2) -> 2 + 1 + 2 = 5; (1,1,3) -> 4+1+1.33; (3,1,1) -> 1.33+1+4.
    assert (best.generator, best.reward, best.trainer) == (2, 1, 2)
    assert best.step_s == pytest.approx(5.0)


def test_too_few_ranks_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 3"):
        best_split(RoleWork(1, 1, 1), total=2)


def test_advise_from_a_run_folder(tmp_path):
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump(
            {"world": {"controller": 1, "generator": 1, "reward": 1, "trainer": 1}, "run": {"max_staleness": 1}}
        )
    )
    lines = [{"step": i, "generation_s": 3.0, "reward_s": 0.1, "training_s": 1.0} for i in range(5)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in lines))
    text = advise_from_run(tmp_path, total_ranks=5)
    assert "advised split   generator 3, reward 1, trainer 1" in text
    assert "predicted 3.000 s/step" in text  # the current 1/1/1 split: generation bound


def _run_folder(path, world, metrics_text, staleness=1):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"world": world, "run": {"max_staleness": staleness}}))
    (path / "metrics.jsonl").write_text(metrics_text)
    return path


def _lines(*steps):
    return "".join(
        json.dumps({"step": s, "generation_s": g, "reward_s": 0.1, "training_s": t}) + "\n" for s, g, t in steps
    )


def test_a_stopped_and_resumed_run_is_read_as_report_reads_it(tmp_path):
    # Step 2 was re-run after a resume (its later line counts), and the run was killed while
    # writing step 4's line. Without the re-run, the median generation would be 9.0.
    text = _lines((0, 50.0, 1.0), (1, 2.0, 1.0), (2, 9.0, 1.0), (3, 9.0, 1.0), (2, 2.0, 1.0))
    run = _run_folder(tmp_path, {"controller": 1, "generator": 2, "reward": 1, "trainer": 1}, text + '{"step": 4, "gen')
    work, counts, overlapped = work_from_run(run)
    assert (work.generate, work.train) == (2.0, 1.0) and overlapped
    assert counts == {"generator": 2, "reward": 1, "trainer": 1, "colocated": 0}


def test_colocated_run_is_advised_as_separate_overlapping_roles(tmp_path):
    # Colocated: 2 ranks generate (4 rank-seconds) then train (1 s each, 2 rank-seconds).
    text = _lines((0, 4.0, 1.0), (1, 4.0, 1.0), (2, 4.0, 1.0))
    world = {"controller": 1, "colocated": 2, "reward": 1, "generator": 0, "trainer": 0}
    text = advise_from_run(_run_folder(tmp_path, world, text, staleness=0), total_ranks=6)
    assert "current split   colocated 2, reward 1 (generate, then train): predicted 3.100 s/step" in text
    # 6 ranks, overlapped: (3, 1, 2) -> max(4/3, 0.1, 1.0) = 1.333 s.
    assert "asynchronous    generator 3, reward 1, trainer 2 (of 6 compute ranks) with max_staleness 1" in text
    assert "predicted 1.333 s/step (2.33x)" in text


def test_synchronous_run_also_gets_the_overlapped_figure(tmp_path):
    text = _lines((0, 3.0, 1.0), (1, 3.0, 1.0))
    world = {"controller": 1, "generator": {"ranks": 1, "engine": "vllm"}, "reward": 1, "trainer": 1}
    text = advise_from_run(_run_folder(tmp_path, world, text, staleness=0))
    assert "current split   generator 1, reward 1, trainer 1: predicted 4.100 s/step" in text
    assert "advised split   generator 1, reward 1, trainer 1 (of 3 compute ranks): predicted 4.100" in text
    assert (
        "asynchronous    generator 1, reward 1, trainer 1 (of 3 compute ranks) with max_staleness 1: predicted 3.000"
        in text
    )


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda p: p, "no such folder"),
        (lambda p: p.mkdir() or p, "not a run folder"),
        (lambda p: _run_folder(p, {"generator": 1}, "") and (p / "config.yaml").unlink() or p, "no readable config"),
        (lambda p: _run_folder(p, {"controller": 1, "generator": 1, "reward": 1, "trainer": 1}, ""), "has no steps"),
        (
            lambda p: _run_folder(p, {"controller": 1, "generator": 1, "reward": 0, "trainer": 1}, _lines((0, 1, 1))),
            "no reward ranks",
        ),
        (
            lambda p: _run_folder(p, {"generator": "two", "reward": 1, "trainer": 1}, _lines((0, 1, 1))),
            "not a rank count",
        ),
    ],
)
def test_what_advise_cannot_read_exits_2_with_the_reason(tmp_path, make, reason):
    run = make(tmp_path / "run")
    cli = subprocess.run(
        [sys.executable, "-m", "launch.cli", "advise", str(run)], cwd=REPO, capture_output=True, text=True
    )
    assert cli.returncode == 2, cli.stderr
    assert reason in cli.stderr and "Traceback" not in cli.stderr


def test_the_advice_is_a_layout_the_role_map_accepts(tmp_path):
    # Training-bound: 3 trainers of 5 ranks would be fastest, but 4 prompts a step do not divide
    # over 3 trainers (mpirl check refuses it): the advice is 2 trainers.
    assert best_split(RoleWork(generate=1.0, reward=0.01, train=6.0), total=5).trainer == 3
    assert best_split(RoleWork(1.0, 0.01, 6.0), total=5, prompts_per_step=4).trainer == 2
    run = _run_folder(tmp_path, {"controller": 1, "generator": 1, "reward": 1, "trainer": 1}, _lines((0, 1.0, 6.0)))
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "rollout": {"prompts_per_step": 4}}))
    assert "trainer 2 (of 5 compute ranks): predicted 3.000" in advise_from_run(run, total_ranks=5)


def _sync_world(generators):
    return {"controller": 1, "generator": generators, "reward": 1, "trainer": 1}


def test_a_fixed_cost_per_generator_is_fitted_from_runs_on_two_layouts():
    # A generator's step: 0.032 s whatever its batch (a decode step reads all the weights) plus
    # 1.64 rank-seconds that divide. Measured rank-seconds: 1 x 1.672 and 2 x 0.852.
    one = (RoleWork(generate=1.672, reward=0.01, train=0.8), _sync_world(1))
    two = (RoleWork(generate=1.704, reward=0.01, train=0.8), _sync_world(2))
    work = fit_work([one, two])
    assert work.generate_fixed == pytest.approx(0.032) and work.generate == pytest.approx(1.64)
    assert work.train_fixed == 0.0 and work.train == pytest.approx(0.8)  # one trainer count: linear
    # At 32 generators: 0.032 + 1.64/32 = 0.08325 s, where linear scaling from one run says 0.05225.
    assert work.per_rank("generate", 32) == pytest.approx(0.08325)
    assert fit_work([one]).per_rank("generate", 32) == pytest.approx(1.672 / 32)
    assert predict(work, 32, 1, 1, overlapped=False) == pytest.approx(0.08325 + 0.01 + 0.8)


def test_a_noisy_fit_never_goes_negative():
    # More rank-seconds on more ranks than a constant time explains: the intercept would be
    # negative, so the fit goes through the origin (linear scaling).
    runs = [(RoleWork(1.0, 0.01, 1.0), _sync_world(1)), (RoleWork(0.9, 0.01, 1.0), _sync_world(2))]
    work = fit_work(runs)
    assert work.generate_fixed == 0.0 and work.generate > 0
    # A rank's time that grows with the ranks: nothing divides, a constant time.
    runs = [(RoleWork(1.0, 0.01, 1.0), _sync_world(1)), (RoleWork(2.4, 0.01, 1.0), _sync_world(2))]
    work = fit_work(runs)
    assert work.generate == 0.0 and work.generate_fixed == pytest.approx(1.1)


def test_advise_fits_from_several_run_folders(tmp_path):
    rollout = {"prompts_per_step": 8, "samples_per_prompt": 4}
    runs = []
    for g, per_rank in ((1, 1.672), (2, 0.852)):
        run = _run_folder(tmp_path / f"g{g}", _sync_world(g), _lines(*[(i, per_rank * g, 0.8) for i in range(3)]), 0)
        config = yaml.safe_load((run / "config.yaml").read_text())
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "rollout": rollout}))
        runs.append(run)
    cli = subprocess.run(
        [sys.executable, "-m", "launch.cli", "advise", *map(str, runs)], cwd=REPO, capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stderr
    assert "generate 0.032" in cli.stdout  # the fitted fixed cost, named
    assert "current split   generator 1, reward 1, trainer 1: predicted 2.572 s/step" in cli.stdout  # 1.672 + 0.1 + 0.8
    # Another job (other rows a step) cannot be fitted with it: exit 2, naming both.
    (runs[1] / "config.yaml").write_text(
        yaml.safe_dump({"world": _sync_world(2), "run": {"max_staleness": 0}, "rollout": {"prompts_per_step": 16}})
    )
    cli = subprocess.run(
        [sys.executable, "-m", "launch.cli", "advise", *map(str, runs)], cwd=REPO, capture_output=True, text=True
    )
    assert cli.returncode == 2 and "same job" in cli.stderr and str(runs[1]) in cli.stderr
