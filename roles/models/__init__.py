"""Model families, the role map's ``model:`` section and the project's one dtype map.

``spec_for(config or model)`` picks the :class:`ModelSpec` of a Hugging Face model: by its
``architectures``, then its ``model_type``, else the generic spec (works for any causal LM
with tensor_parallel 1). Adding a family is one module next to ``llama.py`` and one entry in
``MODEL_SPECS``.

Importing this package does not import torch (the role-map parser imports it): torch comes
in only inside the functions that need it. It knows nothing of training, generation or
ranks: it describes models (``loading`` reads a complete one from its folder, ``tokenizer``
its tokenizer, without the auto classes once the class is known).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import field_validator, model_validator

from roles.models import generic, llama, qwen2
from roles.models.base import ModelSpec, layers_by_name
from roles.models.lora import LoraConfig
from roles.sections.base import Section, shortened_path

if TYPE_CHECKING:
    import torch

    from transports.weights.plan import Need

__all__ = [
    "CONFIG_ALIASES",
    "GENERIC",
    "MODEL_SPECS",
    "Dtype",
    "ModelConfig",
    "ModelSpec",
    "config_int",
    "layers_by_name",
    "read_lm_config",
    "spec_for",
    "torch_dtype",
    "tp_need",
]

MODEL_SPECS: dict[str, ModelSpec] = {s.name: s for s in (llama.SPEC, qwen2.SPEC)}
GENERIC = generic.SPEC


def spec_for(config_or_model: Any) -> ModelSpec:
    """The spec of a Hugging Face model, config object or config.json dict.

    ``architectures`` first (the class a checkpoint was saved from is the most precise),
    then ``model_type`` (a config built in code has no architectures), then the generic spec.
    """
    cfg = getattr(config_or_model, "config", config_or_model)  # a model carries its config
    if isinstance(cfg, Mapping):
        architectures, model_type = cfg.get("architectures"), cfg.get("model_type")
    else:
        architectures = getattr(cfg, "architectures", None)
        model_type = getattr(cfg, "model_type", None)
    for arch in architectures or ():
        for spec in MODEL_SPECS.values():  # a handful: no index to keep in step with the registry
            if arch in spec.architectures:
                return spec
    return MODEL_SPECS.get(model_type, GENERIC)


def tp_need(spec: ModelSpec, params: Iterable[tuple[str, Any]], tp_rank: int = 0, tp_size: int = 1) -> Need:
    """The weight-sync ``Need`` of tensor-parallel rank ``tp_rank`` of ``tp_size``.

    ``params``: ``(Hugging Face name, shape or tensor)`` of every parameter (a meta-device
    model's ``named_parameters()`` will do); unused when ``tp_size`` is 1, which wants the full
    weights of any family. ``tp_size`` > 1 with a family that has no rules: ValueError.
    """
    from transports.weights.plan import Need  # imports torch: only when asked for

    if tp_size == 1:
        return Need()
    return Need(tp_rank=tp_rank, tp_size=tp_size, split_dims=spec.split_dims(params))


# ---------------------------------------------------------------------------- dtypes

Dtype = Literal["float32", "bfloat16", "float16"]  # the parameter dtypes a role map may ask for


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a role map's dtype name ("bfloat16" -> torch.bfloat16)."""
    if name not in get_args(Dtype):
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(get_args(Dtype))}")
    import torch

    return getattr(torch, name)


# ------------------------------------------------------------- config.json sizes

# The standard name of a size in a Hugging Face config.json, then the names families use for it
# (GPT-2 ``n_positions``/``n_layer``/``n_embd``/``n_head``, MPT ``max_seq_len``/``d_model``/
# ``n_layers``/``n_heads``, Bloom and old Falcon ``n_embed``/``n_head_kv``, OPT ``ffn_dim``...).
# transformers resolves these through each configuration class's ``attribute_map`` (and a few
# ``__init__`` keywords), but importing any configuration class imports torch, which the
# controller rank must not (this package is imported by the role-map parser). So this table
# copies the aliases of transformers' causal-LM families (5.x); the first name present wins.
CONFIG_ALIASES: dict[str, tuple[str, ...]] = {
    "max_position_embeddings": (
        "max_position_embeddings",
        "n_positions",
        "n_ctx",
        "max_seq_len",
        "seq_length",
        "max_sequence_length",
    ),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "head_dim": ("head_dim", "kv_channels", "attention_head_dim"),
    "intermediate_size": ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
}


def folder_config(path: str | Path) -> dict:
    """``path/config.json`` as a dict; a ``ValueError`` saying what is wrong with the folder (the
    role map's checks of a learned reward's folder: config.json alone, no torch)."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{str(path)!r} is not a Hugging Face model folder (no config.json)")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{config_file}: cannot read it ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: not a JSON object")
    return config


def read_lm_config(path: str | Path) -> dict:
    """The language model's part of ``path/config.json`` ({} when unreadable): a multimodal
    config's ``text_config`` laid over the top level."""
    try:
        data = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    if isinstance(data.get("text_config"), dict):  # multimodal configs nest the LM's
        data = {**data, **data["text_config"]}
    return data


def config_int(data: Mapping, name: str) -> int | None:
    """The positive integer a config.json dict gives for the standard size ``name``, under its
    own name or a family's alias (:data:`CONFIG_ALIASES`); None when none is given."""
    for key in CONFIG_ALIASES.get(name, (name,)):
        v = data.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


# ------------------------------------------------------------------- model: section


class ModelConfig(Section):
    # Folder with a Hugging Face causal LM (config, safetensors, tokenizer), or a Hub name
    # (owner/name[@revision]) found in the local Hugging Face cache: then the snapshot folder.
    path: str
    dtype: Dtype = "float32"  # the policy's parameter dtype (trainers and generators)
    lora: LoraConfig | None = None  # train LoRA adapters on a frozen base (roles.models.lora)

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        from roles.hub_cache import model_folder

        v = model_folder(v)  # a Hub name becomes its cached snapshot: what every rank loads
        p = Path(v)
        try:
            if not p.is_dir():
                raise ValueError(f"no model folder at {v!r} (resolved to {p.resolve()})")
            if not (p / "config.json").is_file():
                raise ValueError(f"{v!r} has no config.json: not a Hugging Face model folder")
        except OSError as e:  # a name too long, a folder we may not enter: said, not a traceback
            raise ValueError(f"cannot look at {shortened_path(v)!r}: {e.strerror or e}") from None
        return v

    def context_length(self) -> int | None:
        """The model's context (``max_position_embeddings`` or the family's name for it, e.g.
        GPT-2's ``n_positions``) from its config.json; None when it states none."""
        return config_int(read_lm_config(self.path), "max_position_embeddings")

    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    @model_validator(mode="after")
    def _lora_fits_the_model(self) -> ModelConfig:
        if self.lora is not None:  # only then: it builds the model's structure (no weights)
            from roles.models.lora import check_targets

            check_targets(self.path, self.lora)
        return self
