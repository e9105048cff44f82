"""What a generator's device can run under vLLM, checked before vLLM loads anything.

vLLM's own errors for a dtype, quantization or head size the device cannot run come late (at
the first generation, after every rank started) and name no role-map field; these name it.
"""

from __future__ import annotations


class DeviceUnsupported(ValueError):
    """The generator's device cannot run the role map's dtype or quantization (the field named)."""


def check_device(dtype: str, quantization: str | None, platform) -> None:
    """Refuse, before vLLM loads anything, a ``world.generator.dtype`` or ``quantization`` this
    device cannot run, naming the field (vLLM's own errors come later and name neither).
    ``platform``: vLLM's ``current_platform`` (a stand-in in the tests)."""
    import torch

    if getattr(torch, dtype, None) not in platform.supported_dtypes:
        supported = ", ".join(str(d).removeprefix("torch.") for d in platform.supported_dtypes)
        raise DeviceUnsupported(
            f"world.generator.dtype {dtype!r}: vLLM on this device ({platform.device_name}) runs {supported}"
        )
    cuda = platform.is_cuda_alike()
    if cuda and dtype == "bfloat16" and not platform.has_device_capability(80):
        raise DeviceUnsupported(
            f"world.generator.dtype 'bfloat16' needs a GPU of compute capability 8.0 or more; this one is "
            f"{_capability(platform)}: use float16"
        )
    if quantization is None:
        return
    if not cuda:
        raise DeviceUnsupported(
            f"world.generator.quantization {quantization!r}: vLLM quantizes on the fly on CUDA GPUs only, and "
            f"this generator runs on {platform.device_name}; on CPU use engine: torch with quantization: int8"
        )
    from vllm.model_executor.layers.quantization import get_quantization_config

    needed = get_quantization_config(quantization).get_min_capability()
    if not platform.has_device_capability(needed):
        raise DeviceUnsupported(
            f"world.generator.quantization {quantization!r} needs a GPU of compute capability "
            f"{needed // 10}.{needed % 10} or more; this one is {_capability(platform)}"
        )


def check_cpu_head_size(model: str) -> None:
    """Refuse, at build, a model whose attention head size vLLM's CPU backend cannot run: vLLM
    itself says so only at the first generation, after every rank has started, and names
    neither the model nor what would run (head_dim 16: "Unsupported CPU attention configuration")."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    from roles.models import config_int, read_lm_config

    data = read_lm_config(model)
    head = config_int(data, "head_dim")
    hidden, heads = config_int(data, "hidden_size"), config_int(data, "num_attention_heads")
    if head is None and hidden is not None and heads:
        head = hidden // heads
    if head is not None and not CPUAttentionBackend.supports_head_size(head):
        sizes = ", ".join(str(n) for n in CPUAttentionBackend.get_supported_head_sizes())
        raise DeviceUnsupported(
            f"model.path {model!r}: its attention heads are {head} wide, and vLLM's CPU backend runs "
            f"head sizes {sizes} only; use world.generator.engine: torch for this model on CPU"
        )


def _capability(platform) -> str:
    cap = platform.get_device_capability()
    return "unknown" if cap is None else f"{cap.major}.{cap.minor}"
