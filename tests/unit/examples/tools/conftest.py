"""Fixtures of the tool demo's tests: a small AdditionTask and a tools chat tokenizer trained
on its conversations (as prepare.py trains one)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from examples.tools.prepare import build_task, chat_texts, conversation
from examples.toy.tiny_bpe import save_bpe_chat_tokenizer


@pytest.fixture(scope="module")
def task():
    return build_task(seed=2, train_size=60, eval_size=12)


@pytest.fixture(scope="module")
def tools_tok(tmp_path_factory, task):
    out = tmp_path_factory.mktemp("tools-bpe")
    texts = chat_texts([conversation(ex, True) for ex in task.examples("train")])
    save_bpe_chat_tokenizer(out, texts, vocab_size=400, tools=True)
    return AutoTokenizer.from_pretrained(out)  # loaded back, as every role loads it
