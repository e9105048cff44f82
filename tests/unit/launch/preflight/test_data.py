"""The role map's task, reward and eval sections: each validated by its component's own Config.

And the data step (``launch.preflight.data``, also run by ``mpirl check``): files read, prompts
rendered, and every problem with them refused before any work, with the field named.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

from launch import config
from launch.preflight.data import prepare_data
from support.model_folders import write_placeholder_weights
from support.mpi_helpers import REPO


def parse(base, **sections):
    raw = copy.deepcopy(base)
    raw.update(sections)
    return config.parse(raw)


def refused(base, match, **sections):
    with pytest.raises(config.ConfigError, match=match):
        parse(base, **sections)


@pytest.fixture
def gsm8k_files(tmp_path):
    rows = [
        {"question": f"Ann has {i} pens and buys 2 more. How many pens?", "answer": f"{i}+2={i + 2}\n#### {i + 2}"}
        for i in range(10)
    ]
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[:7]))
    test.write_text("".join(json.dumps(r) + "\n" for r in rows[7:]))
    return train, test


@pytest.fixture(autouse=True)
def _plugins_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests"))


@pytest.fixture
def bpe_config(base_config, tmp_path):
    """base_config over a model folder whose tokenizer is a byte-level BPE with a chat template."""
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

    d = tmp_path / "bpe_model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 256}))
    write_placeholder_weights(d)
    save_bpe_chat_tokenizer(d, ["Ann has 3 pens and buys 2 more. How many pens?"] * 4, vocab_size=300)
    raw = copy.deepcopy(base_config)
    raw["model"]["path"] = str(d)
    return raw


# ----------------------------------------------------------------------------- task


def test_a_task_must_be_named_and_brings_its_reward(base_config):
    cfg = parse(base_config)
    assert cfg.task.name == "arith" and cfg.task.max_operand == 20
    assert [c.name for c in cfg.reward.components] == ["arith_exact"]
    raw = copy.deepcopy(base_config)
    del raw["task"]
    with pytest.raises(config.ConfigError, match=r"task: required but missing"):
        config.parse(raw)
    refused(
        base_config,
        r"task\.name: required but missing \(a built-in task: arith, dataset, gsm8k, math",
        task={"max_operand": 3},
    )
    refused(base_config, r"task: a mapping", task="gsm8k")


def test_task_sections_are_checked_by_the_tasks_own_config(base_config, gsm8k_files):
    train, test = map(str, gsm8k_files)
    refused(base_config, r"task\.name: unknown task 'gsm9k'", task={"name": "gsm9k"})
    refused(
        base_config, r"task\.max_operand: unknown key", task={"name": "gsm8k", "train_files": [train], "max_operand": 3}
    )
    refused(base_config, r"task\.train_files: required", task={"name": "gsm8k"})
    refused(base_config, r"task\.train_files\[0\].*no_such", task={"name": "gsm8k", "train_files": ["no_such.jsonl"]})
    refused(base_config, r"task\.max_operand", task={"name": "arith", "max_operand": "20"})
    cfg = parse(base_config, task={"name": "gsm8k", "train_files": train, "eval_files": [test]})
    assert cfg.task.train_files == [train] and cfg.reward.components[0].name == "gsm8k"  # its default
    assert parse(base_config, task={"name": "math", "train_files": [train]}).reward.components[0].name == "math_verify"


def test_a_user_task_is_a_plugin_with_its_own_options(base_config):
    cfg = parse(base_config, task={"name": "support.task_plugins:Countdown", "size": 4})
    assert cfg.task.size == 4 and cfg.reward.components[0].name == "exact"
    refused(base_config, r"task\.size", task={"name": "support.task_plugins:Countdown", "size": 0})
    refused(base_config, r"task\.name: .*not a subclass", task={"name": "support.task_plugins:NotATask"})
    refused(base_config, r"task\.name: cannot import module 'no_such_module'", task={"name": "no_such_module:T"})


def test_a_task_without_a_default_reward_needs_one_named(base_config, gsm8k_files):
    task = {"name": "dataset", "train_files": [str(gsm8k_files[0])], "prompt_key": "question", "answer_key": "answer"}
    refused(base_config, r"reward: task 'dataset' has no default reward", task=task)
    assert parse(base_config, task=task, reward="exact").reward.components[0].name == "exact"


# ---------------------------------------------------------------------------- reward


def test_reward_forms(base_config):
    assert [c.name for c in parse(base_config, reward="exact").reward.components] == ["exact"]
    one = parse(base_config, reward={"name": "exact", "strip": False, "timeout_s": 3}).reward
    assert one.timeout_s == 3 and one.components[0].options == {"strip": False}
    many = parse(base_config, reward=[{"name": "exact"}, {"name": "format", "weight": 0.1, "boxed": True}]).reward
    assert [(c.name, c.weight) for c in many.components] == [("exact", 1.0), ("format", 0.1)]
    listed = parse(base_config, reward={"components": ["exact", {"name": "format", "tag": "answer"}], "workers": 2})
    assert listed.reward.workers == 2 and listed.reward.components[1].options == {"tag": "answer"}


def test_reward_mistakes_are_named(base_config):
    refused(base_config, r"reward\.components\[0\]\.name: unknown reward 'exakt'", reward="exakt")
    refused(base_config, r"reward\.components\[0\]\.strip", reward={"name": "exact", "strip": "yes"})
    refused(base_config, r"reward\.components\[0\]\.color: unknown key", reward={"name": "exact", "color": 1})
    refused(base_config, r"reward\.components\[1\]", reward=[{"name": "exact"}, {"name": "format"}])  # needs a check
    refused(base_config, r"takes no options", reward={"name": "support.reward_plugins:length", "x": 1})
    refused(base_config, r"logged as .exact.", reward=["exact", "exact"])
    refused(base_config, r"cannot be logged as .correct.", reward=[{"name": "exact", "label": "correct"}])
    refused(base_config, r"reward\.timeout_s", reward={"name": "exact", "timeout_s": 0})
    assert (
        parse(base_config, reward=["exact", {"name": "exact", "label": "exact2"}]).reward.components[1].logged_as
        == "exact2"
    )


def test_a_reward_that_cannot_be_called_as_the_scorer_calls_it_is_refused_by_name(base_config):
    wrong = {
        "takes_one": r"reward 'support.reward_plugins:takes_one' must accept \(response, example\).*\(response\)",
        "takes_three": r".*must accept \(response, example\).*extra",
        "NoCall": r"reward class 'support.reward_plugins:NoCall' has no __call__",
        "CallTakesOne": r"'support.reward_plugins:CallTakesOne'.__call__ must accept \(self, response, example\)",
        "InitTakesTwo": r"reward class 'support.reward_plugins:InitTakesTwo' must accept no arguments",
    }
    for name, message in wrong.items():
        refused(base_config, r"reward\.components\[0\]\.name: " + message, reward=f"support.reward_plugins:{name}")
    for name in ("Fine", "with_defaults", "length"):
        assert parse(base_config, reward=f"support.reward_plugins:{name}").reward.components[0].name.endswith(name)


def test_a_task_class_of_the_wrong_shape_is_refused_by_name(base_config):
    refused(
        base_config,
        r"task\.name: task 'support.task_plugins:InitTakesOnlyConfig' must accept \(config, seed\)",
        task={"name": "support.task_plugins:InitTakesOnlyConfig"},
    )
    refused(base_config, r"task\.name: .*its Config is not a subclass", task={"name": "support.task_plugins:BadConfig"})


def test_a_task_whose_data_loading_raises_is_a_config_error_naming_it(base_config, tmp_path):
    from launch.config import ConfigError
    from launch.preflight.data import prepare_data

    cfg = parse(base_config, task={"name": "support.task_plugins:RaisesInInit"}, reward="exact")
    match = r"task: task .support.task_plugins:RaisesInInit. failed: KeyError: .question. \(task_plugins\.py:\d+\)"
    with pytest.raises(ConfigError, match=match):
        prepare_data(cfg)


# ----------------------------------------------------------------------------- eval


def test_eval_section(base_config):
    cfg = parse(base_config)
    assert not cfg.eval.enabled
    cfg = parse(base_config, eval={"every_steps": 5, "samples": 4, "examples": 50})
    assert cfg.eval.enabled and cfg.eval.samples == 4
    assert parse(base_config, eval={"before_training": True}).eval.enabled
    refused(base_config, r"eval\.every_steps", eval={"every_steps": -1})
    refused(base_config, r"eval\.examples", eval={"examples": 0})
    refused(base_config, r"eval\.temperature", eval={"temperature": 0})


# ------------------------------------------------------------------------ the data


def test_data_is_prepared_with_counts(bpe_config, gsm8k_files):
    from transformers import AutoTokenizer

    train, test = map(str, gsm8k_files)
    cfg = parse(
        bpe_config,
        task={"name": "gsm8k", "train_files": [train], "eval_files": [test]},
        eval={"every_steps": 2, "examples": 2},
    )
    data = prepare_data(cfg)
    assert len(data.train_prompts) == 7 and list(data.eval_prompts) == [7, 8]  # the first 2 eval examples
    assert data.stats["prompts_too_long"] == 0 and data.stats["train_examples"] == 7
    tok = AutoTokenizer.from_pretrained(cfg.model.path)
    text = tok.decode(data.train_prompts[0].tolist())  # rendered with the chat template
    assert text.startswith("<|im_start|>user\nAnn has 0 pens") and text.endswith("<|im_start|>assistant\n")


def test_the_data_line_says_when_prompts_go_as_plain_text_for_want_of_a_template(bpe_config, base_config):
    with_template = prepare_data(parse(bpe_config))
    assert not with_template.untemplated and "plain text" not in with_template.describe("arith")
    plain = prepare_data(parse(base_config))  # the arith demo's character tokenizer has no template
    assert plain.untemplated
    assert plain.describe("arith").endswith(
        "; prompts as plain text (the tokenizer at model.path has no chat template)"
    )
    chosen = prepare_data(parse(base_config, task={"name": "arith", "chat_template": False}))
    assert not chosen.untemplated  # asked for: nothing to say


def test_the_data_line_says_when_the_eval_split_goes_unused(bpe_config, gsm8k_files):
    train, test = map(str, gsm8k_files)
    task = {"name": "gsm8k", "train_files": [train], "eval_files": [test]}
    off = prepare_data(parse(bpe_config, task=task))
    assert off.stats["eval_examples"] == 0 and off.eval_split == 3
    assert off.describe("gsm8k").startswith(
        "task gsm8k: 7 train examples; the 3 eval examples are read but unused: evaluation is off (eval.every_steps 0)"
    )
    on = prepare_data(parse(bpe_config, task=task, eval={"every_steps": 2, "examples": 2}))
    assert on.describe("gsm8k").startswith("task gsm8k: 7 train / 2 eval examples")
    none = prepare_data(parse(bpe_config, task={"name": "gsm8k", "train_files": [train]}))
    assert none.describe("gsm8k").startswith("task gsm8k: 7 train / 0 eval examples")


def test_the_data_line_counts_the_rows_skipped_per_file(bpe_config, gsm8k_files, tmp_path):
    train, test = map(str, gsm8k_files)
    gaps = tmp_path / "gaps.jsonl"
    rows = [{"question": None, "answer": "#### 1"}, {"question": "q", "answer": "1"}, {"question": "q", "answer": None}]
    gaps.write_text("".join(json.dumps(r) + "\n" for r in rows + [{"question": "q", "answer": "#### 2"}] + rows[:1]))
    task = {"name": "gsm8k", "train_files": [train, str(gaps)], "eval_files": [test]}
    data = prepare_data(parse(bpe_config, task=task))
    assert data.describe("gsm8k").endswith(
        "; 4 unusable rows skipped (task.train_files[1]: 2 with an empty 'question', "
        "1 with no '#### <answer>' in 'answer', 1 with an empty 'answer')"
    )
    clean = prepare_data(parse(bpe_config, task={"name": "gsm8k", "train_files": [train]}))
    assert "skipped" not in clean.describe("gsm8k")


def test_a_prompt_the_tokenizer_cannot_encode_is_named(base_config, gsm8k_files):
    cfg = parse(base_config, task={"name": "gsm8k", "train_files": [str(gsm8k_files[0])]})  # char tokenizer
    with pytest.raises(config.ConfigError, match=r"cannot encode the prompt of example 0"):
        prepare_data(cfg)


def test_data_problems_are_config_errors(bpe_config, gsm8k_files, tmp_path):
    base_config = bpe_config
    train, _ = map(str, gsm8k_files)
    with pytest.raises(config.ConfigError, match=r"every one of the 7 training prompts is longer than 10 tokens"):
        prepare_data(parse(base_config, task={"name": "gsm8k", "train_files": [train], "max_prompt_tokens": 10}))
    with pytest.raises(config.ConfigError, match=r"eval: .*no eval examples"):
        prepare_data(parse(base_config, task={"name": "gsm8k", "train_files": [train]}, eval={"every_steps": 1}))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"q": "x", "answer": "#### 1"}) + "\n")
    with pytest.raises(config.ConfigError, match=r"task\.train_files\[0\].*bad\.jsonl.*question"):
        prepare_data(parse(base_config, task={"name": "gsm8k", "train_files": [str(bad)]}))


def test_prompts_too_long_for_an_eval_response_name_eval_max_new_tokens(bpe_config, gsm8k_files):
    # The default limit leaves room for the longest response, here eval's: the hint once named
    # rollout.max_new_tokens, whose lowering would change nothing.
    train, test = map(str, gsm8k_files)
    task = {"name": "gsm8k", "train_files": [train], "eval_files": [test]}
    context = parse(bpe_config, task=task).model.context_length()
    cfg = parse(bpe_config, task=task, eval={"every_steps": 1, "max_new_tokens": context - 2})
    with pytest.raises(config.ConfigError, match=rf"or lower eval\.max_new_tokens \({context - 2}\) if the model"):
        prepare_data(cfg)


def test_long_prompts_are_left_out_and_counted(base_config):
    cfg = parse(base_config, task={"name": "arith", "max_prompt_tokens": 5})
    data = prepare_data(cfg)
    # "<bos>a+b=": 5 tokens when both operands have one digit, 6 or 7 otherwise.
    assert data.stats["prompts_too_long"] > 0 and data.train_prompts
    assert all(len(ids) <= 5 for ids in data.train_prompts.values())
    assert data.stats["prompts_too_long"] + len(data.train_prompts) == 320


def _check(path):
    return subprocess.run(
        [sys.executable, "-m", "launch.cli", "check", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "PATH": "/usr/bin:/bin"},
    )


def test_mpirl_check_reads_the_data(bpe_config, gsm8k_files, write_config, tmp_path):
    train, test = map(str, gsm8k_files)
    raw = copy.deepcopy(bpe_config)
    raw["task"] = {"name": "gsm8k", "train_files": [train], "eval_files": [test]}
    out = _check(write_config(raw))
    assert out.returncode == 0, out.stderr
    # eval is off: the eval file is read (and checked) but not used, and the line says so
    assert "task gsm8k: 7 train examples; the 3 eval examples are read but unused: evaluation is off" in out.stdout
    raw["task"]["train_files"] = [str(tmp_path / "gone.parquet")]
    out = _check(write_config(raw))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "task.train_files[0]" in out.stderr and "gone.parquet" in out.stderr


def test_a_task_whose_ids_repeat_across_splits_is_refused_naming_them(base_config):
    from launch.config import ConfigError
    from launch.preflight.data import prepare_data

    cfg = parse(base_config, task={"name": "support.task_plugins:RepeatsIds", "size": 4}, reward="exact")
    match = r"example ids must be unique across both splits; 3 repeats: 0 \(again in eval\), 1 \(again in eval\), 2"
    with pytest.raises(ConfigError, match=match):
        prepare_data(cfg)


@pytest.mark.parametrize(
    "task, split, example, field",
    [
        ("HugeId", "train", "1180591620717411303424", r"its id 1180591620717411303424 does not fit in 64 bits"),
        ("StrIds", "train", "'0'", r"its id is a str, not an int"),
        (
            "UnpicklableMetadata",
            "eval",
            "11",
            r"its metadata\['steps'\] holds a builtins\.generator, which cannot be pickled",
        ),
    ],
)
def test_an_example_the_messages_cannot_carry_is_refused_naming_task_example_and_field(
    base_config, task, split, example, field
):
    """Found at the first batch, or by the reward rank mid-run, before; now by the preflight."""
    from launch.config import ConfigError
    from launch.preflight.data import prepare_data

    cfg = parse(base_config, task={"name": f"support.task_plugins:{task}"}, reward="exact", eval={"every_steps": 2})
    match = rf"^task: task 'support.task_plugins:{task}', {split} example {example}: {field}"
    with pytest.raises(ConfigError, match=match):
        prepare_data(cfg)


def test_numpy_integer_ids_are_sent_as_ints(base_config):
    cfg = parse(base_config, task={"name": "support.task_plugins:NumpyIds"}, reward="exact", eval={"every_steps": 2})
    assert prepare_data(cfg).stats["train_examples"] == 10


@pytest.mark.parametrize(
    "example_id",
    [5, 2**64 - 1, -(2**63), 2**64, -(2**63) - 1, 2**70, True, "7", 3.0, None]
    + [np.int64(3), np.int64(-(2**63)), np.uint64(2**64 - 1), np.bool_(True)],
)
def test_the_id_check_agrees_with_the_codec(example_id):
    """What the preflight accepts is exactly what a Rollout carries there and back."""
    from launch.preflight.data import _id_problem
    from roles.protocol import Rollout
    from transports import codec

    ids = np.zeros(1, np.int32)
    msg = Rollout(example_id, 0, 0, ids, [ids], [np.zeros(1, np.float32)], ["stop"], 0)
    try:
        carried = codec.decode(codec.encode(msg)).example_id == example_id
    except codec.CodecError:
        carried = False
    assert (_id_problem(example_id) is None) == carried
