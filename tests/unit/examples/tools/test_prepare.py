"""The tool demo's preparation at a tiny size: tokenizer, model, the two SFT stages, the
held-out episodes, the settings stamp; and the SFT rows' loss masks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from examples.tools.heldout import run_episodes
from examples.tools.prepare import PrepareConfig, prepare
from examples.toy.sft import SFTConfig, _pad_rows
from examples.toy.tiny_bpe import TOOLS_CHAT_TEMPLATE
from examples.toy.tiny_llama import ModelSize
from roles.engines.base import SamplingConfig
from support.chat_data import TINY_SIZE

pytestmark = pytest.mark.timeout(240)

QUICK = PrepareConfig(
    task={"train_size": 40, "eval_size": 6},
    size=ModelSize(**{**TINY_SIZE, "max_position_embeddings": 192}),
    copy_sft=SFTConfig(fraction=0.5, steps=3, lr=1e-3, batch=4),
    sft=SFTConfig(fraction=0.5, steps=3, lr=1e-3, batch=4),
    eval_examples=4,
    max_new_tokens=8,
)


def test_prepare_writes_a_tools_model_and_reports_episodes(tmp_path):
    report = prepare(tmp_path, seed=1, config=QUICK)
    tok = AutoTokenizer.from_pretrained(tmp_path / "sft")
    assert tok.chat_template == TOOLS_CHAT_TEMPLATE
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "sft").config.max_position_embeddings == 192
    assert report["train_rows"] == 40 and 0 < report["tool_rows"] < 40  # a mix of calls and direct answers
    assert report["copy_sft"]["steps"] == 3 and report["steps"] == 3
    for kind in ("greedy", "sampled"):
        figures = report[kind]
        assert figures["episodes"] == 4
        assert 0.0 <= figures["accuracy"] <= 1.0 and 0.0 <= figures["tool_rate"] <= 1.0
    assert report["conversation_tokens_max"] <= 192
    # Same settings: the stamp is read back and nothing is trained again.
    stamp = tmp_path / "sft" / "mpirl-sft.json"
    before = stamp.stat().st_mtime_ns
    assert prepare(tmp_path, seed=1, config=QUICK) == json.loads(stamp.read_text())["report"]
    assert stamp.stat().st_mtime_ns == before


def test_episodes_stop_at_the_context(tmp_path, task, tools_tok):
    """A model whose context leaves no room for a turn plays no turn: nothing is cut or overrun."""
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    build_tiny_llama_for_tokenizer(tmp_path, tools_tok, **{**TINY_SIZE, "max_position_embeddings": 256})
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    stats = run_episodes(model, tools_tok, task.examples("eval")[:3], SamplingConfig(0.0, max_new_tokens=8))
    assert stats.episodes == 3 and all(len(ids) <= 256 for ids in stats.ids.values())
    model.config.max_position_embeddings = 20  # shorter than any prompt
    stats = run_episodes(model, tools_tok, task.examples("eval")[:3], SamplingConfig(0.0, max_new_tokens=8))
    assert stats.accuracy == 0.0 and stats.turns_mean == 1.0 and stats.tool_rate == 0.0


def test_row_loss_masks_keep_observations_out_of_the_labels():
    rows = [
        (np.array([5, 6]), np.array([7, 8, 9, 10]), np.array([1, 0, 0, 1])),
        (np.array([5]), np.array([7, 8])),  # no mask: the whole target carries loss
    ]
    ids, _, labels = _pad_rows(rows, pad_id=0)
    assert labels[0].tolist() == [-100, -100, 7, -100, -100, 10]
    assert labels[1].tolist() == [-100, 7, 8, -100, -100, -100]
    assert ids[0].tolist() == [5, 6, 7, 8, 9, 10]
    with pytest.raises(ValueError, match="loss mask"):
        _pad_rows([(np.array([5]), np.array([7, 8]), np.array([1]))], pad_id=0)
