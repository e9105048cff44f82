"""Loading the value model: a model folder's decoder with a one-label token-classification head
(``score``: hidden -> 1, the value of each position), without dropout, sharded with FSDP2 over
the critic ranks.

A folder saved as a value model (``export_value_model``) brings its head. A causal LM's folder
(the policy's) has none: the head's tensors are drawn afresh from a fixed seed, so every critic
rank (FSDP2 keeps each rank's rows of what it built) and every run start from the same head. The
causal LM's ``lm_head`` is not loaded. Knows nothing of training or checkpoints.
"""

from __future__ import annotations

from pathlib import Path

import torch

from roles.policy.model import disable_dropout
from roles.policy.sharding import shard_model

HEAD = "score"  # transformers' name of the token-classification head
HEAD_SEED = 0


def load_value_model(
    path: str | Path, dtype: torch.dtype | str, group=None, device: str | torch.device = "cpu"
) -> torch.nn.Module:
    """The value model of ``path`` in ``dtype`` (a torch dtype or its name, "bfloat16") on
    ``device``, sharded over ``group`` (None or one rank: whole). Collective over ``group``.

    Missing tensors other than the head's: a ValueError naming them (transformers would fill
    them with random values, saying so only in a log line).
    """
    from transformers import AutoModelForTokenClassification

    if isinstance(dtype, str):
        from roles.models import torch_dtype

        dtype = torch_dtype(dtype)
    model, info = AutoModelForTokenClassification.from_pretrained(
        str(path), num_labels=1, dtype=dtype, output_loading_info=True
    )
    missing = sorted(info.get("missing_keys") or ())
    head = [k for k in missing if k.split(".")[0] == HEAD]
    body = [k for k in missing if k not in head]
    if body:
        shown = ", ".join(body[:5]) + (f", ... ({len(body)} in all)" if len(body) > 5 else "")
        raise ValueError(f"{str(path)!r}: its weights lack tensors of the value model's body: {shown}")
    if head:
        init_head(model, head)
    model.config.architectures = [type(model).__name__]  # what an export says it holds
    model = disable_dropout(model).to(device)
    return shard_model(model, group)


def init_head(model: torch.nn.Module, names: list[str]) -> None:
    """Draw the head's tensors in ``names`` from ``HEAD_SEED``: the weight normal with the
    model's ``initializer_range`` (its own init's scale), the bias 0. The caller's random state
    is left as it was."""
    std = float(getattr(model.config, "initializer_range", 0.02))
    params = dict(model.named_parameters())
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(HEAD_SEED)
        for name in names:
            p = params[name]
            if name.endswith("bias"):
                p.zero_()
            else:
                # Drawn in float32 then cast, so the head is the same draw in any dtype.
                p.copy_(torch.randn(p.shape, dtype=torch.float32) * std)
