"""Models and data files named by Hub name, found in a local Hugging Face cache (roles.hub_cache).

Each test builds a cache folder in tmp_path in the layout huggingface_hub writes
(support.hub_cache) and points huggingface_hub at it; every socket call is refused and
recorded, so a look-up that reached for the network fails the test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from launch import cli, config
from launch.config import ConfigError
from roles import hub_cache
from roles.models import ModelConfig
from roles.tasks import build_task, task_section
from support.hub_cache import cache_repo, folder_files
from support.mpi_helpers import REPO

pytestmark = pytest.mark.timeout(120)

C1, C2 = "1" * 40, "2" * 40  # two commits of one repo
GSM_TRAIN = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(5)]
GSM_TEST = [{"question": "What is 7 + 7?", "answer": "#### 14"}]


def parquet(rows: list[dict]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue().to_pybytes()


@pytest.fixture(autouse=True)
def network(monkeypatch) -> list:
    """Every attempt to open a connection or resolve a host, refused and recorded."""
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("the network is off in these tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield attempts
    assert attempts == [], f"the network was reached for: {attempts}"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty Hub cache folder that huggingface_hub (and so roles.hub_cache) uses."""
    from huggingface_hub import constants

    folder = tmp_path / "hf" / "hub"
    folder.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # local_files_only alone must suffice
    return folder


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> dict[str, bytes]:
    """The files save_pretrained writes for tests/support/tiny_models.py's tiny Llama."""
    from support.tiny_models import tiny_llama

    out = tmp_path_factory.mktemp("tiny")
    tiny_llama().save_pretrained(out)
    return folder_files(out)


@pytest.fixture
def gsm8k(cache):
    """openai/gsm8k laid out as on the Hub: main/ and socratic/ configs, one shard per split."""
    files = {
        "README.md": b"# gsm8k\n",
        "main/train-00000-of-00001.parquet": parquet(GSM_TRAIN),
        "main/test-00000-of-00001.parquet": parquet(GSM_TEST),
        "socratic/train-00000-of-00001.parquet": parquet(GSM_TRAIN[:2]),
    }
    return cache_repo(cache, "openai/gsm8k", files, kind="dataset")


# ------------------------------------------------------------------------------- models


def test_the_layout_written_is_the_one_huggingface_hub_reads(cache, tiny_files):
    from huggingface_hub import scan_cache_dir

    cache_repo(cache, "tiny/llama", tiny_files, commit=C1, refs=("main", "v1"))
    (repo,) = scan_cache_dir(cache).repos
    assert (repo.repo_id, repo.repo_type) == ("tiny/llama", "model")
    (revision,) = repo.revisions
    assert revision.commit_hash == C1 and revision.refs == {"main", "v1"}
    assert {f.file_name for f in revision.files} >= {"config.json", "model.safetensors"}


