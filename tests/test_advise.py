"""mpirl advise: the split that minimises the predicted step time, on synthetic timings."""

import json

import pytest
import yaml

from launch.advise import RoleWork, advise_from_run, best_split, predict


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
    lines = [{"generation_s": 3.0, "reward_s": 0.1, "training_s": 1.0}] * 5
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in lines))
    text = advise_from_run(tmp_path, total_ranks=5)
    assert "advised split   generator 3, reward 1, trainer 1" in text
    assert "predicted 3.000 s/step" in text  # the current 1/1/1 split: generation bound
