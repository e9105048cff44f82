"""bench/staleness.py without MPI: the grid, each run's role-map overrides (every configuration
accepted by the role map's checks), the figures a finished run's files give, the JSON lines."""

import copy
import importlib.util
import json
import sys

import pytest

from launch import config, recipe
from launch.role_map_file import load_yaml
from support.paths import REPO

pytestmark = pytest.mark.timeout(60)

# Loaded by path (bench/ is no package); registered first, as its dataclass needs its module.
_spec = importlib.util.spec_from_file_location("staleness_bench", REPO / "bench" / "staleness.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


@pytest.fixture
def root(tmp_path):
    """A prepared root as far as the role map's value checks look: a model folder and the files."""
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "config.json").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.parquet").write_text("")
    (tmp_path / "data" / "test.jsonl").write_text("")
    return tmp_path


def test_the_default_grid_is_the_issues():
    args = bench.parse_args([])
    assert args.staleness == [0, 1, 2, 4, 8] and args.seeds == [0, 1, 2] and args.steps == 250
    assert set(args.configs) >= {"aipo", "ppo", "decoupled", "tis", "icepop", "seq_mask"}
    assert len(args.grid) == len(bench.CONFIGS) * 5 * 3
    assert len(set(args.grid)) == len(args.grid) and len({r.name for r in args.grid}) == len(args.grid)


def test_a_chosen_subset_and_its_dynamic_arm():
    args = bench.parse_args(["--staleness", "0,4", "--configs", "aipo,tis", "--seeds", "0", "--dynamic", "tis"])
    assert [(r.config, r.staleness, r.seed, r.dynamic) for r in args.grid] == [
        ("aipo", 0, 0, False),
        ("aipo", 4, 0, False),
        ("tis", 0, 0, False),
        ("tis", 0, 0, True),
        ("tis", 4, 0, False),
        ("tis", 4, 0, True),
    ]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--configs", "aipo,nope"], "nope"),
        (["--dynamic", "nope"], "nope"),
        (["--configs", "aipo", "--dynamic", "ppo"], "--dynamic ppo"),  # its plain arm must run too
        (["--staleness", "-1"], "--staleness"),
        (["--steps", "5"], "--steps"),
        (["--eval-every", "-1"], "--eval-every"),
        (["--eval-examples", "0"], "--eval-examples"),
    ],
)
def test_bad_choices_exit_2_naming_them(argv, named, capsys):
    with pytest.raises(SystemExit) as e:
        bench.parse_args(argv)
    assert e.value.code == 2
    assert named in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("name", list(bench.CONFIGS))
@pytest.mark.parametrize("staleness", [0, 8])
def test_every_configuration_is_a_role_map_the_job_accepts(root, tmp_path, name, staleness):
    run = bench.Run(name, staleness, seed=2)
    extra = bench.overrides_for(run, root, tmp_path / "out", 40, "bfloat16", 100, 0)
    cfg = config.parse(recipe.merge_overrides(copy.deepcopy(load_yaml(bench.CONFIG.read_text())), extra))
    assert cfg.run.max_staleness == staleness and cfg.run.seed == 2 and cfg.run.steps == 40
    assert cfg.world.generator.dtype == "bfloat16" and cfg.model.dtype == "float32"
    assert cfg.world.generator.ranks == 1 and cfg.world.trainer.ranks == 1
    for key, value in bench.CONFIGS[name].items():
        assert getattr(cfg.algorithm, key) == value, key
    # the final policy only, greedy, on the examples asked for
    assert (cfg.eval.every_steps, cfg.eval.before_training, cfg.eval.samples, cfg.eval.examples) == (40, False, 0, 100)
    assert cfg.model.path == str(root / "sft")


def test_the_configurations_are_the_options_docs_name():
    assert bench.CONFIGS["ppo"]["clip_eps_high"] == 0.28 and bench.CONFIGS["ppo"]["loss"] == "grpo"
    assert bench.CONFIGS["tis"]["loss"] != "aipo"  # refused there: AIPO carries its own weight
    proximal = {bench.CONFIGS[c].get("proximal") for c in ("decoupled", "decoupled_loglinear")}
    assert proximal == {"recompute", "loglinear"}


def test_the_dynamic_arm_adds_dynamic_sampling_and_eval_every_is_kept(root, tmp_path):
    run = bench.Run("aipo", 1, 0, dynamic=True)
    extra = bench.overrides_for(run, root, tmp_path, 250, "bfloat16", 500, 25)
    assert extra["rollout"] == {"dynamic_sampling": {"enabled": True}}
    assert extra["eval"]["every_steps"] == 25
    assert "rollout" not in bench.overrides_for(bench.Run("aipo", 1, 0), root, tmp_path, 250, "bfloat16", 500, 0)


def test_rolling_mean_and_steps_to_reach():
    assert bench.rolling([0, 1, 2, 3], window=2) == [0, 0.5, 1.5, 2.5]
    curve = [[1, 0.1], [2, 0.3], [3, 0.2], [4, 0.5]]
    assert bench.steps_to_reach(curve, 0.3) == 2
    assert bench.steps_to_reach(curve, 0.45) == 4
    assert bench.steps_to_reach(curve, 0.6) is None


