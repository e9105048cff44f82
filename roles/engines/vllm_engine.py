"""vLLM as a generation engine: an in-process ``vllm.LLM`` behind the ``Engine`` contract.

Three things make vLLM usable as an RL generator rather than a server:

- Behaviour log-probs. vLLM's default (``logprobs_mode="raw_logprobs"``) reports log-probs of
  the raw logits, before temperature and top-p. AIPO's mu must be the distribution the token
  was actually drawn from, so the engine asks for ``"processed_logprobs"``: log_softmax of the
  logits after temperature and top-p (tokens outside the nucleus get -inf and the rest are
  renormalised). With ``top_p=1`` this is ``log_softmax(logits / temperature)``, the same
  quantity the trainer computes.
- Weight updates in place. On CPU, vLLM repacks every linear weight for oneDNN after loading
  and leaves an empty ``layer.weight`` behind, so ``model.load_weights`` on the live model
  fails (or, on GPU with quantisation, would skip the repacking). vLLM's own in-place reload
  (the worker's ``reload_weights``, layer-wise: restore the checkpoint-format parameters, load,
  re-run ``process_weights_after_loading``, copy back into the original storage) is the
  supported path; it takes Hugging Face names (q_proj, k_proj, v_proj, gate_proj, ...) and
  fuses them itself.
- Tied heads refreshed. A tied output head (``tie_word_embeddings``: Qwen2, GPT-2, OPT, Gemma,
  some Llamas) shares its ``weight`` Parameter with the embedding. The checkpoint names only the
  embedding, so the reload loads and processes the embedding alone and, for the head, just puts
  the shared (now updated) Parameter back: its post-load processing is not redone. On CPU that
  processing is a oneDNN prepack of the head (``UnquantizedEmbeddingMethod``), so without a redo
  the head keeps multiplying by the *old* embedding. After each reload the engine therefore
  re-runs it for every layer that shares a parameter with another (found by identity, whatever
  the architecture), and refuses (raises) when a reload broke a tie or a tied layer's processing
  is not known to be safe to redo. On GPUs (unquantized head) that processing is a no-op.
- No stale cache. Prefix caching keeps KV blocks of shared prompt prefixes across batches;
  after new weights those blocks are wrong, so every update resets the prefix cache (one with
  streaming requests in flight salts new requests' blocks with the version instead: vllm_stream).

The engine lives in the generator's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): no engine
subprocess to orphan when MPI aborts the job, and weights pass by reference, not over a socket.
vLLM's worker then shares the process with the weight transport's torch.distributed world,
which it would adopt as its own (and hang on); see ``_private_torch_world``.

Side effects on that process (vLLM's, documented here because they are global): building the
engine seeds Python's, NumPy's and torch's global RNGs with ``Config.seed``; on the CPU
backend it also drops torch to one intra-op thread unless ``OMP_NUM_THREADS`` is set, and
replaces ``torch.set_num_threads`` with a no-op for the rest of the process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roles.engines.base import Sample, SamplingConfig
from roles.engines.requests import InflightKV
from roles.engines.vllm_device import check_cpu_head_size, check_device
from roles.engines.vllm_lora import NativeAdapters, engine_args
from roles.engines.vllm_stream import VllmStreaming, finish_reason, sampled_tokens
from runtime.loop_clock import LOOP

_GiB = 1 << 30
_VLLM_GROUP_NAME_OFFSET = 1_000_000  # see _private_torch_world
_engines_started = 0  # engines built in this process so far (each numbers its groups apart)


class VllmEngine(VllmStreaming):
    """An in-process ``vllm.LLM``: samples with behaviour log-probs, takes new weights in place;
    a batch at a time (``generate``) or request by request (``add``/``step``: ``vllm_stream``)."""

    @dataclass
    class Config:
        model: str  # folder with a Hugging Face causal LM (config.json, *.safetensors, tokenizer)
        dtype: str = "float32"  # float32 on CPU (log-probs match the trainer's); bfloat16 on GPUs
        # vLLM's on-the-fly weight quantization ("fp8"), redone by its reload after each sync
        quantization: str | None = None
        tensor_parallel: int = 1  # GPUs one engine spans (heads and MLP split); 1 on CPU
        gpu_memory_utilization: float = 0.5  # GPU: share of device memory for weights + KV cache
        kv_cache_gib: float | None = None  # KV cache; None: GPU what the share leaves, CPU 1 GiB
        max_model_len: int | None = None  # longest prompt + response; None = max_position_embeddings
        max_num_seqs: int = 256  # sequences decoded together in one step
        # KV page in tokens; None = vLLM's (CPU 128, GPU 16). Only full pages are prefix-cached.
        block_size: int | None = None
        enable_prefix_caching: bool = True  # share the KV of a prompt's n samples; reset on each update
        # torch.compile the model (+ CUDA graphs on GPUs). None: on GPUs; off on CPU, where
        # compiling costs about a minute at start-up.
        compile: bool | None = None
        seed: int = 0  # engine seed (vLLM also seeds the process's global RNGs with it)
        cpu_threads: int | None = None  # CPU: torch/OpenMP threads; None = OMP_NUM_THREADS, else 1
        # Streaming: what sequences in flight during an update decode over (roles.engines.requests)
        inflight_kv: InflightKV = "keep"
        extra: dict[str, Any] = field(default_factory=dict)  # other vllm.LLM keyword arguments, as is

    def __init__(self, config: VllmEngine.Config):
        self.config = config
        self.last_update_s: float | None = None  # seconds the latest load_weights took (reload + reset)
        self.updates = 0  # load_weights calls so far
        self.adapters = None  # model.lora: NativeAdapters (vllm_lora) or MergedAdapters (adapter_merge)
        self._llm = _build_llm(config)
        self._param_names = _checkpoint_names(config.model)
        # Per worker: groups of "module.param" names holding one shared Parameter (tied head).
        self._tied = self._llm.collective_rpc(_tied_parameters)
        self._init_streaming()

    @classmethod
    def from_config(cls, engine, model, *, max_seqs: int, seed: int = 0, module=None, stop_ids=None) -> VllmEngine:
        """The engine of a role map's ``world.generator`` (``EngineConfig``) over its ``model:``.

        ``module`` and ``stop_ids`` are the torch engine's (vLLM loads the folder and stops at
        its tokenizer's EOS itself). With ``model.lora`` syncs bring adapters: merged into a copy
        of the base (``lora_mode: merged``, the default: ``adapter_merge``) or applied by vLLM's
        LoRA layers (``native``: ``vllm_lora``)."""
        native = model.lora is not None and engine.lora_mode == "native"  # None: merged (docs/lora.md)
        vllm = cls(
            cls.Config(
                model=model.path,
                dtype=engine.dtype or model.dtype,
                quantization=engine.quantization,
                tensor_parallel=engine.tensor_parallel,
                gpu_memory_utilization=engine.gpu_memory_utilization,
                kv_cache_gib=engine.kv_cache_gib,
                max_num_seqs=engine.max_seqs or max(max_seqs, 1),
                compile=engine.compile,
                seed=seed,
                inflight_kv=engine.inflight_kv,
                extra=engine_args(model.lora) if native else {},
            )
        )
        if native:
            vllm.adapters = NativeAdapters(model.lora, model.path)
        elif model.lora is not None:
            from roles.engines.adapter_merge import MergedAdapters
            from roles.models import torch_dtype

            vllm.adapters = MergedAdapters(model.path, model.lora, torch_dtype(engine.dtype or model.dtype))
        return vllm

    # ------------------------------------------------------------------ Engine

    def generate(
        self, prompts: list[np.ndarray], n: int, sampling: SamplingConfig, ignore_eos: bool = False
    ) -> list[list[Sample]]:
        """Sample ``n`` responses per prompt; ``ignore_eos`` (benchmarks) runs to ``max_new_tokens``."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        self._check_idle()
        if sampling.temperature == 0 and n > 1:
            # vLLM refuses n > 1 for greedy decoding; the n responses are the same one anyway.
            once = self.generate(prompts, 1, sampling, ignore_eos)
            return [[group[0]] * n for group in once]
        params = []
        for i in range(len(prompts)):
            params.append(
                SamplingParams(
                    n=n,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    max_tokens=sampling.max_new_tokens,
                    ignore_eos=ignore_eos,
                    logprobs=0,  # just the sampled token's log-prob (processed: see module doc)
                    flat_logprobs=True,  # a few flat lists per sample instead of a dict per token
                    detokenize=False,  # token ids are all we return
                    seed=None if sampling.seed is None else request_seed(sampling.seed, i),
                )
            )
        inputs = [TokensPrompt(prompt_token_ids=np.asarray(p, dtype=np.int64).tolist()) for p in prompts]
        # vLLM's engine core works in a process of its own, so this rank's CPU says nothing
        # about progress: the call counts as progress throughout (runtime.loop_clock).
        with LOOP.ticking():
            outputs = self._llm.generate(inputs, params, use_tqdm=False, lora_request=self._lora_request())
        return [[_sample(c) for c in sorted(out.outputs, key=lambda c: c.index)] for out in outputs]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> None:
        """Replace every weight in place (Hugging Face names), then drop the prefix cache (with
        streaming requests in flight: see ``vllm_stream``). ``version``: the new weights' policy
        version (None: the one held, plus one). With vLLM's LoRA (``vllm_lora``) the tensors are
        the adapters alone, loaded into its adapter slot; nothing else is reloaded.

        All of the model's parameters must come in one call (the checkpoint's names): vLLM
        fuses q/k/v and gate/up per layer, and a layer given only some of its parts would be
        rebuilt with uninitialised memory for the rest. A missing or unknown name raises
        before anything is touched. Tensors may live on any device; they are copied.
        """
        t0 = time.perf_counter()
        version = self.version + 1 if version is None else version
        if isinstance(self.adapters, NativeAdapters):  # vLLM's LoRA: the adapters alone, no reload
            self._before_reload()
            self.adapters.load(self._llm.llm_engine, named_tensors, version)
        else:
            self._reload_all(named_tensors)
        self.version = version
        self._after_reload()  # the prefix cache reset, or what the requests in flight need instead
        self.last_update_s = time.perf_counter() - t0
        self.updates += 1

    def _reload_all(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Every parameter reloaded in place (vLLM's ``reload_weights``), the tied heads redone."""
        if self.adapters is not None:  # LoRA, merged: the adapters merged into the base (adapter_merge)
            named_tensors = self.adapters.merged(named_tensors)
        named = list(named_tensors)  # references only; lets us check names before touching vLLM
        names = {n for n, _ in named}
        missing, unknown = self._param_names - names, names - self._param_names
        if missing or unknown or len(names) != len(named):
            raise ValueError(
                "load_weights needs each of the checkpoint's parameters exactly once: "
                f"missing {sorted(missing)[:5]}{'...' if len(missing) > 5 else ''}, "
                f"unknown {sorted(unknown)[:5]}{'...' if len(unknown) > 5 else ''}, "
                f"{len(named) - len(names)} duplicated"
            )
        self._before_reload()
        # A list, not an iterator: with tensor parallelism the call is shipped to worker processes.
        self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": named, "is_checkpoint_format": True})
        # The reload skips the post-load processing of a head tied to the embedding (module doc).
        tied = self._llm.collective_rpc(_refresh_tied_layers)
        if tied != self._tied:
            raise RuntimeError(
                f"vLLM's weight reload changed which parameters are shared (tied): {self._tied} before, "
                f"{tied} after; a tied output head may no longer follow the embedding"
            )


# ---------------------------------------------------------------------- helpers


def request_seed(batch_seed: int, prompt_index: int) -> int:
    """The vLLM seed of a batch's ``prompt_index``-th request; vLLM seeds its sample j with
    this + j. Batch seeds are consecutive (``protocol.batch_seed``), so ``batch_seed + i * n``
    gave batch k+1's samples almost all of batch k's seeds, shifted by one sample: the same
    random draws again, on other prompts. A hash of (batch seed, prompt) spreads the requests
    over 2**63 seeds instead, reproducibly, leaving room for the + j."""
    state = np.random.SeedSequence([batch_seed & (2**64 - 1), prompt_index]).generate_state(1, np.uint64)
    return int(state[0] >> 1)


def _sample(c) -> Sample:
    ids, lp = sampled_tokens(c)
    return Sample(response_ids=ids, logprobs=lp, finish_reason=finish_reason(c, "a sample"))


def _tied_groups(model: torch.nn.Module) -> list[list[tuple[str, str]]]:
    """(module, parameter) names of each Parameter that two or more of ``model``'s layers hold."""
    holders: dict[int, list[tuple[str, str]]] = {}
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            holders.setdefault(id(param), []).append((module_name, param_name))
    return [group for group in holders.values() if len(group) > 1]


def _tied_parameters(worker) -> list[list[str]]:
    """Worker side (``collective_rpc``): the model's tied parameters, as "module.param" names."""
    return [[f"{m}.{p}" for m, p in group] for group in _tied_groups(worker.get_model())]


def _refresh_tied_layers(worker) -> list[list[str]]:
    """Worker side (``collective_rpc``), after ``reload_weights``: redo the post-load processing
    of every layer that shares a parameter with another (a tied head; see the module doc).

    The reload processes only the layer the checkpoint names (the embedding); another holder of
    the same Parameter sees the new values but keeps whatever its processing derived from the
    old ones (on CPU, the head's oneDNN-packed copy). Redoing it is safe for vLLM's unquantized
    embedding/head method (it derives, never replaces, the weight); any other method in a tied
    layer raises instead of leaving the head stale. Returns the tied groups, as
    ``_tied_parameters`` does, so the caller can check that the reload kept them tied.
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    model = worker.get_model()
    groups = _tied_groups(model)
    layers = {m: model.get_submodule(m) for group in groups for m, _ in group}
    with torch.no_grad():
        for name, layer in layers.items():
            method = getattr(layer, "quant_method", None)
            if method is None:  # nothing derived from the weight: the shared values are all it uses
                continue
            if type(method) is not UnquantizedEmbeddingMethod:
                raise RuntimeError(
                    f"{name!r} shares a parameter with another layer (tied weights) and uses "
                    f"{type(method).__name__}, whose post-load processing the engine cannot safely "
                    "redo after a weight update: this layer would keep the old weights"
                )
            method.process_weights_after_loading(layer)
    return [[f"{m}.{p}" for m, p in group] for group in groups]


def _checkpoint_names(model: str) -> set[str]:
    """Parameter names the checkpoint holds (Hugging Face names, as load_weights expects them)."""
    from safetensors import safe_open

    names: set[str] = set()
    for f in sorted(Path(model).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            names.update(st.keys())
    if not names:
        raise FileNotFoundError(f"no *.safetensors weights in {model!r}")
    return names


def _build_llm(config: VllmEngine.Config):
    # In-process engine core: must be set before vLLM reads its environment.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if config.cpu_threads is not None:
        # vLLM keeps torch's thread count when OMP_NUM_THREADS is set (else it drops to 1), and
        # its CPU worker then blocks torch.set_num_threads: set both before it starts.
        os.environ["OMP_NUM_THREADS"] = str(config.cpu_threads)
        torch.set_num_threads(config.cpu_threads)

    from vllm import LLM
    from vllm.platforms import current_platform

    check_device(config.dtype, config.quantization, current_platform)
    on_cpu = current_platform.is_cpu()
    if on_cpu:
        check_cpu_head_size(config.model)
    kv_gib = config.kv_cache_gib
    if kv_gib is None and on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        # Without an explicit size vLLM's CPU backend reserves gpu_memory_utilization of *host*
        # memory and refuses to start when that much is not free.
        kv_gib = 1.0
    kwargs: dict[str, Any] = dict(
        model=config.model,
        dtype=config.dtype,
        tensor_parallel_size=config.tensor_parallel,
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs,
        enable_prefix_caching=config.enable_prefix_caching,
        enforce_eager=on_cpu if config.compile is None else not config.compile,
        seed=config.seed,
        logprobs_mode="processed_logprobs",  # mu after temperature/top-p: see module doc
        max_logprobs=1,  # only the sampled token's log-prob is ever asked for
        disable_log_stats=True,
    )
    if kv_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(kv_gib * _GiB)
    if config.block_size is not None:
        kwargs["block_size"] = config.block_size
    if config.quantization is not None:
        kwargs["quantization"] = config.quantization
    kwargs.update(config.extra)
    with _private_torch_world():
        return LLM(**kwargs)


@contextlib.contextmanager
def _private_torch_world():
    """Let vLLM's worker set up torch.distributed as if it were alone, and undo that for the process.

    vLLM's worker makes torch.distributed's *default* group its world: it creates one (world
    size 1) when there is none, and adopts an existing one otherwise. In an mpirl job the
    default group already spans every rank that holds a model (the weight transport's), so vLLM would run
    collectives over ranks that never join them: the generator hangs. And were the engine
    built first, its 1-rank default group would stand where the transport's must go.
    So: hide the current default group (if any) while vLLM starts, then put it back. vLLM
    keeps its own groups (handles it holds, all of size 1, whose collectives it skips); the
    process's default group is the caller's again (or none). Tensor parallelism > 1 runs
    its workers in their own processes, where none of this applies.
    Tested under mpirun with the engine built after and before ``init_torch_distributed``.
    """
    import torch.distributed as dist

    if not dist.is_available():
        yield
        return
    from torch.distributed.distributed_c10d import _world

    global _engines_started
    ours, count = _world.default_pg, _world.group_count
    _world.default_pg = None
    # Group names come from a per-process counter and must agree across ranks for every group
    # created later (they prefix the rendezvous keys): number vLLM's groups far away (each
    # engine of the process in a range of its own), then resume the caller's count as if vLLM
    # had created none.
    _engines_started += 1
    _world.group_count = count + _VLLM_GROUP_NAME_OFFSET * _engines_started
    try:
        yield
    finally:
        _world.default_pg, _world.group_count = ours, count
