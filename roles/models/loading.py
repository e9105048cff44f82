"""Loading a Hugging Face model folder, refusing one whose weights do not cover its model.

Apart from ``roles.policy.model`` so that a generator's torch engine loads its model without
importing the trainer's sharding (FSDP) modules.
"""

from __future__ import annotations

import torch


def load_complete(path, dtype: torch.dtype) -> torch.nn.Module:
    """``AutoModelForCausalLM.from_pretrained``, refusing a folder whose weights do not cover the
    model its config.json describes (a ``ValueError`` naming the missing tensors).

    transformers fills missing weights with random ones and says so only in a log line (which
    launch/__init__.py keeps quiet): the trainer and the generator would start from different
    random tensors.
    """
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, output_loading_info=True)
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        shown = ", ".join(missing[:5]) + (f", ... ({len(missing)} in all)" if len(missing) > 5 else "")
        raise ValueError(
            f"model.path {str(path)!r}: its weights lack tensors the model of its config.json has, "
            f"which would start random: {shown}"
        )
    return model
