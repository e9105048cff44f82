"""Generation engines a generator rank can drive (``torch``, ``vllm``), built from ``EngineConfig``."""

from roles.engines.base import EngineConfig, Sample, SamplingConfig
from roles.models import torch_dtype


def make_engine(
    config: EngineConfig, model, *, max_seqs: int, seed: int = 0, module=None, stop_ids: tuple[int, ...] | None = None
):
    """The engine ``config`` names, loaded from ``model`` (the role map's ``ModelConfig``).

    ``max_seqs``: sequences one generation batch decodes (prompts x samples).
    ``module``: an in-memory model the torch engine samples with directly (colocated mode).
    ``stop_ids``: the tokenizer's EOS, which ends a response too (a chat template's end of
    turn), as in vLLM; None: read from the model folder's tokenizer. A job passes the one the
    controller's preflight found (launch/builders.py), so generators do not load the tokenizer.
    """
    if config.engine == "torch":
        from roles.engines.torch_engine import TorchEngine
        from roles.tokenizer import eos_ids

        if stop_ids is None:
            stop_ids = eos_ids(model.path)
        if module is not None:
            return TorchEngine(module, stop_ids=stop_ids)  # sample with the caller's module: shared, not copied
        return TorchEngine(
            model.path,
            dtype=torch_dtype(config.dtype or model.dtype),
            quantization=config.quantization,
            stop_ids=stop_ids,
        )
    if config.engine == "vllm":
        from roles.engines.vllm_engine import VllmEngine

        return VllmEngine.from_config(config, model, max_seqs=max_seqs, seed=seed)
    if config.engine == "sim":
        from roles.engines.sim_engine import SimEngine

        return SimEngine(config.sim, seed=seed)
    raise ValueError(f"world.generator.engine: unknown engine {config.engine!r}")


__all__ = ["EngineConfig", "Sample", "SamplingConfig", "make_engine"]