def write_run(run_dir, rewards, evals, trainer_extra=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = {"logp_mismatch_mean": 0.01, **(trainer_extra or {})}
    lines = [{"step": i, "reward_mean": r, "staleness_mean": 1.0, "trainer": trainer} for i, r in enumerate(rewards)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    (run_dir / "summary.json").write_text(json.dumps({"eval": evals}))


def test_a_runs_figures_come_from_its_files(tmp_path):
    rewards = [0.0] * 5 + [0.1 * i for i in range(10)]
    write_run(tmp_path / "r", rewards, [{"step": 7, "pass@1": 0.2}, {"step": 15, "pass@1": 0.31}], {"clip_frac": 0.5})
    f = bench.run_figures(tmp_path / "r", 12.5, tmp_path)
    assert f["pass1"] == 0.31 and f["pass1_source"] == "controller_eval"
    assert f["train_reward"] == pytest.approx(0.45)  # the last 10 steps
    assert f["steps"] == 15 and f["wall_s"] == 12.5 and f["staleness_mean"] == 1.0
    assert f["diagnostics"] == {"logp_mismatch_mean": pytest.approx(0.01), "clip_frac": pytest.approx(0.5)}
    assert f["reward_curve"][-1] == [15, pytest.approx(0.45)] and f["eval_curve"] == [[7, 0.2], [15, 0.31]]
    assert f["reward_curve"][0] == [10, pytest.approx(0.1)]  # from the first full 10-step window


def test_a_dynamic_runs_reward_counts_the_dropped_groups_too(tmp_path):
    """Its reward_mean leaves the all-equal groups out; the figure compared is over every group."""
    write_run(tmp_path / "r", [0.9] * 12, [{"step": 12, "pass@1": 0.3}])
    metrics = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    lines = [{**json.loads(m), "dynamic_sampling": {"reward_mean_all": 0.4}} for m in metrics]
    (tmp_path / "r" / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    f = bench.run_figures(tmp_path / "r", 1.0, tmp_path)
    assert f["train_reward"] == pytest.approx(0.4)
    assert f["reward_curve"][-1] == [12, pytest.approx(0.4)]


def figures(pass1, reward, wall=100.0, steps=250, curve=None, evals=None):
    return {
        "pass1": pass1,
        "pass1_source": "controller_eval",
        "train_reward": reward,
        "wall_s": wall,
        "steps": steps,
        "staleness_mean": 1.0,
        "diagnostics": {"clip_frac": 0.0},
        "reward_curve": curve or [],
        "eval_curve": evals or [],
    }


def test_a_configuration_line_has_medians_and_spread_over_seeds():
    args = bench.parse_args(["--configs", "ppo", "--staleness", "4"])
    results = [(0, figures(0.30, 0.40, 90)), (1, figures(0.36, 0.44, 110)), (2, figures(0.32, 0.41, 100))]
    line = json.loads(json.dumps(bench.summarise("ppo", 4, results, args)))
    assert line["config"] == "ppo" and line["max_staleness"] == 4 and line["seeds"] == [0, 1, 2]
    assert line["pass1"] == {"median": 0.32, "min": 0.30, "max": 0.36}
    assert line["train_reward_last10"] == {"median": 0.41, "min": 0.40, "max": 0.44}
    assert line["wall_s"]["median"] == 100.0 and line["steps"] == 250
    assert line["algorithm"] == bench.CONFIGS["ppo"] and line["generator_dtype"] == "bfloat16"


def test_the_dynamic_line_counts_steps_to_the_plain_runs_final_reward():
    args = bench.parse_args(["--configs", "aipo", "--dynamic", "aipo", "--eval-every", "2"])
    plain = {
        0: figures(0.3, 0.5, curve=[[1, 0.2], [2, 0.4], [3, 0.5]], evals=[[2, 0.25], [3, 0.3]]),
        1: figures(0.3, 0.6, curve=[[1, 0.2], [2, 0.5], [3, 0.6]], evals=[[2, 0.3], [3, 0.3]]),
    }
    dynamic = {
        0: figures(0.35, 0.55, curve=[[1, 0.5], [2, 0.5], [3, 0.55]], evals=[[2, 0.3], [3, 0.35]]),
        1: figures(0.2, 0.5, curve=[[1, 0.3], [2, 0.4], [3, 0.5]], evals=[[2, 0.1], [3, 0.2]]),
    }
    line = json.loads(json.dumps(bench.summarise_dynamic("aipo", 1, plain, dynamic, args)))
    reward = line["steps_to_reward"]
    assert reward["per_seed"]["0"] == {"target": 0.5, "plain": 3, "dynamic": 1}
    assert reward["per_seed"]["1"]["dynamic"] is None and reward["dynamic_not_reached"] == 1
    assert (reward["plain_median"], reward["dynamic_median"]) == (3, 1)  # seeds where both reach it
    assert line["steps_to_pass1"]["per_seed"]["0"] == {"target": 0.3, "plain": 3, "dynamic": 2}
    assert line["dynamic_pass1"]["median"] == pytest.approx(0.275)


def test_a_finished_run_is_reused_and_a_changed_one_runs_again(root, tmp_path, monkeypatch):
    """A grid stopped half way goes on: a point finished with the same overrides is read back;
    other overrides, or --fresh, run it again."""
    jobs = []

    def fake_job(cfg, timeout_s=None, quiet=False):
        run_dir = cfg.parent
        write_run(run_dir, [0.1 * i for i in range(12)], [{"step": 12, "pass@1": 0.3}])
        jobs.append(run_dir.name)
        return 42.0

    monkeypatch.setattr(bench.recipe, "run_job", fake_job)
    out = tmp_path / "out"
    run = bench.Run("aipo", 1, 0)
    args = bench.parse_args(["--configs", "aipo", "--steps", "12"])
    first = bench.run_one(run, root, out, args)
    again = bench.run_one(run, root, out, args)
    assert jobs == [run.name] and again["wall_s"] == first["wall_s"] == 42.0
    bench.run_one(run, root, out, bench.parse_args(["--configs", "aipo", "--steps", "13"]))
    bench.run_one(run, root, out, bench.parse_args(["--configs", "aipo", "--steps", "13", "--fresh"]))
    assert jobs == [run.name] * 3
