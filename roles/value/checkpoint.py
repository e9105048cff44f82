"""The value model's part of a checkpoint, and its export as a Hugging Face folder.

The shards of the model and of its optimizer go into ``<checkpoint>/critic`` beside the
trainers' ``<checkpoint>/trainer``, written as the trainers' are (``roles.checkpoint.trainer_state``:
torch.distributed.checkpoint, each critic rank its own shards, loadable onto any number of
critic ranks). The export gathers the whole model and the first critic rank writes it, head
included, so ``load_value_model`` loads it back as trained. Knows nothing of the checkpoint's
other parts or of when one is due.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from roles.checkpoint.trainer_state import load_trainer_state, save_trainer_state
from roles.policy.sharding import full_state

CRITIC_SHARDS = "critic"  # the critic ranks' folder in a checkpoint


def save_value_state(path: str | Path, model, optimizer, group) -> None:
    """The value model's and optimizer's shards into ``path/critic``. Collective over ``group``
    (the critic ranks; None when there is one)."""
    save_trainer_state(path, model, optimizer, group, shards=CRITIC_SHARDS, role="critic")


def load_value_state(path: str | Path, model, optimizer, group) -> None:
    """``path/critic`` into ``model`` and ``optimizer`` as they are sharded now (any number of
    critic ranks). Collective over ``group``."""
    load_trainer_state(path, model, optimizer, group, shards=CRITIC_SHARDS, role="critic")


def export_value_model(
    model: torch.nn.Module, out_dir: str | Path, *, group=None, tokenizer_dir: str | Path | None = None
) -> Path:
    """Write the value model as a Hugging Face folder: config.json (its token-classification
    class, one label), model.safetensors (every tensor whole) and, with ``tokenizer_dir``, that
    folder's tokenizer. Collective over ``group`` (the model's shards are gathered); the
    group's first rank writes, and every rank returns once it has written (or raises if it failed).

    Written by hand rather than with ``save_pretrained``, which under torch.distributed writes
    only on torch rank 0 (not a critic rank in a job).
    """
    state = full_state(model)  # collective when sharded
    out = Path(out_dir)
    failed: Exception | None = None
    if group is None or dist.get_rank(group) == 0:
        try:
            _write_folder(model.config, state, out, tokenizer_dir)
        except Exception as e:  # noqa: BLE001 - told to the others first, then raised
            failed = e
    if group is not None:  # the others wait for the folder, and learn whether it was written
        flag = torch.tensor([float(failed is not None)])  # on the CPU: any backend reduces it
        dist.all_reduce(flag, group=group)
        if failed is None and flag.item():
            raise RuntimeError(f"exporting the value model into {out} failed on the first critic rank")
    if failed is not None:
        raise failed
    return out


def _write_folder(config, state: dict[str, torch.Tensor], out: Path, tokenizer_dir) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {n: t.detach().cpu().contiguous() for n, t in state.items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out)
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(str(out))
