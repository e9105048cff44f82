import inspect
import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from examples.arith.tokens import ALPHABET, ArithTokens
from examples.toy.tiny_llama import TINY, build_tiny_llama
from roles.algorithm.logprobs import response_logprobs
from roles.engines.base import Engine, SamplingConfig
from roles.engines.torch_engine import TorchEngine, _pick

torch.set_num_threads(1)
EOS = 2


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    return (
        build_tiny_llama(root / "a", ALPHABET, seed=0, **TINY.kwargs()),
        build_tiny_llama(root / "b", ALPHABET, seed=1, **TINY.kwargs()),
    )


@pytest.fixture(scope="module")
def prompts(model_dirs):
    task = ArithTokens(model_dirs[0])
    # lengths 5, 6 and 7 tokens: left padding differs per row
    return [task.encode_prompt(t) for t in ("1+2=", "13+15=", "7+19=", "0+0=")]


def _flat(out):
    return [s for group in out for s in group]


def test_meets_the_engine_protocol():
    # Engine is a plain (not runtime-checkable) Protocol: compare the method signatures.
    for name in ("generate", "load_weights"):
        ours = inspect.signature(getattr(TorchEngine, name)).parameters
        theirs = inspect.signature(getattr(Engine, name)).parameters
        assert list(ours) == list(theirs), name


def test_shapes_finish_reasons_and_eos(model_dirs, prompts):
    engine = TorchEngine(model_dirs[0])
    out = engine.generate(prompts, 8, SamplingConfig(max_new_tokens=6, seed=0))
    assert len(out) == len(prompts) and all(len(g) == 8 for g in out)
    reasons = set()
    for s in _flat(out):
        assert s.response_ids.dtype == np.int32 and s.logprobs.dtype == np.float32
        assert len(s.response_ids) == len(s.logprobs) >= 1
        assert np.all(s.logprobs <= 0) and np.all(np.isfinite(s.logprobs))
        eos_at = np.flatnonzero(s.response_ids == EOS)
        if s.finish_reason == "stop":
            assert eos_at.tolist() == [len(s.response_ids) - 1]  # stops right at its EOS
        else:
            assert s.finish_reason == "length" and len(s.response_ids) == 6 and eos_at.size == 0
        reasons.add(s.finish_reason)
    assert reasons == {"stop", "length"}  # a random 15-token model hits EOS often in 6 steps


def test_seed_makes_sampling_reproducible(model_dirs, prompts):
    engine = TorchEngine(model_dirs[0])
    cfg = SamplingConfig(max_new_tokens=6, seed=7)
    a, b = _flat(engine.generate(prompts, 4, cfg)), _flat(engine.generate(prompts, 4, cfg))
    assert all(np.array_equal(x.response_ids, y.response_ids) for x, y in zip(a, b))
    c = _flat(engine.generate(prompts, 4, SamplingConfig(max_new_tokens=6, seed=8)))
    assert not all(np.array_equal(x.response_ids, y.response_ids) for x, y in zip(a, c))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_equal_trainer_logprobs(model_dirs, prompts, temperature):
    engine = TorchEngine(model_dirs[0])
    out = _flat(engine.generate(prompts, 6, SamplingConfig(temperature, 1.0, 8, seed=1)))
    model = AutoModelForCausalLM.from_pretrained(model_dirs[0])  # a separate copy of the weights
    lp, mask = response_logprobs(
        model, [p for p in prompts for _ in range(6)], [s.response_ids for s in out], temperature
    )
    assert lp.dtype == torch.float32 and mask.shape == lp.shape
    assert mask.sum().item() == sum(len(s.response_ids) for s in out)
    mu = torch.zeros_like(lp)
    for i, s in enumerate(out):
        mu[i, : len(s.logprobs)] = torch.from_numpy(s.logprobs)
    assert (lp - mu).abs().max().item() < 1e-4
    # the check is not vacuous: another temperature gives different numbers
    lp_other, _ = response_logprobs(
        model, [p for p in prompts for _ in range(6)], [s.response_ids for s in out], temperature + 0.5
    )
    assert (lp_other - mu).abs().max().item() > 1e-2


