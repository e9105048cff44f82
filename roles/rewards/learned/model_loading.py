"""Loading a scoring model on a reward rank's device, and its forward pass over token rows.

Apart from ``reward_model`` so that the role map's checks (run on the controller, which never
imports torch) read that module's Config without importing torch or transformers.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(wanted: str, gpu_slot: int) -> torch.device:
    """``auto``: a GPU when this rank has one, else the CPU. The GPU is the rank's slot on its
    node (``launch.distributed.gpu_slot``: after those of the generators and trainers); a node
    with fewer GPUs than slots shares them round-robin, said once in the log."""
    if wanted == "cpu" or (wanted == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("reward: device is cuda, but this reward rank sees no GPU")
    count = torch.cuda.device_count()
    if gpu_slot >= count:
        log.warning(
            "reward rank: GPU slot %d of a node with %d GPUs: it shares GPU %d", gpu_slot, count, gpu_slot % count
        )
    return torch.device("cuda", gpu_slot % count)


def load_classifier(config, context):
    """(model in eval mode, its tokenizer, the device) for a ``RewardModelConfig``."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    device = pick_device(config.device, context.gpu_slot)
    # A reward rank is not a model rank (launch/job.py): it takes the same thread budget here.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    tokenizer = AutoTokenizer.from_pretrained(config.path)
    model, info = AutoModelForSequenceClassification.from_pretrained(
        config.path, dtype=DTYPES[config.dtype], output_loading_info=True
    )
    missing = sorted(info.get("missing_keys") or ())
    if missing:  # transformers would fill them with random values, saying so only in a log line
        raise ValueError(f"reward model {config.path!r}: its weights lack {', '.join(missing[:5])}")
    model.eval().requires_grad_(False)
    if model.config.pad_token_id is None:  # transformers refuses batches without one; unused here
        model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if config.shard and context.group is not None:
        from roles.rewards.learned.sharded import shard_for_scoring

        shard_for_scoring(model, context.group, device)
    else:
        model.to(device)
    return model, tokenizer, device


@torch.no_grad()  # not inference_mode: FSDP2's gathered parameters must stay ordinary tensors
def forward_scores(model, rows: list[list[int]], pad_id: int, device: torch.device) -> list[float]:
    """Each row's single logit at its last token. Rows are right-padded; positions count from
    0 in every row, so a row scores the same alone or in any batch."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    ids, mask = ids.to(device), mask.to(device)
    last = mask.sum(1) - 1
    per_token = _per_token_logits(model, ids, mask)
    if per_token is None:  # an encoder classifier: its pooled logits are already per row
        out = model(input_ids=ids, attention_mask=mask).logits
    else:
        out = per_token[torch.arange(len(rows), device=per_token.device), last]
    return out[:, 0].float().cpu().tolist()


def _per_token_logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """The score head's output at every position (decoder reward models: ``model.score``),
    caught on its way to transformers' pooling, which finds the last token by the pad id."""
    head = getattr(model, "score", None)
    if not isinstance(head, torch.nn.Module):
        return None
    caught: list[torch.Tensor] = []
    handle = head.register_forward_hook(lambda _m, _i, out: caught.append(out))
    try:
        model(input_ids=ids, attention_mask=mask)
    finally:
        handle.remove()
    return caught[-1]
