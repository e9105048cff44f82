"""Whether a model folder can carry a value head, read from its config.json alone.

Apart from the value model's loading so that the role map's checks (run on the controller,
which never imports torch) stay light.
"""

from __future__ import annotations

import json
from pathlib import Path


def check_value_model_folder(path: str) -> None:
    """A ``ValueError`` unless ``path`` holds a config.json of a model family that transformers
    can build with a token-classification (per-token scalar) head."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{path!r} is not a Hugging Face model folder (no config.json)")
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except (OSError, ValueError) as e:
        raise ValueError(f"{config_file}: cannot read it ({e})") from None
    from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES

    if model_type not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES:
        raise ValueError(
            f"{path!r}: its architecture (model_type {model_type!r}) cannot carry a value head "
            "(transformers has no token-classification model of that family)"
        )
