"""A judge's engine and tokenizer, built on the reward rank from the generators' engine classes.

``engine: torch`` is a ``TorchEngine`` over the judge's folder on the rank's device (its GPU
when it has one: ``model_loading.pick_device``); ``engine: vllm`` an in-process ``VllmEngine``
whose context is the judge's prompt limit plus ``max_new_tokens``. Either stops at the judge
tokenizer's EOS (a chat template's end of turn) as well as the model's. Apart from ``judge``
so that the role map's checks read the judge's Config without importing torch or vLLM.
"""

from __future__ import annotations

import os

from roles.rewards.learned.base import ScorerContext


def build_judge_engine(config, context: ScorerContext):
    """(engine, tokenizer) for a ``JudgeConfig`` on this reward rank."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.path)
    seed = context.seed + context.rank_index
    if config.engine == "vllm":
        import torch

        from roles.engines.vllm_engine import VllmEngine

        if torch.cuda.is_available():  # vLLM in process takes the current device: the rank's slot
            torch.cuda.set_device(context.gpu_slot % torch.cuda.device_count())

        engine = VllmEngine(
            VllmEngine.Config(
                model=config.path,
                dtype=config.dtype,
                gpu_memory_utilization=config.gpu_memory_utilization,
                max_model_len=config.prompt_token_limit() + config.max_new_tokens,
                seed=seed,
            )
        )
        return engine, tokenizer
    import torch

    from roles.engines.torch_engine import TorchEngine
    from roles.models import torch_dtype
    from roles.rewards.learned.model_loading import pick_device

    # A reward rank is not a model rank (launch/job.py): it takes the same thread budget here.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    eos = tokenizer.eos_token_id
    engine = TorchEngine(
        config.path,
        device=pick_device(config.device, context.gpu_slot),
        dtype=torch_dtype(config.dtype),
        stop_ids=() if eos is None else (int(eos),),
        capacity=1,  # the streaming half is never used: one batch per call
        seed=seed,
    )
    return engine, tokenizer
