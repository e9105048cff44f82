"""Role-map validation: every kind of mistake is one ConfigError whose text names the field."""

from __future__ import annotations

import copy
import itertools
import re

import pytest

from launch import config, preflight
from launch.config import ConfigError
from support.mpi_helpers import REPO


def mutate(cfg: dict, dotted: str, value) -> dict:
    """A copy of ``cfg`` with ``a.b.c`` set to ``value`` (or removed, for DELETE)."""
    out = copy.deepcopy(cfg)
    *parents, last = dotted.split(".")
    node = out
    for p in parents:
        if isinstance(node.get(p), int):  # world shorthand: ``generator: 1`` is ``{ranks: 1}``
            node[p] = {"ranks": node[p]}
        node = node.setdefault(p, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return out


DELETE = object()


def error_of(cfg: dict) -> str:
    with pytest.raises(ConfigError) as info:
        config.parse(cfg, "roles.yaml")
    text = str(info.value)
    assert text.startswith("roles.yaml: "), text  # the file is named
    assert "\n" not in text, f"one message, one line: {text!r}"
    return text


def test_shorthand_and_long_form_agree(base_config):
    short = config.parse(mutate(base_config, "world.generator", 2))
    long = config.parse(mutate(base_config, "world.generator", {"ranks": 2}))
    assert short.world == long.world and short.world.size == 5
    assert short.world.roles_by_rank()[1:3] == ["generator", "generator"]


def test_load_from_yaml_file(base_config, write_config):
    cfg = preflight.load(write_config(base_config))
    assert cfg.run.steps == base_config["run"]["steps"]


# ----------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    "dotted,where",
    [
        ("wrld", "wrld"),
        ("run.stepz", "run.stepz"),
        ("world.controler", "world.controler"),
        ("world.generator.engin", "world.generator.engin"),
        ("model.dtyp", "model.dtyp"),
        ("algorithm.rh0", "algorithm.rh0"),
    ],
)
def test_unknown_key(base_config, dotted, where):
    value = {"ranks": 1} if dotted.startswith("world.") and dotted.count(".") == 1 else 1
    text = error_of(mutate(base_config, dotted, value))
    assert f"{where}: unknown key" in text


# ------------------------------------------------------------------- wrong types


@pytest.mark.parametrize(
    "dotted,value,where",
    [
        ("run.steps", "ten", "run.steps"),
        ("rollout.temperature", "hot", "rollout.temperature"),
        ("world.generator", "two", "world.generator"),
        ("world.generator.engine", "tensorrt", "world.generator.engine"),
        ("model.dtype", "int8", "model.dtype"),
        ("run.progress", "sometimes", "run.progress"),
        ("rollout", [1, 2], "rollout"),
        ("algorithm.loss", 3, "algorithm.loss"),
        # strict types: near misses are named, not coerced
        ("run.steps", True, "run.steps"),
        ("run.steps", 2.5, "run.steps"),
        ("run.steps", 3.0, "run.steps"),
        ("run.steps", "3", "run.steps"),
        ("world.generator.ranks", "2", "world.generator.ranks"),
        ("world.generator", True, "world.generator"),
        ("run.progress", 1, "run.progress"),
        ("run.progress", "yes", "run.progress"),
        ("algorithm.lr", "3e-5x", "algorithm.lr"),
    ],
)
def test_wrong_type(base_config, dotted, value, where):
    text = error_of(mutate(base_config, dotted, value))
    assert f"{where}: " in text and repr(value) in text


def test_an_int_is_a_valid_float(base_config):
    cfg = config.parse(mutate(base_config, "rollout.temperature", 1))
    assert cfg.rollout.temperature == 1.0 and isinstance(cfg.rollout.temperature, float)


@pytest.mark.parametrize(
    "text,value", [("1e-5", 1e-5), ("3.0e-5", 3e-5), ("2E-4", 2e-4), ("+1e-3", 1e-3), (".5", 0.5), ("1", 1.0)]
)
def test_learning_rate_as_users_write_it_in_yaml(base_config, write_config, text, value):
    # PyYAML reads 1e-5 (no dot) as a string; the role-map loader reads it as a number
    path = write_config(mutate(base_config, "algorithm.lr", "PLACEHOLDER"))
    path.write_text(path.read_text().replace("PLACEHOLDER", text))
    assert preflight.load(path).algorithm.lr == pytest.approx(value)


# -------------------------------------------------------------- non-positive sizes


