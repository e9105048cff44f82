"""A checkpoint's policy, or its value model, written as a plain Hugging Face model folder
(``mpirl export``, ``mpirl export --critic``)."""

from __future__ import annotations

from pathlib import Path

from roles.checkpoint.layout import COMPLETE, SAVED_CONFIG, TRAINER_SHARDS, CheckpointIOError, is_complete
from roles.checkpoint.lora_base import check_base
from roles.checkpoint.resume import read_saved_config
from roles.checkpoint.trainer_state import dcp_errors_named, read_shard_index, single_process_is_meant


def export_hf(path: str | Path, out: str | Path, adapter: bool = False) -> Path:
    """Write the policy of checkpoint ``path`` as a plain Hugging Face folder (safetensors,
    config, generation config, tokenizer) that ``from_pretrained`` and vLLM load; a LoRA run's
    adapters merged into its base, or with ``adapter`` as a PEFT adapter folder instead.

    Runs in one process without torch.distributed: the trainers' shards, however many wrote
    them, are read into one whole model (the optimizer state is not read).
    """
    from roles.models import ModelConfig
    from roles.models.lora import LoraConfig, inject_lora, is_adapter, save_adapter_folder
    from roles.policy.model import Policy, load_model

    path = Path(path)
    saved = _saved_config(path)
    lora = LoraConfig.model_validate(saved["model"]["lora"]) if saved["model"].get("lora") else None
    if adapter and lora is None:
        raise CheckpointIOError(
            f"{path}: an adapter folder needs a LoRA run (model.lora); this one trained every weight"
        )
    model_cfg = ModelConfig.model_construct(**{**saved["model"], "lora": lora})
    if lora is not None:  # its adapters only: the base is model.path's, which must be the same
        check_base(path, model_cfg.path)
    model = load_model(model_cfg)
    if lora is not None:
        model = inject_lora(model, lora)
    _read_shards(model, path, TRAINER_SHARDS, "the policy", only=is_adapter if lora is not None else None)
    if adapter:
        return save_adapter_folder(model, lora, model_cfg.path, out)
    Policy(model, model_cfg.path, sharded=False, lora=lora).save(out, is_leader=True)
    return Path(out)


def export_critic_hf(path: str | Path, out: str | Path) -> Path:
    """Write the value model of checkpoint ``path`` (a run with critic ranks) as a Hugging Face
    folder (``*ForTokenClassification``, one label; the policy's tokenizer), which the
    ``critic.path`` of another run can start from. One process, as ``export_hf``."""
    from roles.value.checkpoint import CRITIC_SHARDS, export_value_model
    from roles.value.model import load_value_model

    path = Path(path)
    saved = _saved_config(path)
    if not (path / CRITIC_SHARDS).is_dir():
        raise CheckpointIOError(f"{path} holds no value model: the run had no critic ranks (world.critic)")
    critic = saved.get("critic") if isinstance(saved.get("critic"), dict) else {}
    start = critic.get("path") or saved["model"]["path"]
    model = load_value_model(start, critic.get("dtype") or saved["model"].get("dtype", "float32"))
    _read_shards(model, path, CRITIC_SHARDS, "the value model")
    return export_value_model(model, out, tokenizer_dir=saved["model"]["path"])


def _saved_config(path: Path) -> dict:
    """The checkpoint's role map, once its model folder (architecture, tokenizer) is found here."""
    if not is_complete(path):
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE} file)")
    saved = read_saved_config(path)
    # The architecture and tokenizer come from the run's model folder; the weights from here.
    model_path = saved.get("model", {}).get("path") if isinstance(saved.get("model"), dict) else None
    if not isinstance(model_path, str) or not (Path(model_path) / "config.json").is_file():
        raise CheckpointIOError(
            f"{path}/{SAVED_CONFIG}: its model.path {model_path!r}, whose architecture and tokenizer export "
            "writes with the checkpoint's weights, is not a model folder here (moved or removed?)"
        )
    return saved


def _read_shards(model, path: Path, folder: str, what: str, only=None) -> None:
    """``path/folder``'s shards, however many ranks wrote them, into ``model`` (whole); with
    ``only(name)``, those of the model's entries only (a LoRA policy's adapters)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

    from roles.checkpoint.storage.raw_shards import RawShardReader

    shards = path / folder
    read_shard_index(shards)
    state = {"model": {n: t for n, t in get_model_state_dict(model).items() if only is None or only(n)}}
    # A shard file cut short is DCP's CheckpointException (named by dcp_errors_named); anything
    # else that fails here names the checkpoint too, rather than escape as a traceback.
    with single_process_is_meant(), dcp_errors_named(f"reading {what} from", path):
        try:
            dcp.load(state, storage_reader=RawShardReader(shards), no_dist=True)
        except Exception as e:  # noqa: BLE001 - a damaged file raises any of many types
            raise CheckpointIOError(f"reading {what} from {path} failed ({type(e).__name__}: {e})") from e
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=only is None))
