"""bench/long_tail.py: the figures a run's metrics.jsonl gives, the summary line of several
rounds, and configurations the role map refuses reported as skipped, not fatal."""

import importlib.util
import json

import pytest

from support.paths import REPO

_spec = importlib.util.spec_from_file_location("long_tail_bench", REPO / "bench" / "long_tail.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def metrics_line(step, *, elapsed, step_s, gen, tail, tokens, reward, gen_busy, trainer_busy=0.5, length=20.0):
    """A metrics.jsonl line with the keys the bench reads, as roles/observe/step_record.py writes them."""
    return {
        "step": step,
        "elapsed_s": elapsed,
        "step_s": step_s,
        "generation_s": gen,
        "generator_tail_wait_s": tail,
        "tokens": tokens,
        "reward_mean": reward,
        "response_length_mean": length,
        "staleness_mean": 1.0,
        "busy": {"generator": gen_busy, "reward": 0.01, "trainer": trainer_busy, "controller": 0.01},
    }


def synthetic_run():
    # Step 0 is slow (start-up) and has a tail share of its own, which a warm-up of 1 leaves out.
    lines = [metrics_line(0, elapsed=10.0, step_s=10.0, gen=5.0, tail=0.5, tokens=1000, reward=0.0, gen_busy=0.5)]
    for s, (step_s, gen, tail, reward, busy) in enumerate(
        [(2.0, 2.0, 1.0, 0.2, 1.0), (1.0, 1.0, 0.8, 0.4, 0.8), (1.0, 1.0, 0.2, 0.6, 0.6)], start=1
    ):
        elapsed = lines[-1]["elapsed_s"] + step_s
        lines.append(
            metrics_line(
                s, elapsed=elapsed, step_s=step_s, gen=gen, tail=tail, tokens=2000, reward=reward, gen_busy=busy
            )
        )
    return lines


def test_figures_from_metrics_lines():
    f = bench.figures(synthetic_run(), samples_per_step=100, warmup=1, reward_steps=2)
    assert f["step_s"] == pytest.approx((14.0 - 10.0) / 3)  # from the end of step 0 to the end
    assert f["samples_per_s"] == pytest.approx(100 / f["step_s"])
    assert f["tokens_per_s"] == pytest.approx(2000 / f["step_s"])
    assert f["tail_wait_share"] == pytest.approx((1.0 + 0.8 + 0.2) / (2.0 + 1.0 + 1.0))  # sums, step 0 left out
    assert f["generator_busy"] == pytest.approx((1.0 * 2 + 0.8 * 1 + 0.6 * 1) / 4)  # weighted by step time
    assert f["trainer_busy"] == pytest.approx(0.5)
    assert f["reward"] == pytest.approx((0.4 + 0.6) / 2)  # the last 2 steps


def test_figures_need_steps_after_the_warm_up():
    with pytest.raises(ValueError, match="leave none"):
        bench.figures(synthetic_run()[:1], samples_per_step=100, warmup=1, reward_steps=1)


def test_summary_line_holds_medians_and_spreads():
    rounds = [{"step_s": 1.0, "reward": 0.3}, {"step_s": 3.0, "reward": 0.1}, {"step_s": 2.0, "reward": 0.2}]
    line = bench.summary_line("batch", rounds, engine="torch")
    assert line["config"] == "batch" and line["engine"] == "torch" and line["repeats"] == 3
    assert line["step_s"] == 2.0 and line["reward"] == 0.2
    assert line["spread"] == {"step_s": [1.0, 3.0], "reward": [0.1, 0.3]}
    json.dumps(line)  # one JSON line


@pytest.fixture
def model_dir(tmp_path):
    """A model folder (random weights) and a prompts file where the bench's runs expect them."""
    from examples.long_tail import prepare
    from examples.toy.tiny_llama import build_tiny_llama

    size = prepare.model_size()
    build_tiny_llama(
        tmp_path / "model" / "sft",
        prepare.ALPHABET,
        hidden_size=64,
        num_layers=1,
        num_heads=1,
        intermediate_size=64,
        max_position_embeddings=size.max_position_embeddings,
    )
    (tmp_path / "model" / prepare.PROMPTS).write_text(json.dumps({"prompt": "a1+2=", "answer": "3"}) + "\n")
    return tmp_path / "model"


@pytest.mark.parametrize("name", sorted(bench.CONFIGS))
def test_every_configuration_is_a_valid_role_map_over_the_workload(tmp_path, model_dir, name):
    import yaml

    from launch import preflight

    run = {"model_dir": model_dir, "steps": 5, "seed": 0, "engine": "torch"}
    overrides = bench.run_overrides(bench.CONFIGS[name], run_dir=tmp_path / name, **run)
    path = bench.recipe.write_config(bench.workload.BASE_CONFIG, tmp_path / name, overrides)
    cfg = preflight.load(path)
    written = yaml.safe_load(path.read_text())
    assert cfg.rollout.mode == bench.CONFIGS[name]["rollout"]["mode"]
    assert written["run"]["out"] == str(tmp_path / name) and written["run"]["max_staleness"] == 1
    assert written["model"]["path"] == str(model_dir / "sft")
    assert written["task"]["train_files"] == [str(model_dir / "prompts.jsonl")]