@pytest.mark.parametrize(
    "dotted,value,where",
    [
        ("run.steps", 0, "run.steps"),
        ("run.steps", -3, "run.steps"),
        ("world.reward", 0, "world.reward.ranks"),
        ("world.trainer", {"ranks": -1}, "world.trainer.ranks"),
        ("world.generator", {"ranks": 1, "tensor_parallel": 0}, "world.generator.tensor_parallel"),
        ("rollout.samples_per_prompt", 0, "rollout.samples_per_prompt"),
        ("rollout.prompts_per_step", -1, "rollout.prompts_per_step"),
        ("rollout.max_new_tokens", 0, "rollout.max_new_tokens"),
        ("algorithm.micro_batch", 0, "algorithm.micro_batch"),
        ("weights.bucket_mb", 0, "weights.bucket_mb"),
    ],
)
def test_non_positive_size(base_config, dotted, value, where):
    text = error_of(mutate(base_config, dotted, value))
    assert f"{where}: " in text, text


def test_kl_coef_is_a_grpo_option(base_config):
    text = error_of(mutate(base_config, "algorithm.kl_coef", 0.1))  # base loss: aipo
    assert "algorithm.kl_coef (0.1) applies to loss: grpo or ppo (AIPO has no KL term)" in text, text
    grpo = mutate(base_config, "algorithm.loss", "grpo")
    assert config.parse(mutate(grpo, "algorithm.kl_coef", 0.1)).algorithm.kl_coef == 0.1


def test_compile_is_a_vllm_option(base_config):
    text = error_of(mutate(base_config, "world.generator", {"ranks": 1, "compile": True}))
    assert "world.generator" in text and "compile applies to engine: vllm only" in text, text


def test_tensor_parallel_is_a_vllm_option(base_config):
    text = error_of(mutate(base_config, "world.generator", {"ranks": 1, "tensor_parallel": 2}))
    assert "world.generator" in text and "tensor_parallel (2) applies to engine: vllm only" in text, text


def test_compile_reaches_the_vllm_engine_config(base_config, monkeypatch):
    from roles.engines import vllm_engine

    seen = []
    monkeypatch.setattr(vllm_engine.VllmEngine, "__init__", lambda self, config: seen.append(config))
    for compile_ in (None, True, False):
        generator = {"ranks": 1, "engine": "vllm", "compile": compile_}
        cfg = config.parse(mutate(base_config, "world.generator", generator))
        vllm_engine.VllmEngine.from_config(cfg.world.generator, cfg.model, max_seqs=1)
        assert seen[-1].compile is compile_


@pytest.mark.parametrize(
    ("engine", "scheme", "message"),
    [
        ("vllm", "int8", "quantization 'int8' is the torch engine's"),
        ("torch", "fp8", "quantization 'fp8' is vLLM's"),
        ("torch", "int4", "world.generator.quantization"),
    ],
)
def test_each_engine_takes_only_its_own_quantization(base_config, engine, scheme, message):
    text = error_of(mutate(base_config, "world.generator", {"ranks": 1, "engine": engine, "quantization": scheme}))
    assert "world.generator" in text and message in text, text


def test_fp8_reaches_the_vllm_engine_config(base_config, monkeypatch):
    from roles.engines import vllm_engine

    seen = []
    monkeypatch.setattr(vllm_engine.VllmEngine, "__init__", lambda self, config: seen.append(config))
    cfg = config.parse(mutate(base_config, "world.generator", {"ranks": 1, "engine": "vllm", "quantization": "fp8"}))
    vllm_engine.VllmEngine.from_config(cfg.world.generator, cfg.model, max_seqs=1)
    assert seen[-1].quantization == "fp8"


def test_no_generator_or_trainer_names_the_world(base_config):
    text = error_of(mutate(base_config, "world.generator", 0))
    assert "world" in text and "generator" in text


# ---------------------------------------------------------------------- model path


def test_missing_model_section(base_config):
    assert "model: required but missing" in error_of(mutate(base_config, "model", DELETE))


def test_missing_model_path_key(base_config):
    assert "model.path: required but missing" in error_of(mutate(base_config, "model.path", DELETE))


def test_model_path_does_not_exist(base_config, tmp_path):
    missing = str(tmp_path / "no-such-model")
    text = error_of(mutate(base_config, "model.path", missing))
    assert "model.path: " in text and "no-such-model" in text