def test_top_p_renormalises_over_the_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(4000, 1)
    # top_p 0.7: token 1 joins (mass before it 0.5 < 0.7), token 2 does not (0.8 >= 0.7)
    tok, lp = _pick(logits, SamplingConfig(top_p=0.7), None, torch.Generator().manual_seed(0))
    assert set(tok.tolist()) == {0, 1}
    torch.testing.assert_close(lp[tok == 0], torch.full_like(lp[tok == 0], math.log(0.5 / 0.8)))
    torch.testing.assert_close(lp[tok == 1], torch.full_like(lp[tok == 1], math.log(0.3 / 0.8)))
    assert abs((tok == 0).float().mean().item() - 0.625) < 0.03
    # temperature is applied before the nucleus: T=2 flattens, so three tokens are needed
    tok, lp = _pick(logits, SamplingConfig(temperature=2.0, top_p=0.7), None, torch.Generator().manual_seed(0))
    p2 = probs.sqrt() / probs.sqrt().sum()
    assert set(tok.tolist()) == {0, 1, 2}
    want = (p2[:3] / p2[:3].sum()).log()
    torch.testing.assert_close(lp, want[tok])


def test_load_weights_in_place(model_dirs, prompts):
    cfg = SamplingConfig(max_new_tokens=6, seed=3)
    engine = TorchEngine(model_dirs[0])
    reference = _flat(TorchEngine(model_dirs[1]).generate(prompts, 4, cfg))
    before = _flat(engine.generate(prompts, 4, cfg))
    param = engine.model.model.embed_tokens.weight
    ptr = param.data_ptr()
    source = AutoModelForCausalLM.from_pretrained(model_dirs[1])
    engine.load_weights(source.named_parameters())
    assert param.data_ptr() == ptr  # same storage: updated in place, not rebuilt
    after = _flat(engine.generate(prompts, 4, cfg))
    for x, y in zip(after, reference):
        assert np.array_equal(x.response_ids, y.response_ids)
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-6)
    assert any(not np.array_equal(x.response_ids, y.response_ids) for x, y in zip(before, after))


def test_load_weights_names_the_bad_tensor(model_dirs):
    engine = TorchEngine(model_dirs[0])
    with pytest.raises(KeyError, match="model.layers.0.self_attn.qkv_proj.weight"):
        engine.load_weights([("model.layers.0.self_attn.qkv_proj.weight", torch.zeros(3))])
    with pytest.raises(ValueError, match=r"lm_head.weight.*\(15, 64\).*\(15, 128\)"):
        engine.load_weights([("lm_head.weight", torch.zeros(15, 64))])


def test_min_new_tokens_path_used_by_the_benchmark(model_dirs, prompts):
    engine = TorchEngine(model_dirs[0])
    out = engine._sample(prompts, SamplingConfig(max_new_tokens=5), torch.Generator().manual_seed(0), 5)
    assert all(len(s.response_ids) == 5 and EOS not in s.response_ids for s in out)


def test_chunked_batches_keep_prompt_grouping(model_dirs, prompts):
    model = AutoModelForCausalLM.from_pretrained(model_dirs[0])
    engine = TorchEngine(model, max_batch_rows=3)  # 4 prompts x 2 samples -> chunks of 3, 3, 2
    out = engine.generate(prompts, 2, SamplingConfig(max_new_tokens=4, seed=0))
    assert [len(g) for g in out] == [2, 2, 2, 2]
    flat = _flat(out)
    lp, _ = response_logprobs(model, [p for p in prompts for _ in range(2)], [s.response_ids for s in flat])
    for i, s in enumerate(flat):  # each sample's log-probs are those of its own prompt
        np.testing.assert_allclose(lp[i, : len(s.logprobs)].detach().numpy(), s.logprobs, atol=1e-4)


def test_invalid_sampling_is_refused(model_dirs, prompts):
    engine = TorchEngine(model_dirs[0])
    for bad in (SamplingConfig(temperature=-1.0), SamplingConfig(top_p=0.0), SamplingConfig(max_new_tokens=0)):
        with pytest.raises(ValueError):
            engine.generate(prompts, 1, bad)


