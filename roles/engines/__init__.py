"""Generation engines a generator rank can drive (``torch``, ``vllm``)."""


def make_engine(cfg, seed: int = 0, model=None):
    """The engine the role map asks for, loaded from ``model.path``.

    ``model``: an in-memory module the torch engine samples with directly (colocated mode).
    """
    engine = cfg.world.generator.engine
    if engine == "torch":
        from roles.engines.torch_engine import TorchEngine

        if model is not None:
            return TorchEngine(model)  # sample with the caller's module: shared, not copied
        from roles.weights import DTYPES

        return TorchEngine(cfg.model.path, dtype=DTYPES[cfg.model.dtype])
    if engine == "vllm":
        from roles.engines.vllm_engine import VllmEngine

        return VllmEngine.from_role_map(cfg, seed=seed)
    raise ValueError(f"world.generator.engine: unknown engine {engine!r}")