def test_model_path_without_config_json(base_config, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    text = error_of(mutate(base_config, "model.path", str(empty)))
    assert "model.path: " in text and "config.json" in text


def test_relative_model_path_is_taken_from_the_working_directory(base_config, dummy_model, monkeypatch):
    monkeypatch.chdir(dummy_model.parent)
    assert config.parse(mutate(base_config, "model.path", dummy_model.name)).model.path == dummy_model.name
    monkeypatch.chdir(dummy_model)
    assert "model.path: " in error_of(mutate(base_config, "model.path", dummy_model.name))


# ---------------------------------------------------------------------- controller


@pytest.mark.parametrize("value", [2, {"ranks": 3}])
def test_more_than_one_controller(base_config, value):
    text = error_of(mutate(base_config, "world.controller", value))
    assert "world.controller: " in text and "exactly 1 controller" in text


def test_zero_controllers(base_config):
    assert "world.controller" in error_of(mutate(base_config, "world.controller", 0))


# -------------------------------------------------------------------- the file


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just a string\n", ""])
def test_top_level_is_not_a_mapping(write_config, text):
    with pytest.raises(ConfigError, match="a role map is a YAML mapping"):
        preflight.load(write_config(text))


def test_errors_are_config_errors_not_pydantic(base_config):
    # Callers catch ConfigError (a ValueError) only; pydantic's type must not leak.
    with pytest.raises(ConfigError) as info:
        config.parse(mutate(base_config, "run.steps", 0))
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_colocated_mode_assigns_colocated_ranks(base_config):
    base_config["world"] = {"controller": 1, "generator": 0, "trainer": 0, "colocated": 2, "reward": 1}
    base_config["run"]["max_staleness"] = 0
    cfg = config.parse(base_config)
    assert cfg.world.roles_by_rank() == ["controller", "colocated", "colocated", "reward"]
    assert cfg.routes().train_role == cfg.routes().generate_role == "colocated"


def test_colocated_beside_generators_is_refused(base_config):
    base_config["world"]["colocated"] = 2
    with pytest.raises(ConfigError, match=r"world: colocated ranks generate and train themselves"):
        config.parse(base_config)


def test_colocated_must_be_synchronous(base_config):
    base_config["world"] = {"controller": 1, "generator": 0, "trainer": 0, "colocated": 2, "reward": 1}
    base_config["run"]["max_staleness"] = 1
    with pytest.raises(ConfigError, match=r"run.max_staleness: colocated ranks take turns"):
        config.parse(base_config)


def test_prompts_must_split_evenly_over_trainers(base_config):
    base_config["world"]["trainer"] = 3
    base_config["rollout"]["prompts_per_step"] = 4
    with pytest.raises(ConfigError, match=r"rollout.prompts_per_step \(4\) must divide evenly over the 3"):
        config.parse(base_config)


def test_one_sample_per_prompt_is_refused_as_learning_nothing(base_config):
    raw = copy.deepcopy(base_config)
    raw["rollout"]["samples_per_prompt"] = 1
    with pytest.raises(config.ConfigError, match=r"rollout.samples_per_prompt \(1\).*at least 2.*nothing is learned"):
        config.parse(raw)


def test_a_run_folder_that_cannot_be_written_is_a_config_error(base_config, tmp_path):
    from launch.run_folder import check_run_folder

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out, create in itertools.product([blocker, blocker / "run"], [True, False]):
        raw = copy.deepcopy(base_config)
        raw["run"]["out"] = str(out)
        with pytest.raises(config.ConfigError, match="run.out: .*is a file, not a folder"):
            check_run_folder(config.parse(raw), create=create)
    raw = copy.deepcopy(base_config)
    raw["run"]["out"] = str(tmp_path / "new" / "run")
    check_run_folder(config.parse(raw), create=False)
    assert not (tmp_path / "new").exists()  # mpirl check only looks
    assert check_run_folder(config.parse(raw)).is_dir()  # the launch creates it
    assert list((tmp_path / "new" / "run").iterdir()) == []  # the probe left nothing


def test_a_read_only_run_folder_is_refused_by_check_and_launch(base_config, tmp_path):
    """Root may write anywhere permissions allow, so the folder is a read-only mount, in a
    mount namespace of this test's own (``unshare -m``): gone when the test's process ends."""
    import shutil
    import subprocess
    import sys

    import yaml

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    ro = tmp_path / "ro"
    ro.mkdir()
    raw = copy.deepcopy(base_config)
    raw["run"]["out"] = str(ro / "run")
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    probe = (
        "import sys; from launch import config, preflight; from launch.run_folder import check_run_folder\n"
        "cfg = preflight.load(sys.argv[1])\n"
        "for create in (False, True):\n"
        "    try:\n"
        "        check_run_folder(cfg, create=create)\n"
        "        print('accepted')\n"
        "    except config.ConfigError as e:\n"
        "        print(e)\n"
    )
    script = f'mount -t tmpfs -o ro,size=1m tmpfs {ro} && exec {sys.executable} -c "$0" {cfg_path}'
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
    )
    if "mount" in done.stderr and done.returncode != 0:
        pytest.skip(f"cannot mount in a namespace here: {done.stderr.strip()[:200]}")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(lines) == 2, done.stdout
    assert re.search(r"run\.out: '.*/ro' is not writable by this user", lines[0]), lines[0]
    assert re.search(r"run\.out: cannot write in '.*/ro/run': Read-only file system", lines[1]), lines[1]
    assert not (ro / "run").exists()  # outside the namespace: nothing was created


