"""Checking decoded values against a message class's type hints, and the careful decoding path
that names the first problem of a map that is not a valid message."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union

import numpy as np

from transports.codec.arrays import _torch_if_imported
from transports.codec.registry import _REGISTRY, SCHEMA_VERSION, CodecError

_NONE = type(None)
_DECODED_TYPES = (int, float, str, bytes, bool, _NONE, list, dict, np.ndarray)


def _from_map(body):
    """The careful path: validate ``body`` step by step and name the first problem."""
    if type(body) is not dict:
        raise CodecError(f"a message must be a map, got {type(body).__name__}")
    type_name = body.pop("type", None)
    if type_name is None:
        raise CodecError("message has no 'type' field")
    cls = _REGISTRY.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        raise CodecError(f"unknown message type {type_name!r} (known: {', '.join(sorted(_REGISTRY))})")
    version = body.pop("v", None)
    if version != SCHEMA_VERSION:
        raise CodecError(f"{type_name}: schema version {version!r}, this build speaks {SCHEMA_VERSION}")
    names, required, checks = _schema(cls)
    extra = body.keys() - names
    if extra:
        if not all(isinstance(k, str) for k in extra):
            raise CodecError(f"{type_name}: field names must be strings, got {sorted(map(repr, extra))}")
        raise CodecError(f"{type_name}: unexpected field(s) {', '.join(sorted(extra))}")
    if not required <= body.keys():
        missing = [n for n in names if n in required and n not in body]
        raise CodecError(f"{type_name}: missing field {missing[0]!r}")
    for name, hint in checks:
        problem = _type_problem(body[name], hint) if name in body else None
        if problem:
            raise CodecError(f"{type_name}.{name}: {problem}")
    return cls(**body)


_SCHEMA_CACHE: dict[type, tuple] = {}


def _schema(cls) -> tuple:
    """(field names in order, required names, [(name, hint)])."""
    got = _SCHEMA_CACHE.get(cls)
    if got is None:
        hints = _hints(cls)
        fields = dataclasses.fields(cls)
        names = tuple(f.name for f in fields)
        required = frozenset(
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        got = _SCHEMA_CACHE[cls] = (names, required, [(f.name, hints[f.name]) for f in fields])
    return got


def _decoded_types() -> tuple:
    # A field hinted as a tensor (or a base of one) comes from a module that imported torch.
    torch = _torch_if_imported()
    return _DECODED_TYPES + ((torch.Tensor,) if torch is not None else ())


def _exact_types(hint) -> frozenset | None:
    """The decoded types that fit ``hint``, when a type test alone decides; else None.

    Never wider than :func:`_type_problem`: what passes here passes there too.
    """
    if hint is Any or hint is object:
        return None
    if hint is int:
        return frozenset([int])  # not bool
    if hint is float:
        return frozenset([int, float])
    if hint is _NONE:
        return frozenset([_NONE])
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [_exact_types(h) for h in typing.get_args(hint)]
        return None if any(p is None for p in parts) else frozenset().union(*parts)
    if hint is list or hint is dict:
        return frozenset([hint])
    if origin is None and isinstance(hint, type):
        return frozenset(t for t in _decoded_types() if issubclass(t, hint))
    return None  # list[X], dict[K, V], TypeVars, ...: checked item by item, or not at all


def _fits_for(hint):
    """A fast test ``fits(decoded value) -> bool``, never wider than :func:`_type_problem`
    (None: anything fits). Items of lists and maps are tested in C where their hint allows."""
    if hint is Any or hint is object:
        return None
    exact = _exact_types(hint)
    if exact is not None:
        return lambda v: type(v) in exact
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        options = [_fits_for(h) for h in args]
        if any(o is None for o in options):
            return None
        return lambda v: any(o(v) for o in options)
    if origin is list:
        item = args[0] if args else Any
        exact = _exact_types(item)
        if exact is not None:
            return lambda v: type(v) is list and exact.issuperset(map(type, v))
        fits = _fits_for(item)
        if fits is None:
            return lambda v: type(v) is list
        return lambda v: type(v) is list and all(map(fits, v))
    if origin is dict and len(args) == 2:
        kfits, vfits = _fits_for(args[0]), _fits_for(args[1])
        kexact, vexact = _exact_types(args[0]), _exact_types(args[1])
        if kfits is None and vfits is None:
            return lambda v: type(v) is dict
        if kexact is not None and vexact is not None:
            return lambda v: (
                type(v) is dict and kexact.issuperset(map(type, v)) and vexact.issuperset(map(type, v.values()))
            )
    return lambda v: _type_problem(v, hint) is None


_HINT_CACHE: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINT_CACHE:
        _HINT_CACHE[cls] = typing.get_type_hints(cls)
    return _HINT_CACHE[cls]


def _type_problem(value, hint) -> str | None:
    """None if ``value`` fits ``hint``, else a short description of the mismatch."""
    if hint is Any or hint is object:
        return None
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if any(_type_problem(value, h) is None for h in options):
            return None
        return f"expected {_hint_name(hint)}, got {type(value).__name__}"
    if hint is type(None):
        return None if value is None else f"expected None, got {type(value).__name__}"
    if origin is list or hint is list:
        if not isinstance(value, list):
            return f"expected a list, got {type(value).__name__}"
        (item,) = typing.get_args(hint) or (Any,)
        for i, v in enumerate(value):
            p = _type_problem(v, item)
            if p:
                return f"item {i}: {p}"
        return None
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return f"expected a map, got {type(value).__name__}"
        args = typing.get_args(hint)
        if args:
            for k, v in value.items():
                p = _type_problem(k, args[0]) or _type_problem(v, args[1])
                if p:
                    return f"key {k!r}: {p}"
        return None
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"expected float, got {type(value).__name__}"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"expected int, got {type(value).__name__}"
    if hint is np.ndarray:
        return None if isinstance(value, np.ndarray) else f"expected an array, got {type(value).__name__}"
    if isinstance(hint, type):
        return None if isinstance(value, hint) else f"expected {hint.__name__}, got {type(value).__name__}"
    return None  # a hint we do not check (e.g. a TypeVar): accept


def _hint_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _may_hold_list(hint) -> bool:
    """False only for hints that rule a list out (int, str, np.ndarray, dict[...], ...)."""
    if hint is Any or hint is object:
        return True
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(_may_hold_list(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is not None:  # list[X], dict[K, V], Sequence[X], ...
        hint = typing.get_origin(hint)
    return not isinstance(hint, type) or issubclass(list, hint)
