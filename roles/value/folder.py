"""Whether a model folder can become a value model: its config.json's ``model_type`` has a
token-classification class in transformers (``AutoModelForTokenClassification``: the decoder
with a per-token linear head, here of one label).

Runs in the role map's check, on the controller's rank, which must not import torch: the
transformers table is read from its source as text, and only a ``model_type`` missing there
costs the import of the live mapping (which also holds plug-ins' registrations). Knows
nothing of weights: a folder that passes may still lack them (the loader says).
"""

from __future__ import annotations

import json
from pathlib import Path

from roles.models.transformers_tables import table_from_source

TABLE = "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"


def check_value_model_folder(path: str | Path) -> str:
    """The token-classification class name (e.g. ``LlamaForTokenClassification``) of the model
    folder ``path``, or a ValueError whose message reads after the field's name ("critic.path: ")."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{str(path)!r} is not a folder (a Hugging Face model folder is needed)")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{str(path)!r} has no config.json: not a Hugging Face model folder")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{str(config_file)!r} cannot be read as JSON ({e})") from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"{str(config_file)!r} names no model_type, so no value head can be put on its model")
    name = token_classification_class(model_type)
    if name is None:
        raise ValueError(
            f"{str(path)!r} is a {model_type!r} model, which transformers has no token-classification "
            "class for: it cannot carry a value head (one scalar per token); use a decoder such as "
            "llama or qwen2"
        )
    return name


def token_classification_class(model_type: str) -> str | None:
    """transformers' token-classification class name for ``model_type``, or None if it has none."""
    table = _table_from_source()
    if table is not None and model_type in table:
        return table[model_type]
    try:  # imports torch: only for a name the source table lacks
        from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES
    except Exception:  # noqa: BLE001 - a transformers laid out otherwise: the table read is all we have
        return None
    return MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES.get(model_type)


def _table_from_source() -> dict[str, str] | None:
    return table_from_source("models/auto/modeling_auto.py", TABLE)
    return None
