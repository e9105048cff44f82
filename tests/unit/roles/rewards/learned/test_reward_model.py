"""The sequence-classification reward model: the folders it refuses, and scores that do not
depend on batching, padding or the pad id."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForSequenceClassification

from examples.arith.tokens import ALPHABET
from examples.toy.tiny_bpe import save_bpe_chat_tokenizer
from examples.toy.tiny_llama import build_tiny_llama, save_char_tokenizer
from roles.rewards.learned.base import ScoreItem, ScorerContext
from roles.rewards.learned.conversation import conversation_text
from roles.rewards.learned.reward_model import RewardModel, micro_batches
from roles.sections.reward import RewardSection
from support.reward_models import parity_items, save_reward_model

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def char_rm(tmp_path_factory):
    d = tmp_path_factory.mktemp("rm")
    return save_reward_model(d / "rm", save_char_tokenizer(d / "tok", ALPHABET), seed=1)


@pytest.fixture(scope="module")
def chat_rm(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat_rm")
    tok = save_bpe_chat_tokenizer(d / "tok", [f"{a}+{b}={a + b}" for a in range(30) for b in range(30)], 300)
    return save_reward_model(d / "rm", tok, seed=2)


def _section(**options):
    return RewardSection.model_validate({"name": "model", **options})


def test_a_causal_lm_or_a_many_label_classifier_is_refused_naming_the_field(tmp_path, char_rm):
    causal = build_tiny_llama(tmp_path / "causal", ALPHABET, hidden_size=64, num_layers=1, num_heads=2)
    with pytest.raises(ValidationError, match=r"path[\s\S]*not a sequence-classification reward model"):
        _section(path=str(causal))
    two = tmp_path / "two_labels"
    two.mkdir()
    config = json.loads((char_rm / "config.json").read_text())
    (two / "config.json").write_text(json.dumps({**config, "id2label": {"0": "a", "1": "b"}}))
    with pytest.raises(ValidationError, match="2 labels"):
        _section(path=str(two))
    with pytest.raises(ValidationError, match="no config.json"):
        _section(path=str(tmp_path / "nowhere"))
    assert _section(path=str(char_rm)).components[0].options["path"] == str(char_rm)


def test_micro_batches_keep_within_the_token_budget():
    assert micro_batches([10, 8, 8, 3, 3, 3], budget=20) == [[0, 1], [2, 3], [4, 5]]
    assert micro_batches([50, 4], budget=20) == [[0], [1]]  # a row over the budget goes alone


@pytest.mark.parametrize("budget", [16, 100_000])
def test_scores_do_not_depend_on_the_batch(char_rm, budget):
    rm = RewardModel(RewardModel.Config(path=str(char_rm), tokens_per_batch=budget), ScorerContext())
    items = [item for item, _ in parity_items(24, seed=3)]
    together = [r.value for r in rm.score_raw(items)]
    alone = [rm.score_raw([item])[0].value for item in items]
    assert together == pytest.approx(alone, abs=1e-5)
    # ... and equal the reference: the score head at the last token of the unpadded text.
    model = AutoModelForSequenceClassification.from_pretrained(str(char_rm)).eval()
    for item, got in zip(items[:4], together):
        ids = torch.tensor([rm.tokenizer(conversation_text(rm.tokenizer, item, False))["input_ids"]])
        want = model.score(model.model(input_ids=ids).last_hidden_state)[0, -1, 0].item()
        assert got == pytest.approx(want, abs=1e-5)


def test_the_reward_models_own_chat_template_renders_the_exchange(chat_rm):
    rm = RewardModel(RewardModel.Config(path=str(chat_rm)), ScorerContext())
    item = ScoreItem([{"role": "user", "content": "2+3="}], "2+3=", "5", None)
    assert conversation_text(rm.tokenizer, item, rm.use_template) == (
        "<|im_start|>user\n2+3=<|im_end|>\n<|im_start|>assistant\n5<|im_end|>\n"
    )
    # A pad id that is also the end-of-turn token changes nothing: the last token is found by the mask.
    before = [r.value for r in rm.score_raw([item, item])]
    rm.model.config.pad_token_id = rm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert [r.value for r in rm.score_raw([item, item])] == pytest.approx(before, abs=1e-6)


def test_over_long_conversations_keep_their_end_and_are_counted(char_rm):
    rm = RewardModel(RewardModel.Config(path=str(char_rm), max_length=4), ScorerContext())
    long_item = ScoreItem([{"role": "user", "content": "12+13="}], "12+13=", "25", None)
    short_item = ScoreItem([{"role": "user", "content": "1="}], "1=", "2", None)  # BOS 1 = 2: fits
    got = rm.score_raw([long_item, short_item])
    assert [g.extras for g in got] == [{"truncated": 1.0}, {}]
    kept = rm.tokenizer(conversation_text(rm.tokenizer, long_item, False))["input_ids"][-4:]  # "3=25"
    assert got[0].value == pytest.approx(rm.score_ids([kept])[0], abs=1e-6)


def test_a_response_it_cannot_score_scores_nothing_and_the_others_are_scored(char_rm, monkeypatch):
    rm = RewardModel(RewardModel.Config(path=str(char_rm)), ScorerContext())
    good = [item for item, _ in parity_items(4, seed=9)]
    # "x" is outside the character tokenizer's alphabet: that response cannot be tokenized.
    bad = ScoreItem([{"role": "user", "content": "1+1="}], "1+1=", "2x", None)
    want = [r.value for r in rm.score_raw(good)]
    got = rm.score_raw([good[0], bad, *good[1:]])
    assert got[1].value is None and got[1].extras == {"failed": 1.0}
    assert [g.value for g in got[:1] + got[2:]] == pytest.approx(want, abs=1e-5)
    # A forward pass that raises on one (long) row: its micro-batch is scored row by row.
    forward = rm._forward

    def fragile(rows):
        if any(len(r) > 12 for r in rows):  # parity items are at most 9 tokens
            raise RuntimeError("CUDA out of memory")
        return forward(rows)

    monkeypatch.setattr(rm, "_forward", fragile)
    long_item = ScoreItem([{"role": "user", "content": "12+13+14+15="}], "12+13+14+15=", "54", None)
    got = rm.score_raw([*good, long_item])
    assert got[-1].value is None
    assert [g.value for g in got[:-1]] == pytest.approx(want, abs=1e-5)
