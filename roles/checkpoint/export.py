"""A checkpoint's policy written as a plain Hugging Face model folder (``mpirl export``)."""

from __future__ import annotations

from pathlib import Path

from roles.checkpoint.layout import COMPLETE, SAVED_CONFIG, TRAINER_SHARDS, CheckpointIOError, is_complete
from roles.checkpoint.resume import read_saved_config
from roles.checkpoint.trainer_state import dcp_errors_named, read_shard_index, single_process_is_meant


def export_hf(path: str | Path, out: str | Path) -> Path:
    """Write the policy of checkpoint ``path`` as a plain Hugging Face folder (safetensors,
    config, generation config, tokenizer) that ``from_pretrained`` and vLLM load.

    Runs in one process without torch.distributed: the trainers' shards, however many wrote
    them, are read into one whole model (the optimizer state is not read).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from roles.checkpoint.storage.raw_shards import RawShardReader
    from roles.models import ModelConfig
    from roles.policy.model import Policy, load_model

    path = Path(path)
    if not is_complete(path):
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE} file)")
    saved = read_saved_config(path)
    shards = path / TRAINER_SHARDS
    read_shard_index(shards)
    # The architecture and tokenizer come from the run's model folder; the weights from here.
    model_path = saved.get("model", {}).get("path") if isinstance(saved.get("model"), dict) else None
    if not isinstance(model_path, str) or not (Path(model_path) / "config.json").is_file():
        raise CheckpointIOError(
            f"{path}/{SAVED_CONFIG}: its model.path {model_path!r}, whose architecture and tokenizer export "
            "writes with the checkpoint's weights, is not a model folder here (moved or removed?)"
        )
    model_cfg = ModelConfig.model_construct(**saved["model"])
    model = load_model(model_cfg)
    state = {"model": get_model_state_dict(model)}
    # A shard file cut short is DCP's CheckpointException (named by dcp_errors_named); anything
    # else that fails here names the checkpoint too, rather than escape as a traceback.
    with single_process_is_meant(), dcp_errors_named("reading the policy from", path):
        try:
            dcp.load(state, storage_reader=RawShardReader(shards), no_dist=True)
        except Exception as e:  # noqa: BLE001 - a damaged file raises any of many types
            raise CheckpointIOError(f"reading the policy from {path} failed ({type(e).__name__}: {e})") from e
    set_model_state_dict(model, state["model"])
    Policy(model, model_cfg.path, sharded=False).save(out, is_leader=True)
    return Path(out)
