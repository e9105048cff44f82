"""The contract every generation engine meets, so the generator role cannot tell them apart.

An engine samples ``n`` responses for each prompt and reports, per generated token, the
token id and its log-probability under the distribution it was *sampled from* (the
behaviour policy mu of AIPO: after temperature and top-p). It takes new weights in place,
by Hugging Face parameter name, without being rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
from pydantic import Field, model_validator

from roles.engines.sim_cost import SimConfig
from roles.sections.base import Section

if TYPE_CHECKING:
    import torch


class EngineConfig(Section):
    """Which engine a generator rank drives and its options (part of ``world.generator``)."""

    # torch: our KV-cache sampler; vllm: in-process vllm.LLM; sim: a benchmark instrument that
    # models generation time and returns random tokens (roles.engines.sim_engine; bench/scale.py)
    engine: Literal["torch", "vllm", "sim"] = "torch"
    # The generator's parameter dtype; None: model.dtype (the trainers'). A narrower one (a
    # float32 trainer, bfloat16 generators) halves the weight bytes each sync moves: the
    # trainers cast as they send. Its log-probs are then mu, and AIPO's ratio corrects it.
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    # Weight quantization for generation, applied by the generator to the weights it receives
    # after every sync (the trainers never quantize): int8, weight-only linear layers (torchao),
    # for the torch engine; fp8, vLLM's on-the-fly fp8 (CUDA GPUs), for vllm. None: none.
    quantization: Literal["int8", "fp8"] | None = None
    tensor_parallel: int = Field(1, gt=0)  # devices one vLLM engine spans (GPU only)
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)  # vLLM's share of device memory
    # vLLM's KV cache per engine, in GiB, instead of what gpu_memory_utilization leaves on a
    # GPU (the default there); on CPU the default is 1 GiB (VLLM_CPU_KVCACHE_SPACE overrides).
    kv_cache_gib: float | None = Field(None, gt=0)
    # vLLM: torch.compile the model (and CUDA graphs on GPUs). None = on GPUs, off on CPU, where
    # compiling costs about a minute at start-up.
    compile: bool | None = None
    sim: SimConfig | None = None  # engine: sim only: the modelled cost of generation
    # Streaming (rollout.mode: stream): sequences one engine decodes at once (its slots);
    # None: a step's share of prompts x samples_per_prompt, as a batch would hold.
    max_seqs: int | None = Field(None, gt=0, le=1 << 16)
    # What an in-flight weight update does to running sequences' KV cache: keep it (PipelineRL;
    # tokens after the update attend to KV the old weights computed) or recompute it from the
    # new weights (AReaL: one prefill of every running sequence). docs/architecture.md.
    inflight_kv: Literal["keep", "recompute"] = "keep"
    # vLLM with model.lora: merge each sync's adapters into a copy of the base and reload every
    # weight (merged), or apply them with vLLM's own LoRA layers (native: no reload, but its CPU
    # kernels generated 2.4x slower). None: merged. docs/lora.md has both measured.
    lora_mode: Literal["native", "merged"] | None = None

    @model_validator(mode="after")
    def _vllm_only_options(self) -> EngineConfig:
        if self.sim is not None and self.engine != "sim":
            raise ValueError(f"sim applies to engine: sim only (engine is {self.engine!r})")
        if self.engine == "sim" and self.sim is None:
            self.sim = SimConfig()
        if self.engine != "vllm" and self.lora_mode is not None:
            raise ValueError(
                f"lora_mode applies to engine: vllm only (engine is {self.engine!r}, which applies "
                "the adapters in its own LoRA forward)"
            )
        if self.engine != "vllm" and self.compile is not None:
            raise ValueError(f"compile applies to engine: vllm only (engine is {self.engine!r})")
        if self.quantization == "int8" and self.engine != "torch":
            raise ValueError(
                "quantization 'int8' is the torch engine's (torchao int8 weight-only); vLLM's "
                "on-the-fly scheme is 'fp8' (CUDA GPUs)"
            )
        if self.quantization == "fp8" and self.engine != "vllm":
            raise ValueError("quantization 'fp8' is vLLM's (engine: vllm, on CUDA GPUs); the torch engine's is 'int8'")
        if self.engine != "vllm" and self.kv_cache_gib is not None:
            raise ValueError(
                f"kv_cache_gib ({self.kv_cache_gib}) applies to engine: vllm only; the torch engine "
                "sizes its cache from each batch"
            )
        if self.engine != "vllm" and self.tensor_parallel != 1:
            raise ValueError(
                f"tensor_parallel ({self.tensor_parallel}) applies to engine: vllm only; the torch "
                "engine runs the whole model on one device"
            )
        return self


@dataclass
class SamplingConfig:
    temperature: float = 1.0  # softmax temperature; the behaviour log-probs include it. 0 = greedy
    top_p: float = 1.0  # nucleus sampling mass; 1.0 keeps the whole vocabulary
    max_new_tokens: int = 16  # hard cap on response length (finish_reason "length")
    seed: int | None = None  # base seed for the engine's sampler; None = nondeterministic


@dataclass
class Sample:
    response_ids: np.ndarray  # int32 [T]: generated tokens, EOS included when it was sampled
    logprobs: np.ndarray  # float32 [T]: log mu(token) under the sampling distribution
    finish_reason: str  # "stop" (EOS sampled) or "length" (max_new_tokens reached)
    # int32 [T]: the policy version that sampled each token (streaming engines; None: all one
    # version, the generator's when it sampled the batch)
    versions: np.ndarray | None = None


class Engine(Protocol):
    def generate(self, prompts: list[np.ndarray], n: int, sampling: SamplingConfig) -> list[list[Sample]]:
        """Sample ``n`` responses per prompt (int32 token ids); result[i][j] is sample j of prompt i."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> None:
        """Replace the weights in place (Hugging Face names); no rebuild, no stale KV cache.
        ``version``: the policy version they are (streamed tokens record it; None: one more)."""
        ...