def test_temperature_zero_is_greedy(model_dirs, prompts):
    """Evaluation samples at temperature 0: every row takes the argmax, whatever the seed."""
    from transformers import AutoModelForCausalLM

    engine = TorchEngine(model_dirs[0])
    a = _flat(engine.generate(prompts, 2, SamplingConfig(temperature=0.0, max_new_tokens=6, seed=1)))
    b = _flat(engine.generate(prompts, 1, SamplingConfig(temperature=0.0, max_new_tokens=6, seed=2)))
    assert all(np.array_equal(x.response_ids, y.response_ids) for x, y in zip(a[::2], b))
    model = AutoModelForCausalLM.from_pretrained(str(model_dirs[0])).eval()
    for p, s in zip(prompts, b):  # the reference: argmax of a full forward pass, token by token
        ids = torch.as_tensor(np.asarray(p, dtype=np.int64))[None]
        for tok in s.response_ids:
            with torch.no_grad():
                want = int(model(input_ids=ids).logits[0, -1].argmax())
            assert int(tok) == want
            ids = torch.cat([ids, torch.tensor([[want]])], dim=1)


def test_a_bfloat16_engine_samples_with_its_own_policy(model_dirs, prompts):
    """A bf16 generator of a float32 trainer: after a sync it holds exactly the trainer's
    weights cast to bf16, and its log-probs mu are those of that bf16 model (a direct forward of
    it on the same tokens)."""
    trainer = AutoModelForCausalLM.from_pretrained(model_dirs[1])  # float32
    engine = TorchEngine(model_dirs[0], dtype=torch.bfloat16)
    engine.load_weights((k, v.to(torch.bfloat16)) for k, v in trainer.named_parameters())  # as synced
    for name, p in engine.model.named_parameters():
        want = dict(trainer.named_parameters())[name].detach().to(torch.bfloat16)
        assert p.dtype == torch.bfloat16 and torch.equal(p.view(torch.int16), want.view(torch.int16)), name
    out = _flat(engine.generate(prompts, 4, SamplingConfig(1.0, 1.0, 8, seed=5)))
    rows = [p for p in prompts for _ in range(4)]
    mu = torch.zeros((len(out), 8))
    for i, s in enumerate(out):
        mu[i, : len(s.logprobs)] = torch.from_numpy(s.logprobs)
    own, mask = response_logprobs(engine.model, rows, [s.response_ids for s in out], 1.0)
    mu = mu[:, : own.shape[1]]
    # equal up to bf16 rounding (eps 2^-8), which the KV-cache path and a full forward round
    # differently; measured: mean 9e-4, max 2.8e-3 on this model
    gap = (own - mu)[mask].abs()
    assert gap.mean().item() < 2e-3 and gap.max().item() < 1.5e-2
    # not vacuous: the same tokens at another temperature are far off
    other, _ = response_logprobs(engine.model, rows, [s.response_ids for s in out], 1.5)
    assert (other - mu)[mask].abs().mean().item() > 5e-2


def test_an_int8_engine_requantizes_what_each_sync_brings(model_dirs, prompts):
    """world.generator.quantization: int8. The linear layers hold torchao int8 weights; a sync
    replaces and requantizes them without rebuilding the engine, from the received weights;
    and mu stays the quantized policy's own."""
    from torchao.quantization import Int8Tensor

    engine = TorchEngine(model_dirs[0], quantization="int8")
    layer = engine.model.model.layers[0].mlp.down_proj
    assert isinstance(layer.weight, Int8Tensor)
    assert not isinstance(engine.model.model.embed_tokens.weight, Int8Tensor)  # embeddings stay
    model_before = engine.model
    cfg = SamplingConfig(max_new_tokens=6, seed=3)
    before = _flat(engine.generate(prompts, 4, cfg))
    source = AutoModelForCausalLM.from_pretrained(model_dirs[1])
    engine.load_weights(source.named_parameters())
    assert engine.model is model_before and isinstance(layer.weight, Int8Tensor)
    # the layer now holds model 1's weight, quantized: within int8's per-row error of it
    want = source.model.layers[0].mlp.down_proj.weight.detach()
    got = layer.weight.dequantize()
    per_row = want.abs().amax(dim=1, keepdim=True) / 127
    assert ((got - want).abs() <= per_row * 0.51 + 1e-6).all()
    assert torch.equal(engine.model.model.embed_tokens.weight, source.model.embed_tokens.weight)  # copied
    after = _flat(engine.generate(prompts, 4, cfg))
    assert any(not np.array_equal(x.response_ids, y.response_ids) for x, y in zip(before, after))
    rows = [p for p in prompts for _ in range(4)]
    own, mask = response_logprobs(engine.model, rows, [s.response_ids for s in after], 1.0)
    mu = torch.zeros_like(own)
    for i, s in enumerate(after):
        mu[i, : len(s.logprobs)] = torch.from_numpy(s.logprobs)
    assert (own - mu)[mask].abs().max().item() < 1e-3  # mu is the int8 policy's own


