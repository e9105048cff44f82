"""What a message is: a dataclass registered under a wire name, at this build's schema version."""

from __future__ import annotations

import dataclasses

# 2: lists of small 1-d arrays travel as one ragged extension; 3: example ids, eval tags;
# 4: streaming; 5: a critic's per-token advantages on a Rollout; 6: episodes (loss masks);
# 7: dynamic sampling (a scored group's all-equal flag on GroupReady); 8: notices' windows
SCHEMA_VERSION = 8


class CodecError(ValueError):
    """Bytes that do not decode into a valid message; the text says what is wrong."""


_REGISTRY: dict[str, type] = {}


def message(cls=None, *, name: str | None = None):
    """Class decorator: make ``cls`` a dataclass and register it as a wire message type."""

    def wrap(c):
        if not dataclasses.is_dataclass(c):
            c = dataclasses.dataclass(c)
        type_name = name or c.__name__
        if type_name in _REGISTRY and _REGISTRY[type_name] is not c:
            raise ValueError(f"message type {type_name!r} is registered twice")
        _REGISTRY[type_name] = c
        c.__message_type__ = type_name
        return c

    return wrap if cls is None else wrap(cls)


def registered_types() -> dict[str, type]:
    return dict(_REGISTRY)
