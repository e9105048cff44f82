"""Model families (roles/models/): which spec a model gets, what it knows, and the model: section."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest
from pydantic import ValidationError

from roles.models import GENERIC, MODEL_SPECS, ModelConfig, spec_for, torch_dtype, tp_need
from roles.models.base import layers_by_name
from roles.models.llama import llama_tp_dim

LLAMA_SHAPES = {  # a tiny Llama's parameters, by Hugging Face name
    "model.embed_tokens.weight": (37, 8),
    "model.layers.0.self_attn.q_proj.weight": (8, 8),
    "model.layers.0.self_attn.k_proj.weight": (4, 8),
    "model.layers.0.self_attn.v_proj.weight": (4, 8),
    "model.layers.0.self_attn.o_proj.weight": (8, 8),
    "model.layers.0.mlp.gate_proj.weight": (12, 8),
    "model.layers.0.mlp.up_proj.weight": (12, 8),
    "model.layers.0.mlp.down_proj.weight": (8, 12),
    "model.layers.0.input_layernorm.weight": (8,),
    "model.norm.weight": (8,),
    "lm_head.weight": (37, 8),
}
QWEN2_SHAPES = {
    **LLAMA_SHAPES,
    "model.layers.0.self_attn.q_proj.bias": (8,),
    "model.layers.0.self_attn.k_proj.bias": (4,),
    "model.layers.0.self_attn.v_proj.bias": (4,),
}


def test_importing_roles_models_does_not_import_torch():
    code = "import roles.models, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_spec_by_architecture_then_model_type_then_generic():
    from transformers import LlamaConfig, Qwen2Config

    assert spec_for({"architectures": ["LlamaForCausalLM"]}) is MODEL_SPECS["llama"]
    assert spec_for({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}) is MODEL_SPECS["qwen2"]
    # The architecture wins over model_type; unknown ones are skipped.
    assert spec_for({"architectures": ["Nope", "Qwen2ForCausalLM"], "model_type": "llama"}) is MODEL_SPECS["qwen2"]
    # A config built in code has no architectures: its model_type decides.
    assert spec_for(LlamaConfig()) is MODEL_SPECS["llama"]
    assert spec_for(Qwen2Config()) is MODEL_SPECS["qwen2"]
    assert spec_for({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}) is GENERIC
    assert spec_for({}) is GENERIC
    assert spec_for(object()) is GENERIC


def test_spec_of_a_model_and_its_decoder_layers():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=17,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(cfg)
    spec = spec_for(model)
    assert spec is MODEL_SPECS["llama"]
    layers = spec.decoder_layers(model)
    assert len(layers) == 3 and all(a is b for a, b in zip(layers, model.model.layers))
    # The generic spec finds the same blocks by name, and none in a model without them.
    assert [id(m) for m in GENERIC.decoder_layers(model)] == [id(m) for m in layers]
    assert layers_by_name(torch.nn.Linear(2, 2)) == []


def test_llama_tp_rules_unchanged():
    assert llama_tp_dim("model.layers.0.self_attn.o_proj.weight", 2) == 1
    assert llama_tp_dim("model.layers.0.mlp.down_proj.weight", 2) == 1
    for name in (
        "q_proj.weight",
        "k_proj.weight",
        "v_proj.weight",
        "gate_proj.weight",
        "up_proj.weight",
        "q_proj.bias",
        "k_proj.bias",
        "v_proj.bias",
    ):
        assert llama_tp_dim(f"model.layers.3.x.{name}", 2 if name.endswith("weight") else 1) == 0
    assert llama_tp_dim("model.embed_tokens.weight", 2) == 0
    assert llama_tp_dim("lm_head.weight", 2) == 0
    assert llama_tp_dim("model.norm.weight", 1) is None
    assert llama_tp_dim("model.layers.0.input_layernorm.weight", 1) is None
    assert llama_tp_dim("model.layers.0.self_attn.o_proj.bias", 1) is None  # row-parallel bias: whole
    for family in ("llama", "qwen2"):
        spec = MODEL_SPECS[family]
        for name, shape in QWEN2_SHAPES.items():
            assert spec.tp_split_dim(name, len(shape)) == llama_tp_dim(name, len(shape)), (family, name)


def test_qwen2_splits_its_qkv_biases_with_their_weights():
    dims = dict(MODEL_SPECS["qwen2"].split_dims(QWEN2_SHAPES.items()))
    for p in ("q", "k", "v"):
        assert dims[f"model.layers.0.self_attn.{p}_proj.bias"] == 0
        assert dims[f"model.layers.0.self_attn.{p}_proj.weight"] == 0
    need = tp_need(MODEL_SPECS["qwen2"], QWEN2_SHAPES.items(), tp_rank=1, tp_size=2)
    assert need.box("model.layers.0.self_attn.k_proj.bias", (4,)) == ((2, 4),)


def test_need_with_split_dims_gives_the_old_boxes():
    spec = MODEL_SPECS["llama"]
    need = tp_need(spec, LLAMA_SHAPES.items(), tp_rank=1, tp_size=2)
    # Row-parallel slices are split on dim 1, column-parallel on dim 0, norms replicated.
    assert need.box("model.layers.0.mlp.down_proj.weight", (8, 12)) == ((0, 8), (6, 12))
    assert need.box("model.embed_tokens.weight", (37, 8)) == ((19, 37), (0, 8))
    assert need.box("model.norm.weight", (8,)) == ((0, 8),)
    assert need.box("model.layers.0.self_attn.q_proj.weight", (8, 8)) == ((4, 8), (0, 8))
    assert tp_need(spec, LLAMA_SHAPES.items(), 0, 2).box("lm_head.weight", (37, 8)) == ((0, 19), (0, 8))
    # Only the split parameters travel in the Need, which pickles (the plan's allgather) and hashes.
    assert "model.norm.weight" not in dict(need.split_dims)
    again = pickle.loads(pickle.dumps(need))
    assert again == need and hash(again) == hash(need)
    assert again.box("model.embed_tokens.weight", (37, 8)) == ((19, 37), (0, 8))
    # Tensors (named_parameters()) work as well as shapes.
    import torch

    tensors = [(n, torch.empty(s, device="meta")) for n, s in LLAMA_SHAPES.items()]
    assert tp_need(spec, tensors, 1, 2) == need


def test_full_weights_need_no_rules():
    from transports.weights import Need

    assert tp_need(GENERIC, (), 0, 1) == Need()
    assert tp_need(MODEL_SPECS["llama"], LLAMA_SHAPES.items()) == Need()
    assert Need().box("anything", (3, 4)) == ((0, 3), (0, 4))


def test_tensor_parallel_without_rules_is_a_clear_error():
    from transports.weights import Need

    with pytest.raises(ValueError, match="'generic' has no tensor-parallel rules"):
        tp_need(GENERIC, LLAMA_SHAPES.items(), tp_rank=0, tp_size=2)
    with pytest.raises(ValueError, match="needs split_dims"):
        Need(tp_rank=0, tp_size=2)
    with pytest.raises(ValueError, match="not a rank"):
        Need(tp_rank=2, tp_size=2, split_dims=(("w", 0),))


def test_tied_embeddings():
    from transformers import LlamaConfig, Qwen2Config

    spec = MODEL_SPECS["qwen2"]
    assert spec.tied_embeddings({"tie_word_embeddings": True})
    assert not spec.tied_embeddings({"model_type": "qwen2"})  # missing: untied, as HF reads it
    assert spec.tied_embeddings(Qwen2Config(tie_word_embeddings=True))
    assert not MODEL_SPECS["llama"].tied_embeddings(LlamaConfig())
    assert GENERIC.tied_embeddings({"tie_word_embeddings": True})


def test_hf_name_is_the_module_name_by_default():
    for spec in (*MODEL_SPECS.values(), GENERIC):
        assert spec.hf_name("model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"


def test_torch_dtype():
    import torch

    assert torch_dtype("bfloat16") is torch.bfloat16
    assert torch_dtype("float32") is torch.float32 and torch_dtype("float16") is torch.float16
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        torch_dtype("int8")


# ---------------------------------------------------------------------- model: section


def test_model_config(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 128}))
    cfg = ModelConfig(path=str(d), dtype="bfloat16")
    import torch

    assert cfg.torch_dtype() is torch.bfloat16 and cfg.context_length() == 128
    assert ModelConfig(path=str(d)).dtype == "float32"
    nested = tmp_path / "vlm"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 64}}))
    assert ModelConfig(path=str(nested)).context_length() == 64
    (nested / "config.json").write_text(json.dumps({"max_position_embeddings": True}))
    assert ModelConfig(path=str(nested)).context_length() is None


def test_the_context_is_read_under_each_familys_name(tmp_path):
    """GPT-2 says n_positions, MPT max_seq_len...: each is the context, as transformers' attribute_map has it."""
    d = tmp_path / "m"
    d.mkdir()
    for data, context in [
        ({"model_type": "gpt2", "n_positions": 256, "n_ctx": 1024}, 256),
        ({"model_type": "gpt2", "n_ctx": 1024}, 1024),
        ({"model_type": "mpt", "max_seq_len": 2048}, 2048),
        ({"model_type": "chatglm", "seq_length": 8192}, 8192),
        ({"model_type": "qwen", "max_position_embeddings": 32768, "seq_length": 8192}, 32768),  # standard name first
        ({"text_config": {"model_type": "gpt2", "n_positions": 64}}, 64),
        ({"model_type": "gpt2", "n_positions": True}, None),
    ]:
        (d / "config.json").write_text(json.dumps(data))
        assert ModelConfig(path=str(d)).context_length() == context, data