def test_the_stall_bound_must_exceed_the_reward_timeout(base_config):
    raw = copy.deepcopy(base_config)
    raw["run"]["stall_timeout_s"] = 30
    raw["reward"] = {"name": "arith_exact", "timeout_s": 60}
    with pytest.raises(config.ConfigError, match=r"run.stall_timeout_s \(30\) must exceed reward.timeout_s \(60\)"):
        config.parse(raw)
    raw["run"]["stall_timeout_s"] = 0  # not watched
    assert config.parse(raw).run.stall_timeout_s == 0


def test_kv_cache_gib_is_a_vllm_option_and_reaches_the_engine(base_config, monkeypatch):
    text = error_of(mutate(base_config, "world.generator", {"ranks": 1, "kv_cache_gib": 4}))
    assert "world.generator" in text and "kv_cache_gib (4.0) applies to engine: vllm only" in text, text
    text = error_of(mutate(base_config, "world.generator", {"ranks": 1, "engine": "vllm", "kv_cache_gib": 0}))
    assert "world.generator.kv_cache_gib" in text, text
    from roles.engines import vllm_engine

    seen = []
    monkeypatch.setattr(vllm_engine.VllmEngine, "__init__", lambda self, config: seen.append(config))
    for gib in (None, 2.5):
        generator = {"ranks": 1, "engine": "vllm", "kv_cache_gib": gib}
        cfg = config.parse(mutate(base_config, "world.generator", generator))
        vllm_engine.VllmEngine.from_config(cfg.world.generator, cfg.model, max_seqs=1)
        assert seen[-1].kv_cache_gib == gib


@pytest.mark.parametrize("dotted", ["model.path", "task.train_files"])
def test_a_path_too_long_to_look_at_is_refused_naming_its_field(base_config, dotted):
    # Was: OSError "File name too long" out of Path.is_dir / Path.exists (found by fuzzing):
    # Python's path tests swallow "no such file", not ENAMETOOLONG.
    long = "a" * 5000
    if dotted == "model.path":
        text = error_of(mutate(base_config, dotted, long))
    else:
        text = error_of(mutate(base_config, "task", {"name": "gsm8k", "train_files": [long]}))
    assert dotted in text and "File name too long" in text, text
    assert len(text) < 1000, "the path is shortened in the message"


# ----------------------------------------------------------------- streamed rollouts


def test_streaming_needs_generator_ranks(base_config):
    base_config["world"] = {"controller": 1, "generator": 0, "trainer": 0, "colocated": 2, "reward": 1}
    base_config["run"]["max_staleness"] = 0
    base_config["rollout"]["mode"] = "stream"
    assert "rollout.mode: stream needs generator ranks" in error_of(base_config)


@pytest.mark.parametrize("mode, staleness", [("batch", 1), ("stream", 0)])
def test_oversampling_needs_streaming_and_room_to_carry_over(base_config, mode, staleness):
    base_config["rollout"].update(mode=mode, oversample=0.5)
    base_config["run"]["max_staleness"] = staleness
    assert "rollout.oversample (0.5) carries unfinished groups over" in error_of(base_config)


@pytest.mark.parametrize(
    "dotted, value, named",
    [
        ("rollout.mode", "streaming", "rollout.mode"),
        ("rollout.oversample", -0.1, "rollout.oversample"),
        ("world.generator.max_seqs", 0, "world.generator.max_seqs"),
        ("world.generator.inflight_kv", "drop", "world.generator.inflight_kv"),
    ],
)
def test_bad_streaming_settings_are_named(base_config, dotted, value, named):
    assert named in error_of(mutate(base_config, dotted, value))


def test_a_streaming_role_map_parses(base_config):
    base_config["rollout"].update(mode="stream", oversample=0.25, inflight_updates=False)
    base_config["run"]["max_staleness"] = 2
    base_config["world"]["generator"] = {"ranks": 1, "max_seqs": 32, "inflight_kv": "recompute"}
    cfg = config.parse(base_config)
    assert (cfg.rollout.mode, cfg.world.generator.max_seqs, cfg.world.generator.inflight_kv) == (
        "stream",
        32,
        "recompute",
    )
