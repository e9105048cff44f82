"""A LoRA policy's checkpoint: the adapters and their optimizer state only (bytes on disk about
the adapters' size, far below the base's), loaded back exactly onto a base read afresh, and the
base at model.path checked against the one recorded (roles/checkpoint/lora_base.py)."""

from __future__ import annotations

import json

import pytest
import torch

from roles.checkpoint.layout import TRAINER_SHARDS, CheckpointIOError
from roles.checkpoint.lora_base import BASE_RECORD, check_base, record_base
from roles.checkpoint.trainer_state import load_trainer_state, save_trainer_state
from roles.models.lora import LoraConfig, inject_lora, is_adapter
from support.tiny_models import tiny_llama

pytestmark = pytest.mark.timeout(120)
CFG = LoraConfig(rank=2, alpha=4.0)


def _lora_model_and_optimizer():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # the same base each time, as model.path gives it
    sizes = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_attention_heads=4)
    model = inject_lora(LlamaForCausalLM(LlamaConfig(**sizes, num_hidden_layers=2)), CFG)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, optimizer


def _bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def test_a_lora_checkpoint_holds_the_adapters_and_loads_back_exactly(tmp_path):
    model, optimizer = _lora_model_and_optimizer()
    for _ in range(2):  # adapters and Adam moments that are not their initial values
        model(torch.tensor([[1, 2, 3, 4]])).logits.square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    save_trainer_state(tmp_path, model, optimizer, None, only=is_adapter)

    adapters = _bytes(p for n, p in model.named_parameters() if is_adapter(n))
    base = _bytes(p for n, p in model.named_parameters() if not is_adapter(n))
    on_disk = sum(f.stat().st_size for f in (tmp_path / TRAINER_SHARDS).glob("*.raw"))
    # the adapters and their two Adam moments, and the optimizer's settings (pickled: ~17 KB)
    assert 3 * adapters <= on_disk < 3 * adapters + (32 << 10)
    assert on_disk < base / 10

    fresh, fresh_optimizer = _lora_model_and_optimizer()  # the base as model.path gives it
    load_trainer_state(tmp_path, fresh, fresh_optimizer, None, only=is_adapter)
    for (name, p), q in zip(model.named_parameters(), fresh.parameters()):
        assert torch.equal(p, q), name
    moments = [
        (s["exp_avg"], t["exp_avg_sq"]) for s, t in zip(*(o.state.values() for o in (optimizer, fresh_optimizer)))
    ]
    assert moments and all(a.shape == b.shape for a, b in moments)
    for p, q in zip(optimizer.state.values(), fresh_optimizer.state.values()):
        assert torch.equal(p["exp_avg"], q["exp_avg"]) and torch.equal(p["exp_avg_sq"], q["exp_avg_sq"])
        assert torch.equal(p["step"], q["step"])


def _model_folder(path, hidden=24):
    import transformers

    cfg = tiny_llama().config
    cfg.hidden_size = hidden
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def test_the_base_is_checked_against_the_one_recorded(tmp_path):
    base = _model_folder(tmp_path / "base")
    ckpt = tmp_path / "ckpt"
    record_base(ckpt, base)
    recorded = json.loads((ckpt / BASE_RECORD).read_text())
    assert recorded["tensors"]["model.layers.0.self_attn.q_proj.weight"] == ["F32", [24, 24]]
    check_base(ckpt, base)  # the same base: nothing to say

    _model_folder(base, hidden=32)  # the same folder, rewritten with another shape
    with pytest.raises(
        CheckpointIOError, match=r"not the one its adapters were trained on: .*was F32 \[37, 24\], now F32 \[37, 32\]"
    ):
        check_base(ckpt, base)
    with pytest.raises(CheckpointIOError, match=r"adapters only.*is not a model folder \(no config\.json\)"):
        check_base(ckpt, tmp_path / "gone")
    check_base(tmp_path, tmp_path / "gone")  # no record: a checkpoint of the whole model, nothing to check


def test_export_refuses_a_lora_checkpoint_whose_base_changed_shape(tmp_path):
    import yaml

    from roles.checkpoint.export import export_hf
    from roles.checkpoint.layout import COMPLETE, SAVED_CONFIG

    base = _model_folder(tmp_path / "base")
    ckpt = tmp_path / "step-00000002"
    ckpt.mkdir()
    (ckpt / SAVED_CONFIG).write_text(yaml.safe_dump({"model": {"path": str(base), "lora": {"rank": 2}}}))
    (ckpt / COMPLETE).write_text("2\n")
    record_base(ckpt, base)
    _model_folder(base, hidden=32)
    with pytest.raises(CheckpointIOError, match=r"adapters only.*not the one its adapters were trained on"):
        export_hf(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything was written