def test_a_hub_name_becomes_its_cached_snapshot_which_loads(cache, tiny_files):
    import torch
    from transformers import AutoModelForCausalLM

    from support.tiny_models import tiny_llama

    snapshot = cache_repo(cache, "tiny/llama", tiny_files)
    path = hub_cache.model_folder("tiny/llama")
    assert path == str(snapshot)
    loaded = AutoModelForCausalLM.from_pretrained(path)  # through the snapshot's links to blobs
    for (name, a), (_, b) in zip(loaded.state_dict().items(), tiny_llama().state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_a_pinned_revision_is_that_revision(cache, tiny_files):
    old = cache_repo(cache, "tiny/llama", tiny_files, commit=C1, refs=("v1",))
    new = cache_repo(cache, "tiny/llama", {**tiny_files, "extra.txt": b"2"}, commit=C2, refs=("main",))
    assert hub_cache.model_folder("tiny/llama") == str(new)
    assert hub_cache.model_folder("tiny/llama@main") == str(new)
    assert hub_cache.model_folder("tiny/llama@v1") == str(old)
    assert hub_cache.model_folder(f"tiny/llama@{C1}") == str(old)
    with pytest.raises(ValueError) as info:
        hub_cache.model_folder("tiny/llama@v9")
    text = str(info.value)
    assert "revision v9" in text and "cached: main, v1" in text
    assert "`hf download tiny/llama --revision v9`" in text


def test_a_name_not_in_the_cache_says_which_where_and_how_to_fetch_it(cache, network):
    with pytest.raises(ValueError) as info:
        hub_cache.model_folder("nobody/missing-model")
    text = str(info.value)
    assert "'nobody/missing-model' is no local folder" in text
    assert str(cache) in text
    assert "`hf download nobody/missing-model`" in text
    assert network == []


def test_a_local_folder_wins_over_the_hub_name_it_looks_like(cache, tiny_files, tmp_path, monkeypatch):
    cache_repo(cache, "tiny/llama", tiny_files)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny" / "llama").mkdir(parents=True)
    (tmp_path / "tiny" / "llama" / "config.json").write_text("{}")
    assert hub_cache.model_folder("tiny/llama") == "tiny/llama"


@pytest.mark.parametrize("value", ["/no/such/folder", "models/a/b", "./tiny/llama", "no-slash", "a b/c", "a/b c"])
def test_what_is_no_hub_name_is_left_to_the_folder_checks(cache, value):
    assert hub_cache.hub_name(value) is None
    assert hub_cache.model_folder(value) == value


def test_the_role_map_sees_and_records_the_snapshot_so_a_resume_compares_equal(cache, tiny_files, base_config):
    import yaml

    snapshot = cache_repo(cache, "tiny/llama", tiny_files)
    base_config["model"]["path"] = "tiny/llama"
    cfg = config.parse(base_config)
    assert cfg.model.path == str(snapshot)
    # config.yaml and checkpoints record the snapshot folder; a resume compares the model
    # section of the run's role map (the user's name, resolved again) with it: equal.
    recorded = yaml.safe_load(yaml.safe_dump(cfg.model_dump(mode="json")))["model"]
    assert recorded["path"] == str(snapshot)
    again = config.parse(base_config).model_dump(mode="json")["model"]
    assert again == recorded == ModelConfig.model_validate(recorded).model_dump(mode="json")


def test_a_missing_model_is_exit_2_naming_the_field(cache, base_config, write_config, capsys):
    base_config["model"]["path"] = "nobody/missing-model"
    with pytest.raises(SystemExit) as info:
        cli.main(["check", str(write_config(base_config))])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "model.path: 'nobody/missing-model' is no local folder" in err
    assert "hf download nobody/missing-model" in err


def test_the_critic_and_a_reward_model_take_hub_names(cache, tiny_files):
    from roles.rewards.learned.reward_model import RewardModelConfig
    from roles.sections.critic import CriticConfig

    policy = cache_repo(cache, "tiny/llama", tiny_files)
    assert CriticConfig.model_validate({"path": "tiny/llama"}).path == str(policy)
    assert CriticConfig.model_validate({}).path is None
    scorer = {"architectures": ["LlamaForSequenceClassification"], "model_type": "llama", "num_labels": 1}
    rm = cache_repo(cache, "tiny/rm", {"config.json": json.dumps(scorer).encode()})
    assert RewardModelConfig.model_validate({"path": "tiny/rm"}).path == str(rm)
    with pytest.raises(ValueError, match="hf download nobody/rm"):
        RewardModelConfig.model_validate({"path": "nobody/rm"})


def test_the_cache_comes_from_hf_home_and_hf_hub_cache(tmp_path, tiny_files):
    home_snapshot = cache_repo(tmp_path / "home" / "hub", "tiny/llama", tiny_files, commit=C1)
    other_snapshot = cache_repo(tmp_path / "other", "tiny/llama", tiny_files, commit=C2)
    code = "from roles.hub_cache import model_folder; print(model_folder('tiny/llama'))"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(PYTHONPATH=str(REPO), HF_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    for extra, expected in [({}, home_snapshot), ({"HF_HUB_CACHE": str(tmp_path / "other")}, other_snapshot)]:
        run = subprocess.run(
            [sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == str(expected)


def test_the_network_guard_catches_an_online_look_up(cache, network):
    """The guard is real: without local_files_only, huggingface_hub reaches for the Hub."""
    from huggingface_hub import snapshot_download

    with pytest.raises(Exception):  # noqa: B017 - whatever the library makes of a refused socket
        snapshot_download("nobody/missing-model", cache_dir=str(cache))
    assert network, "no network attempt was seen"
    network.clear()


# -------------------------------------------------------------------------- data files


def gsm8k_task(**files):
    return task_section({"name": "gsm8k", **files})


def test_hub_data_files_become_the_cached_files_the_task_reads(gsm8k):
    cfg = gsm8k_task(
        train_files="hf://datasets/openai/gsm8k/main/train-*.parquet",
        eval_files=["hf://datasets/openai/gsm8k/main/test-00000-of-00001.parquet"],
    )
    assert cfg.train_files == [str(gsm8k / "main/train-00000-of-00001.parquet")]
    assert cfg.eval_files == [str(gsm8k / "main/test-00000-of-00001.parquet")]
    task = build_task(cfg)
    assert len(task.examples("train")) == len(GSM_TRAIN) and len(task.examples("eval")) == len(GSM_TEST)


def test_a_pattern_takes_every_shard_in_path_order_and_a_revision_may_be_pinned(cache):
    files = {f"data/train-0000{i}-of-00003.parquet": parquet(GSM_TRAIN[i : i + 1]) for i in (2, 0, 1)}
    old = cache_repo(cache, "someone/shards", files, kind="dataset", commit=C1, refs=("v1",))
    cache_repo(cache, "someone/shards", {"data/train.jsonl": b"{}\n"}, kind="dataset", commit=C2)
    cfg = gsm8k_task(train_files="hf://datasets/someone/shards@v1/data/train-*.parquet")
    assert cfg.train_files == [str(old / f"data/train-0000{i}-of-00003.parquet") for i in range(3)]
    assert [e.id for e in build_task(cfg).examples("train")] == [0, 1, 2]
    newest = gsm8k_task(train_files=["hf://datasets/someone/shards/data/train.jsonl"])
    assert "snapshots/" + C2 in newest.train_files[0]


@pytest.mark.parametrize(
    "value,expected",
    [
        # a pattern that matches nothing: the cached data files listed, and how to fetch more
        (
            "hf://datasets/openai/gsm8k/main/validation-*.parquet",
            [
                "no file of the cached snapshot",
                "main/test-00000-of-00001.parquet",
                "--repo-type dataset --include 'main/validation-*.parquet'",
            ],
        ),
        # a whole dataset: which files to name
        ("hf://datasets/openai/gsm8k", ["names a whole dataset", "socratic/train-00000-of-00001.parquet"]),
        # a dataset not in the cache
        ("hf://datasets/nobody/data/train.jsonl", ["holds no dataset nobody/data", "hf download nobody/data"]),
        ("hf://datasets/openai/gsm8k@v7/main/train-*.parquet", ["at revision v7", "cached: main"]),
        # the name alone: the URI form that names its files
        ("openai/gsm8k", ["no such file", "hf://datasets/openai/gsm8k/<path or pattern>", "main/train-00000"]),
    ],
)
def test_a_data_file_not_found_in_the_cache_says_why(gsm8k, value, expected):
    with pytest.raises(ValueError) as info:
        gsm8k_task(train_files=[value])
    text = str(info.value)
    for part in expected:
        assert part in text, text


def test_a_missing_hub_data_file_is_exit_2_naming_the_field(gsm8k, base_config):
    base_config["task"] = {"name": "gsm8k", "train_files": ["hf://datasets/nobody/data/train.jsonl"]}
    with pytest.raises(ConfigError, match=r"task\.train_files: \[0\] 'hf://datasets/nobody/data/train.jsonl'"):
        config.parse(base_config)


def test_a_local_data_file_wins_and_stays_as_written(gsm8k, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "openai").mkdir()
    pq.write_table(pa.Table.from_pylist(GSM_TRAIN), tmp_path / "openai" / "gsm8k.parquet")
    assert gsm8k_task(train_files="openai/gsm8k.parquet").train_files == ["openai/gsm8k.parquet"]
