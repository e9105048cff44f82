"""Model families, the role map's ``model:`` section and the project's one dtype map.

``spec_for(config or model)`` picks the :class:`ModelSpec` of a Hugging Face model: by its
``architectures``, then its ``model_type``, else the generic spec (works for any causal LM
with tensor_parallel 1). Adding a family is one module next to ``llama.py`` and one entry in
``MODEL_SPECS``.

Importing this package does not import torch (the role-map parser imports it): torch comes
in only inside the functions that need it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import field_validator

from roles.models import generic, llama, qwen2
from roles.models.base import ModelSpec, layers_by_name
from roles.section import Section

if TYPE_CHECKING:
    import torch

    from transports.weights.plan import Need

__all__ = [
    "GENERIC",
    "MODEL_SPECS",
    "Dtype",
    "ModelConfig",
    "ModelSpec",
    "layers_by_name",
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


# ------------------------------------------------------------------- model: section


class ModelConfig(Section):
    path: str  # folder with a Hugging Face causal LM (config, safetensors, tokenizer)
    dtype: Dtype = "float32"  # the policy's parameter dtype (trainers and generators)

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        p = Path(v)
        if not p.is_dir():
            raise ValueError(f"no model folder at {v!r} (resolved to {p.resolve()})")
        if not (p / "config.json").is_file():
            raise ValueError(f"{v!r} has no config.json: not a Hugging Face model folder")
        return v

    def context_length(self) -> int | None:
        """``max_position_embeddings`` of the model's config.json (None when it has none)."""
        try:
            data = json.loads((Path(self.path) / "config.json").read_text())
        except (OSError, ValueError):
            return None
        if isinstance(data.get("text_config"), dict):  # multimodal configs nest the LM's
            data = {**data, **data["text_config"]}
        n = data.get("max_position_embeddings")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)
