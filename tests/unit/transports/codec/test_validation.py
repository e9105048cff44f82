"""Checking a decoded map against its message class (transports/codec/validation.py): unknown
types, schema versions, missing, extra and wrongly-typed fields, each a named CodecError."""

from __future__ import annotations

import msgpack
import pytest

from support.codec_messages import (
    DROP,
    AnyMsg,
    body,
    pack,
)
from transports import codec
from transports.codec import CodecError


def test_defaults_fill_missing_optional_fields():
    got = codec.decode(msgpack.packb({"type": "CodecTestAny", "v": codec.SCHEMA_VERSION}))
    assert got == AnyMsg(None)


def test_unknown_message_type():
    with pytest.raises(CodecError, match="unknown message type 'NoSuchThing'"):
        codec.decode(pack(body(type="NoSuchThing")))


def test_missing_type():
    with pytest.raises(CodecError, match="no 'type' field"):
        codec.decode(pack(body(type=DROP)))


@pytest.mark.parametrize("version", [0, codec.SCHEMA_VERSION + 1, str(codec.SCHEMA_VERSION), None, DROP])
def test_wrong_schema_version(version):
    with pytest.raises(CodecError, match="CodecTestTyped: schema version"):
        codec.decode(pack(body(v=version)))


@pytest.mark.parametrize("field", ["n", "f", "s", "ids", "tags", "metrics"])
def test_missing_field(field):
    with pytest.raises(CodecError, match=f"CodecTestTyped: missing field '{field}'"):
        codec.decode(pack(body(**{field: DROP})))


def test_extra_field():
    with pytest.raises(CodecError, match="CodecTestTyped: unexpected field.*bogus"):
        codec.decode(pack(body(bogus=1)))


@pytest.mark.parametrize(
    "field,value,what",
    [
        ("n", "1", "expected int, got str"),
        ("n", True, "expected int, got bool"),
        ("n", 1.5, "expected int, got float"),
        ("f", "x", "expected float, got str"),
        ("s", 3, "expected str, got int"),
        ("ids", [1, 2, 3], "expected an array, got list"),
        ("tags", "a", "expected a list, got str"),
        ("tags", ["a", 2], "item 1: expected str, got int"),
        ("metrics", [1.0], "expected a map, got list"),
        ("metrics", {"r": "high"}, "key 'r': expected float, got str"),
        ("note", 5, "expected"),
        ("b", "text", "expected bytes, got str"),
    ],
)
def test_wrong_field_type(field, value, what):
    with pytest.raises(CodecError, match=f"CodecTestTyped.{field}: .*{what}"):
        codec.decode(pack(body(**{field: value})))


def test_non_string_field_name():
    with pytest.raises(CodecError, match="field names must be strings"):
        codec.decode(msgpack.packb({"type": "CodecTestAny", "v": codec.SCHEMA_VERSION, 1: 2}))
