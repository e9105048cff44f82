"""Generation engines a generator rank can drive (``torch``, ``vllm``), built from ``EngineConfig``."""

from roles.engines.base import EngineConfig, Sample, SamplingConfig
from roles.models import torch_dtype


def make_engine(config: EngineConfig, model, *, max_seqs: int, seed: int = 0, module=None):
    """The engine ``config`` names, loaded from ``model`` (the role map's ``ModelConfig``).

    ``max_seqs``: sequences one generation batch decodes (prompts x samples).
    ``module``: an in-memory model the torch engine samples with directly (colocated mode).
    """
    if config.engine == "torch":
        from roles.engines.torch_engine import TorchEngine

        if module is not None:
            return TorchEngine(module)  # sample with the caller's module: shared, not copied
        return TorchEngine(model.path, dtype=torch_dtype(config.dtype or model.dtype), quantization=config.quantization)
    if config.engine == "vllm":
        from roles.engines.vllm_engine import VllmEngine

        return VllmEngine.from_config(config, model, max_seqs=max_seqs, seed=seed)
    if config.engine == "sim":
        from roles.engines.sim_engine import SimEngine

        return SimEngine(config.sim, seed=seed)
    raise ValueError(f"world.generator.engine: unknown engine {config.engine!r}")


__all__ = ["EngineConfig", "Sample", "SamplingConfig", "make_engine"]
