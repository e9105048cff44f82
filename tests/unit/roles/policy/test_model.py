"""roles/policy/model.py: the policy is loaded without dropout, so train mode computes eval mode's
log-probs (the importance ratio compares them with the generator's, which samples without)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from roles.policy.model import load_model


def _gpt2(path):
    from transformers import GPT2Config, GPT2LMHeadModel

    # GPT-2's defaults: resid, embedding and attention dropout 0.1 (nn.Dropout modules).
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=97)
    GPT2LMHeadModel(cfg).save_pretrained(path)


def _opt(path):
    from transformers import OPTConfig, OPTForCausalLM

    # OPT reads its dropout as floats in train mode (attention's ``dropout``, layers'
    # ``dropout`` and ``activation_dropout``) and may skip whole layers (``layerdrop``).
    cfg = OPTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        ffn_dim=64,
        max_position_embeddings=64,
        vocab_size=97,
        word_embed_proj_dim=32,
        dropout=0.3,
        attention_dropout=0.3,
        activation_dropout=0.3,
        layerdrop=0.5,
    )
    OPTForCausalLM(cfg).save_pretrained(path)


@pytest.mark.parametrize("build, config_key", [(_gpt2, "attn_pdrop"), (_opt, "attention_dropout")], ids=["gpt2", "opt"])
def test_train_mode_computes_the_eval_mode_logits(tmp_path, build, config_key):
    build(tmp_path)
    model = load_model(SimpleNamespace(path=str(tmp_path), torch_dtype=lambda: torch.float32))
    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        want = model(ids).logits
    model.train()
    torch.manual_seed(1)
    got = [model(ids).logits.detach() for _ in range(3)]
    for logits in got:
        torch.testing.assert_close(logits, want, rtol=0, atol=0)
    # The model folder's settings are the user's: only the loaded modules changed.
    assert getattr(model.config, config_key) > 0


def test_a_folder_missing_a_weight_is_refused_naming_it(tmp_path):
    # transformers would fill it with random values and only log it.
    from safetensors.torch import load_file, save_file

    _gpt2(tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))
    del weights["transformer.h.1.mlp.c_fc.weight"]
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"lack tensors .*: transformer\.h\.1\.mlp\.c_fc\.weight"):
        load_model(SimpleNamespace(path=str(tmp_path), torch_dtype=lambda: torch.float32))
