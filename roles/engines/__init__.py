"""Generation engines a generator rank drives, behind one contract (``roles.engines.base.Engine``), found by name.

``ENGINES`` is the registry of built-ins (lazy ``module:Class`` paths, so naming one engine imports
only it: vLLM is not imported by a torch run); each class builds itself from the role map with
``from_config``. The role map's ``world.generator.engine`` accepts exactly these names
(``EngineConfig``). Modules:

- ``base``: the batch contract (``Engine``, ``Sample``, ``SamplingConfig``) and ``EngineConfig``;
- ``requests``: the request-level (streaming) contract every engine also meets: requests in at
  any time, each sample out as it ends, weights loaded in flight, per-token versions;
- ``torch_engine``: our KV-cache decode loop over a Hugging Face model (``quantization``: its
  int8; ``kv_cache``: a batch's cache; ``torch_stream``: continuous batching over a slot
  cache; ``sampling``: per-row sampling reproducible per sample);
- ``vllm_engine``: an in-process ``vllm.LLM`` (``vllm_device``: what the device can run under it;
  ``vllm_stream``: its request-level side, ``requests``' streaming contract);
- ``sim_engine``: a benchmark instrument that sleeps for the modelled time (``sim_cost``: that model).

Engines know nothing of messages, ranks or the generator role that drives them: they sample
token ids and take new weights by Hugging Face name.
"""

import importlib

from roles.engines.base import EngineConfig, Sample, SamplingConfig

ENGINES: dict[str, str] = {
    "torch": "roles.engines.torch_engine:TorchEngine",
    "vllm": "roles.engines.vllm_engine:VllmEngine",
    "sim": "roles.engines.sim_engine:SimEngine",
}


def engine_class(name: str) -> type:
    """The registered engine class called ``name``. Built-ins only (no ``package.module:Class``:
    the role map accepts these names), and an engine module that fails to import raises as is."""
    if name not in ENGINES:
        raise ValueError(f"world.generator.engine: unknown engine {name!r}")
    module, _, attr = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


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
    return engine_class(config.engine).from_config(
        config, model, max_seqs=max_seqs, seed=seed, module=module, stop_ids=stop_ids
    )


__all__ = ["ENGINES", "EngineConfig", "Sample", "SamplingConfig", "engine_class", "make_engine"]
