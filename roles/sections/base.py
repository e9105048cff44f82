"""The base of every component's configuration section: strict, no unknown keys.

Each configurable component (a task, a reward, ...) declares its own nested ``Config``
subclass of :class:`Section`, with a comment per field; the role map in ``launch/config.py``
is composed of those sections under the same names. Unknown keys are errors (a typo must not
silently fall back to a default), and types are strict: ``steps: true``, ``steps: 2.5`` or
``ranks: "2"`` are mistakes to name, not values to coerce (an int is still a valid float).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class Section(BaseModel):
    # allow_inf_nan=False: `.inf` and `.nan` are YAML floats, and no setting here means either
    # (an infinite learning rate, a NaN timeout); refused wherever a float is read.
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True, allow_inf_nan=False)


def field_error(loc: tuple, message: str, value) -> ValidationError:
    """A validation error at ``loc`` inside the field being validated, so that a section's own
    check reads like pydantic's (``task.name: ...``, ``reward.components[0].name: ...``)."""
    return ValidationError.from_exception_data(
        "Section", [{"type": "value_error", "loc": loc, "input": value, "ctx": {"error": ValueError(message)}}]
    )


def shortened_path(path, keep: int = 120) -> str:
    """``path`` for an error message: one of thousands of characters is cut in the middle."""
    text = str(path)
    return text if len(text) <= keep else f"{text[: keep // 2]}...{text[-keep // 2 :]}"
