"""The byte-level BPE chat tokenizer, trained on the synthetic GSM8K-format texts (``tok``)."""

import json
import re

import pytest

from examples.toy.tiny_bpe import CHAT_TEMPLATE, IM_END, IM_START, PAD, save_bpe_chat_tokenizer


def test_tokenizer_files_and_special_tokens(tok_dir, tok):
    config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE  # where Qwen2.5 keeps it
    assert (tok.pad_token, tok.eos_token, tok.bos_token) == (PAD, IM_END, None)
    assert [tok.convert_tokens_to_ids(t) for t in (PAD, IM_START, IM_END)] == [0, 1, 2]
    assert len(tok) <= 400
    # Special tokens are single ids in text, and the template's roles are single tokens too.
    assert tok(f"{IM_START}user\nhi{IM_END}").input_ids[:2] == [1, tok.convert_tokens_to_ids("user")]
    assert tok("hi").input_ids == tok("hi", add_special_tokens=False).input_ids  # no BOS added


def test_digits_are_one_token_each(tok):
    ids = tok("Sam has 12345 coins and 2024 beads.").input_ids
    pieces = [tok.decode([i]) for i in ids]
    assert [p for p in pieces if p.strip().isdigit()] == list("12345") + list("2024")
    # No learnt merge joins a digit to anything: numbers never share tokens.
    assert not [t for t in tok.get_vocab() if re.search(r"\d", t) and len(t) > 1]


def test_round_trip_of_any_text(tok):
    for text in ["Mia has 3 + 4 = 7 apples.\n#### 7", "naïve café: ☃ 3½ ünseen wörds\t\r\n  ", ""]:
        assert tok.decode(tok(text).input_ids) == text  # byte-level: nothing is unknown


def test_vocab_size_is_checked(tmp_path):
    with pytest.raises(ValueError, match="at least"):
        save_bpe_chat_tokenizer(tmp_path, ["a b"], vocab_size=100)
