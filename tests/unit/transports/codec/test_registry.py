"""Registering message types (transports/codec/registry.py)."""

from __future__ import annotations

import pytest

from support.codec_messages import AnyMsg  # noqa: F401 - registers the name taken twice below
from transports import codec


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):

        @codec.message(name="CodecTestAny")
        class Clash:
            x: int = 0
