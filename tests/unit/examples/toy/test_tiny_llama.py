import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from examples.toy.tiny_bpe import CHAT_TEMPLATE
from examples.toy.tiny_llama import (
    BENCH_25M,
    TINY,
    build_tiny_llama,
    llama_config,
    save_char_tokenizer,
)
from support.chat_data import TINY_SIZE

ALPHABET = "0123456789+="


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny"), ALPHABET, seed=3, **TINY.kwargs())


def test_tokenizer_round_trip(tmp_path):
    save_char_tokenizer(tmp_path, ALPHABET)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert len(tok) == 3 + len(ALPHABET)
    ids = tok("3+15=").input_ids
    # <bos>, then one id per character: '0' is 3, so digit d is 3 + d; '+' 13, '=' 14
    assert ids == [1, 6, 13, 4, 8, 14]
    assert tok.decode(ids + [2], skip_special_tokens=True) == "3+15="
    assert tok.decode(ids) == "<bos>3+15="
    batch = tok(["1+2=", "13+15="], padding=True)
    assert batch.input_ids[0][:2] == [0, 0] and batch.attention_mask[0][:2] == [0, 0]  # left pad


def test_tokenizer_rejects_unknown_characters(tmp_path):
    save_char_tokenizer(tmp_path, ALPHABET)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 - the tokenizers library raises its own internal type
        tok("3*4=")
    with pytest.raises(ValueError, match="distinct"):
        save_char_tokenizer(tmp_path, "aab")


def test_build_loads_with_from_pretrained(tiny_dir):
    assert (tiny_dir / "model.safetensors").exists()
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    cfg = model.config
    assert isinstance(model, LlamaForCausalLM)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (15, 128, 4)
    assert cfg.hidden_size // cfg.num_attention_heads == 64
    assert (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (1, 2, 0)
    assert not cfg.tie_word_embeddings
    n = sum(p.numel() for p in model.parameters())
    # 4 * (4*128^2 attn + 3*128*256 mlp + 2*128 norms) + 2*15*128 embeddings + 128 final norm
    assert n == 4 * (4 * 128 * 128 + 3 * 128 * 256 + 2 * 128) + 2 * 15 * 128 + 128
    assert json.loads((tiny_dir / "tokenizer_config.json").read_text())["eos_token"] == "<eos>"


def test_seed_makes_weights_reproducible(tiny_dir, tmp_path):
    rng_before = torch.get_rng_state()
    again = build_tiny_llama(tmp_path / "a", ALPHABET, seed=3, **TINY.kwargs())
    other = build_tiny_llama(tmp_path / "b", ALPHABET, seed=4, **TINY.kwargs())
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is left alone
    w = lambda d: AutoModelForCausalLM.from_pretrained(d).model.embed_tokens.weight
    assert torch.equal(w(tiny_dir), w(again))
    assert not torch.equal(w(tiny_dir), w(other))


def test_head_dim_must_be_standard(tmp_path):
    with pytest.raises(ValueError, match="head dims"):
        build_tiny_llama(tmp_path, ALPHABET, hidden_size=96, num_heads=2)  # head_dim 48
    assert not (tmp_path / "config.json").exists()


def test_bench_preset_is_about_25m_parameters(tmp_path):
    tok = save_char_tokenizer(tmp_path, ALPHABET)
    with torch.device("meta"):  # count parameters without allocating 100 MB
        model = LlamaForCausalLM(llama_config(tok, **BENCH_25M.kwargs()))
    n = sum(p.numel() for p in model.parameters())
    assert 24e6 < n < 26e6
    assert BENCH_25M.hidden_size // BENCH_25M.num_heads == 64


def test_model_over_the_chat_tokenizer(tmp_path, tok):
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    build_tiny_llama_for_tokenizer(tmp_path, tok, seed=1, **TINY_SIZE)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    cfg, gen = model.config, model.generation_config
    assert (cfg.vocab_size, cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id) == (len(tok), 2, 0, None)
    assert gen.eos_token_id == [2, 0]  # the end of a turn, or of a document
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.chat_template == CHAT_TEMPLATE and len(loaded) == len(tok)
    with pytest.raises(ValueError, match="32, 64"):
        build_tiny_llama_for_tokenizer(tmp_path / "bad", tok, hidden_size=96, num_heads=2)