def test_an_unknown_quantization_is_refused(model_dirs):
    with pytest.raises(ValueError, match="unknown quantization 'int3'"):
        TorchEngine(model_dirs[0], quantization="int3")


def test_int8_keeps_a_tied_output_layer_tied_whatever_its_name(tmp_path):
    """GPT-2's output layer is its ``transformer.wte`` (no "embed" in the name): it must stay in
    full precision and tied, so a sync of the embedding moves the output layer with it."""
    from torchao.quantization import Int8Tensor
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=32, vocab_size=50, bos_token_id=1, eos_token_id=2)
    dirs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        GPT2LMHeadModel(cfg).save_pretrained(tmp_path / str(seed))
        dirs.append(tmp_path / str(seed))
    engine = TorchEngine(dirs[0], quantization="int8")
    model = engine.model
    assert model.lm_head.weight is model.transformer.wte.weight
    assert not isinstance(model.lm_head.weight, Int8Tensor)
    source = AutoModelForCausalLM.from_pretrained(dirs[1])
    engine.load_weights(source.named_parameters())
    assert model.lm_head.weight is model.transformer.wte.weight
    assert torch.equal(model.lm_head.weight, source.lm_head.weight)


def test_a_response_ends_at_the_tokenizers_eos_where_the_model_config_names_another(tmp_path, prompts):
    """A chat template ends the turn with the tokenizer's EOS; a checkpoint's config may name
    another (a base model's ``<|endoftext|>``). Sampling on past the turn's end gave the reward
    the text of made-up turns after it (decoded without the special tokens). vLLM stops at both,
    and so does the torch engine: from a folder by itself, from a module given ``stop_ids``."""
    import json

    from roles.models.tokenizer import eos_ids

    folder = build_tiny_llama(tmp_path / "m", ALPHABET, seed=0, **TINY.kwargs())
    bos = 1  # the config's EOS from here on; the tokenizer's is still <eos> (2)
    for name in ("config.json", "generation_config.json"):
        cfg = json.loads((folder / name).read_text())
        cfg["eos_token_id"] = bos
        (folder / name).write_text(json.dumps(cfg))
    assert eos_ids(str(folder)) == (EOS,)
    module = AutoModelForCausalLM.from_pretrained(folder)
    for engine in (TorchEngine(folder), TorchEngine(module, stop_ids=eos_ids(str(folder)))):
        assert engine.eos_ids.tolist() == [bos, EOS] and engine.pad_id == 0
        out = _flat(engine.generate(prompts, 8, SamplingConfig(max_new_tokens=6, seed=0)))
        ends = set()
        for s in out:
            stops = np.flatnonzero(np.isin(s.response_ids, [bos, EOS])).tolist()
            assert stops == ([len(s.response_ids) - 1] if s.finish_reason == "stop" else [])
            if s.finish_reason == "stop":
                ends.add(int(s.response_ids[-1]))
        assert EOS in ends  # not vacuous: the tokenizer's EOS ended some responses
    assert TorchEngine(module).eos_ids.tolist() == [bos]  # a module alone: its config's EOS only


def test_a_folder_without_a_tokenizer_stops_at_its_config_eos(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from roles.models.tokenizer import eos_ids

    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50, eos_token_id=7)).save_pretrained(tmp_path)
    assert eos_ids(str(tmp_path)) == ()
    assert TorchEngine(tmp_path).eos_ids.tolist() == [7]