def test_gpt2s_context_limits_the_prompts(base_config, tmp_path):
    from launch import config, preflight

    d = tmp_path / "gpt2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 256}))
    base_config["model"]["path"] = str(d)
    base_config["rollout"]["max_new_tokens"] = 200
    assert preflight.parse(base_config).prompt_token_limit() == 56
    base_config["rollout"]["max_new_tokens"] = 256
    with pytest.raises(config.ConfigError, match="leaves no room for a prompt in the model's context of 256"):
        preflight.parse(base_config)


def _error(**kw) -> str:
    with pytest.raises(ValidationError) as info:
        ModelConfig(**kw)
    return str(info.value)


def test_model_config_errors(tmp_path):
    missing = tmp_path / "no-such-model"
    assert f"no model folder at {str(missing)!r}" in _error(path=str(missing))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert f"{str(empty)!r} has no config.json: not a Hugging Face model folder" in _error(path=str(empty))
    (empty / "config.json").write_text("{}")
    assert "dtype" in _error(path=str(empty), dtype="int8")
    assert "path" in _error()  # required
    assert "dtyp" in _error(path=str(empty), dtyp="float32")  # unknown keys are errors
    assert "path" in _error(path=3)  # strict: no coercion


def test_a_new_family_is_one_spec_and_one_registry_entry(monkeypatch):
    # the worked example of docs/architecture.md: Mistral names its parameters like Llama
    from roles import models
    from roles.models.base import ModelSpec
    from roles.models.llama import llama_tp_dim

    mistral = ModelSpec(name="mistral", architectures=("MistralForCausalLM",), tp_rule=llama_tp_dim)
    assert models.spec_for({"architectures": ["MistralForCausalLM"]}) is models.GENERIC
    monkeypatch.setitem(models.MODEL_SPECS, "mistral", mistral)
    assert models.spec_for({"architectures": ["MistralForCausalLM"]}) is mistral
    assert models.spec_for({"model_type": "mistral"}) is mistral
    need = models.tp_need(mistral, [("model.layers.0.self_attn.o_proj.weight", (8, 12))], tp_rank=1, tp_size=2)
    assert need.box("model.layers.0.self_attn.o_proj.weight", (8, 12)) == ((0, 8), (6, 12))
