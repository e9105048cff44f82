"""The GSM8K demo's chain with a real BPE chat tokenizer: prompt rendering, the tokenizer, the
synthetic problems and ``prepare`` (the tokenizer, the model over it and the generic SFT core
are tested in tests/unit/examples/toy/).

Everything is built in tmp_path (tokenizer, data, models): nothing is downloaded. Prompts
must come out of ``encode_prompts`` as exactly the ids ``apply_chat_template`` gives, since
the RL job and the warm start both rely on that.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest
from transformers import BatchEncoding

from examples.gsm8k import problems
from examples.toy.tiny_bpe import IM_END, IM_START
from roles.tasks.base import Example, TaskConfig, TaskDataError
from roles.tasks.prompts import encode_prompts, prompt_text
from support.chat_data import SMALL, TINY_SIZE


def template_ids(tok, messages) -> list[int]:
    out = tok.apply_chat_template(messages, add_generation_prompt=True)
    # transformers 5 returns a BatchEncoding (return_dict defaults to True), not a list of ids
    # as 4.x did: a caller that takes the result for ids gets the dict's keys.
    assert isinstance(out, BatchEncoding)
    ids = out["input_ids"]
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    return ids


# ---------------------------------------------------------------------- encode_prompts


def test_text_prompt_gets_the_template_ids(tok):
    ex = Example(7, "Mia has 3 apples. How many apples does Mia have?", "3")
    got = encode_prompts(tok, [ex], TaskConfig(), None)
    want = template_ids(tok, [{"role": "user", "content": ex.prompt}])
    assert got.ids[7].dtype == np.int32
    assert got.ids[7].tolist() == want
    assert want[0] == tok.convert_tokens_to_ids(IM_START)
    assert tok.decode(want) == f"{IM_START}user\n{ex.prompt}{IM_END}\n{IM_START}assistant\n"
    assert got.too_long == [] and got.longest == len(want)


def test_system_prompt_comes_first(tok):
    ex = Example(1, "What is 2 + 2?", "4")
    cfg = TaskConfig(system_prompt="You are good at sums.")
    got = encode_prompts(tok, [ex], cfg, None).ids[1].tolist()
    want = template_ids(
        tok, [{"role": "system", "content": "You are good at sums."}, {"role": "user", "content": ex.prompt}]
    )
    assert got == want
    assert tok.decode(got).startswith(f"{IM_START}system\nYou are good at sums.{IM_END}\n{IM_START}user\n")


def test_chat_message_prompt_keeps_its_own_turns(tok):
    messages = (
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "1 + 1?"},
        {"role": "assistant", "content": "#### 2"},
        {"role": "user", "content": "2 + 3?"},
    )
    ex = Example(2, messages, "5")
    # The example's own system message wins over the configured one: it is not added twice.
    got = encode_prompts(tok, [ex], TaskConfig(system_prompt="ignored"), None).ids[2].tolist()
    assert got == template_ids(tok, [dict(m) for m in messages])
    assert tok.decode(got).count(f"{IM_START}system") == 1


def test_a_template_that_refuses_the_messages_names_the_example_and_the_system_prompt(tok):
    """Gemma's template raises on a system message: the message named neither the example, nor
    the template, nor the task.system_prompt that added it."""
    import copy

    strict = copy.deepcopy(tok)
    strict.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['content'] }}\n{% endfor %}"
    )
    ex = Example(5, "What is 2 + 2?", "4")
    assert encode_prompts(strict, [ex], TaskConfig(), None).ids[5].size  # no system message: fine
    with pytest.raises(TaskDataError) as e:
        encode_prompts(strict, [ex], TaskConfig(system_prompt="Be brief."), None)
    assert str(e.value) == (
        "task: the chat template of the tokenizer at model.path refused example 5's messages (roles: system, user): "
        "TemplateError: System role not supported "
        "(task.system_prompt added the system message: this template may take none)"
    )


def test_raw_text_without_the_template(tok):
    ex = Example(3, "Tom has 12 cards.", "12")
    cfg = TaskConfig(chat_template=False, system_prompt="Be brief.")
    got = encode_prompts(tok, [ex], cfg, None).ids[3].tolist()
    assert prompt_text(tok, ex, cfg) == "Be brief.\n\nTom has 12 cards."
    assert got == tok("Be brief.\n\nTom has 12 cards.").input_ids  # no BOS: Qwen has none
    assert tok.convert_tokens_to_ids(IM_START) not in got


def test_long_prompts_are_left_out_and_counted(tok):
    short = Example(10, "Ann has 2 pens.", "2")
    long = Example(11, "Ann has 2 pens. " * 20, "2")
    lengths = {ex.id: len(template_ids(tok, [{"role": "user", "content": ex.prompt}])) for ex in (short, long)}
    limit = lengths[10] + 1
    assert lengths[11] > limit
    got = encode_prompts(tok, [short, long], TaskConfig(max_prompt_tokens=limit), limit)
    assert list(got.ids) == [10] and got.too_long == [11] and got.longest == lengths[10]
    # At the limit exactly, a prompt is kept.
    exact = encode_prompts(tok, [short], TaskConfig(), lengths[10])
    assert list(exact.ids) == [10] and exact.too_long == []


# ---------------------------------------------------------------------- the problems


def test_problems_are_deterministic_and_seeded(rows):
    assert problems.generate(SMALL) == rows
    other = problems.generate(problems.ProblemConfig(train=300, test=40, seed=6))
    assert other != rows


def test_problems_are_gsm8k_format_with_correct_arithmetic(rows):
    line = re.compile(r"^.*?(\d+) ([-+*]) (\d+) = (\d+)[^\d]*$")
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    steps = set()
    for row in rows["train"] + rows["test"]:
        assert set(row) == {"question", "answer"}
        assert row["question"].endswith("?")
        *reasoning, final = row["answer"].split("\n")
        assert 1 <= len(reasoning) <= 2
        steps.add(len(reasoning))
        m = re.fullmatch(r"#### (\d+)", final)
        assert m, final
        results = []
        for text in reasoning:
            a, op, b, c = line.match(text).groups()
            assert ops[op](int(a), int(b)) == int(c), text
            results.append(int(c))
        assert results[-1] == int(m.group(1)) > 0
        if len(results) == 2:  # the second step builds on the first
            assert str(results[0]) in reasoning[1]
    assert steps == {1, 2}


def test_test_split_is_held_out(rows):
    assert (len(rows["train"]), len(rows["test"])) == (SMALL.train, SMALL.test)
    train_q = {r["question"] for r in rows["train"]}
    assert len(train_q) == SMALL.train
    assert not train_q & {r["question"] for r in rows["test"]}


def test_written_files_read_as_the_gsm8k_task(tmp_path, rows):
    from examples.gsm8k.prepare import build_task

    paths = problems.write(tmp_path, SMALL)
    assert sorted(p.name for p in paths.values()) == ["test.jsonl", "test.parquet", "train.jsonl", "train.parquet"]
    for split in ("train", "test"):
        assert pq.read_table(tmp_path / f"{split}.parquet").to_pylist() == rows[split]
        jsonl = [json.loads(s) for s in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
        assert jsonl == rows[split]
    task = build_task(tmp_path)
    train, test = task.examples("train"), task.examples("eval")
    assert (len(train), len(test)) == (SMALL.train, SMALL.test)
    assert test[0].answer == rows["test"][0]["answer"].rsplit("#### ", 1)[1]
    assert train[0].prompt.startswith(rows["train"][0]["question"] + " ")  # then the instruction


# ---------------------------------------------------------------------- model and SFT


def test_prepare_end_to_end_and_reuse(tmp_path):
    """A cut-down prepare (the real one is calibrated offline): files, folders, report, reuse."""
    from examples.gsm8k.prepare import PrepareConfig, heldout_accuracy, prepare
    from examples.toy.sft import SFTConfig
    from examples.toy.tiny_llama import ModelSize

    cfg = PrepareConfig(
        problems=problems.ProblemConfig(train=60, test=8),
        vocab_size=300,
        size=ModelSize(**TINY_SIZE),
        sft=SFTConfig(steps=3, batch=4),
        max_new_tokens=8,
    )
    report = prepare(tmp_path, seed=1, config=cfg)
    assert (tmp_path / "data" / "test.parquet").is_file() and (tmp_path / "sft" / "model.safetensors").is_file()
    assert report["train_rows"] == 60 and report["eval_rows"] == 8 and report["too_long"] == 0
    assert report["pairs"] == 15 and report["seed"] == 1  # SFTConfig's default fraction, the run's seed
    assert 0.0 <= report["heldout_acc_after"] <= 1.0
    acc = heldout_accuracy(tmp_path / "sft", tmp_path / "data", max_new_tokens=8)
    assert acc == report["heldout_acc_after"]  # the same greedy eval from the saved folder
    stamp = (tmp_path / "sft" / "mpirl-sft.json").stat().st_mtime_ns
    assert prepare(tmp_path, seed=1, config=cfg) == report
    assert (tmp_path / "sft" / "mpirl-sft.json").stat().st_mtime_ns == stamp  # reused, not redone
