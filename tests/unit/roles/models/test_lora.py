"""roles/models/lora.py: adapters injected with PEFT, merged as PEFT merges them, saved as a PEFT
adapter folder that PEFT loads, the frozen base as the KL reference, and a generator's torch
engine taking adapter-only syncs without drift."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from roles.models.lora import (
    BaseView,
    LoraConfig,
    adapter_state,
    check_targets,
    inject_lora,
    is_adapter,
    merged_state,
    save_adapter_folder,
)
from support.tiny_models import tiny_llama

pytestmark = pytest.mark.timeout(120)
CFG = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"])


def _trained(seed=0, config=CFG):
    """A tiny Llama with adapters, their B made non-zero (as training would)."""
    model = inject_lora(tiny_llama(), config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if is_adapter(name):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


IDS = torch.tensor([[1, 5, 7, 2, 9, 3], [4, 4, 8, 1, 2, 6]])


def test_only_the_adapters_train_and_the_model_keeps_its_class():
    model = inject_lora(tiny_llama(), CFG)
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all(is_adapter(n) for n in trained)
    assert {n.split(".")[-4] for n in trained} == {"q_proj", "v_proj", "down_proj"}
    assert type(model).__name__ == "LlamaForCausalLM"
    base = tiny_llama()
    assert torch.equal(model(IDS).logits, base(IDS).logits)  # B = 0: the base's outputs


def test_merged_weights_are_what_peft_merges():
    import peft

    model = _trained()
    ours = merged_state(dict(model.state_dict()), CFG)
    reference = peft.get_peft_model(tiny_llama(), CFG.peft_config())
    reference.load_state_dict(
        {"base_model.model." + n: t for n, t in model.state_dict().items()}, strict=True
    )  # the same adapters, under PeftModel's names
    theirs = reference.merge_and_unload().state_dict()
    assert set(ours) == set(theirs)
    for name, tensor in theirs.items():
        assert torch.allclose(ours[name], tensor, atol=1e-6), name
    plain = tiny_llama()
    plain.load_state_dict(ours)
    assert torch.allclose(plain(IDS).logits, model(IDS).logits, atol=1e-5)


def test_the_adapter_folder_loads_in_peft(tmp_path):
    import peft

    model = _trained()
    save_adapter_folder(model, CFG, "base/path", tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
    loaded = peft.PeftModel.from_pretrained(tiny_llama(), str(tmp_path))
    assert torch.allclose(loaded(IDS).logits, model(IDS).logits, atol=1e-6)
    assert all(n.startswith("base_model.model.") and ".default." not in n for n in adapter_state(model.state_dict()))


def test_the_base_view_is_the_frozen_base_and_leaves_the_adapters_on():
    model = _trained()
    with_adapters = model(IDS).logits
    assert torch.equal(BaseView(model)(IDS).logits, tiny_llama()(IDS).logits)
    assert torch.equal(model(IDS).logits, with_adapters)


def test_target_modules_that_match_nothing_are_named(tmp_path):
    tiny_llama().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"'attn_out' match no module of the model \(its linear layers: down_proj"):
        check_targets(tmp_path, LoraConfig(target_modules=["q_proj", "attn_out"]))
    check_targets(tmp_path, LoraConfig())  # all-linear


def test_a_generator_takes_100_adapter_syncs_without_drift():
    """The torch engine's LoRA forward over its untouched base: after 100 syncs of changing
    adapters its log-probs are the trainer's merged model's (float32, within 1e-5)."""
    from roles.algorithm.logprobs import response_logprobs
    from roles.engines.base import SamplingConfig
    from roles.engines.torch_engine import TorchEngine

    engine = TorchEngine(inject_lora(tiny_llama(), CFG, inference=True), capacity=4)
    trainer = None
    for sync in range(100):
        trainer = _trained(seed=sync)
        adapters = [(n, p.detach().clone()) for n, p in trainer.named_parameters() if is_adapter(n)]
        engine.load_weights(adapters, version=sync + 1)
    base_names = [n for n in dict(engine.model.named_parameters()) if not is_adapter(n)]
    pristine = dict(inject_lora(tiny_llama(), CFG).named_parameters())
    assert all(torch.equal(dict(engine.model.named_parameters())[n], pristine[n]) for n in base_names)
    prompts = [np.array([1, 5, 7], np.int32), np.array([4, 2], np.int32)]
    samples = engine.generate(prompts, 2, SamplingConfig(temperature=1.0, max_new_tokens=6, seed=3))
    merged = tiny_llama()
    merged.load_state_dict(merged_state(dict(copy.deepcopy(trainer).state_dict()), CFG))
    flat = [(p, s) for p, group in zip(prompts, samples) for s in group]
    logp, mask = response_logprobs(merged, [p for p, _ in flat], [s.response_ids for _, s in flat], 1.0)
    for row, (_, s) in enumerate(flat):
        n = len(s.response_ids)
        assert np.allclose(logp[row, :n].detach().numpy(), s.logprobs, atol=1e-5), row


def test_merged_adapters_give_an_engine_of_plain_weights_the_merged_model_from_the_base(tmp_path):
    """vLLM's path: every parameter, the adapted ones merged from the pristine base on each sync."""
    from roles.engines.adapter_merge import MergedAdapters

    tiny_llama().save_pretrained(tmp_path)
    merger = MergedAdapters(str(tmp_path), CFG, torch.float32)
    for seed in range(3):  # later syncs start from the base again, not from the last merge
        trained = _trained(seed=seed)
        adapters = [(n, p.detach()) for n, p in trained.named_parameters() if is_adapter(n)]
        merged = dict(merger.merged(adapters))
        want = merged_state(dict(trained.state_dict()), CFG)
        assert set(merged) == {n for n, _ in tiny_llama().named_parameters()}
        assert all(torch.allclose(merged[n], want[n], atol=1e-6) for n in merged)
    with pytest.raises(KeyError, match="not an adapter of this model"):
        merger.merged([("model.layers.0.self_attn.q_proj.weight", torch.zeros(1))])
    name = "model.layers.0.self_attn.q_proj.lora_A.default.weight"
    with pytest.raises(KeyError, match="come together, got only lora_A"):
        merger.merged([(name, dict(_trained().named_parameters())[name].detach())])
