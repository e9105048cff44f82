"""The wire layout of plain messages, for code that encodes and decodes them without this
package (the compiled mailbox path, transports/fast_codec.pyx)."""

from __future__ import annotations

import dataclasses
from typing import Any

from transports.codec.builders import _is_plain
from transports.codec.encoding import _ENCODE_SPECS, _encode_spec
from transports.codec.registry import _REGISTRY
from transports.codec.validation import _NONE, _exact_types, _hints

# The values the compiled mailbox path (transports/fast_codec.pyx) packs and checks itself.
_PLAIN_SCALARS = frozenset([int, float, str, bytes, bool, _NONE])


def plain_message_spec(cls) -> tuple | None:
    """How a message of ``cls`` travels, for code that encodes and decodes it without this module.

    ``(wire name, packed map header with the "type" and "v" entries, size of the field map's
    own header that this one replaces, field names, exact types allowed per field)``, for a
    registered plain dataclass (see :func:`_is_plain`) whose every field's hint admits only
    scalars (int, float, str, bytes, bool, None, or a union of them): its map is then all
    there is to its wire form, and a type test per field all there is to checking one. None
    for every other class: the compiled path hands those to :func:`encode_frames` and
    :func:`decode`, as it does any message whose values are not of those exact types.
    """
    type_name = getattr(cls, "__message_type__", None)
    if type_name is None or _REGISTRY.get(type_name) is not cls or not _is_plain(cls):
        return None
    try:
        hints = _hints(cls)
    except Exception:  # noqa: BLE001 - hints that do not resolve: the general path decides
        return None
    names = tuple(f.name for f in dataclasses.fields(cls))
    allowed = []
    for name in names:
        exact = _exact_types(hints.get(name, Any))
        if exact is None or not exact <= _PLAIN_SCALARS:
            return None
        allowed.append(exact)
    prefix, skip = (_ENCODE_SPECS.get(cls) or _encode_spec(cls))[:2]
    return type_name, prefix, skip, names, tuple(allowed)
