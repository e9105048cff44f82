"""Per message type, a generated function that builds a message from a decoded map in one flat
test: the decoding fast path."""

from __future__ import annotations

import dataclasses
from typing import Any

from transports.codec.registry import _REGISTRY, SCHEMA_VERSION
from transports.codec.validation import _exact_types, _fits_for, _hints

# Decoding is on every message's path, so each message type gets a builder: a function,
# written for that type when its first message comes, that takes a decoded map and returns
# the message if the map is well-formed (every field there, no other, each value of a type its
# hint accepts), else None, and then _from_map finds and names the problem. Testing each
# value's exact type suffices because a decoded value is one of a few known types (msgpack's,
# plus arrays and tensors). Generated code, as dataclasses does for __init__: one flat
# expression costs a fraction of a loop over per-field checks.
_BUILDERS: dict[str, Any] = {}


def _never(body) -> None:
    return None


def _builder_for(body):
    """The builder for ``body``'s type (made now if need be), or one that always says None."""
    type_name = body.get("type") if type(body) is dict else None
    if type(type_name) is not str or type_name not in _REGISTRY:
        return _never
    build = _BUILDERS[type_name] = _make_builder(_REGISTRY[type_name])
    return build


def _make_builder(cls):
    hints = _hints(cls)
    env = {"cls": cls, "new": object.__new__, "VERSION": SCHEMA_VERSION}
    names = [f.name for f in dataclasses.fields(cls)]
    tests = []
    for i, name in enumerate(names):
        exact = _exact_types(hints[name])
        fits = None if exact is not None else _fits_for(hints[name])
        if exact is not None:
            env[f"t{i}"] = exact
            tests.append(f"type(v{i}) in t{i}")
        elif fits is not None:
            env[f"f{i}"] = fits
            tests.append(f"f{i}(v{i})")
        # else: any value fits, it only has to be there
    take = "\n        ".join(f"v{i} = body[{name!r}]" for i, name in enumerate(names))
    if _is_plain(cls):
        # Exactly what its __init__ does (self.<field> = <value>, in order), without the call.
        make = "\n        ".join(["msg = new(cls)"] + [f"msg.{name} = v{i}" for i, name in enumerate(names)])
        make += "\n        return msg"
    else:
        make = "return cls(" + ", ".join(f"{name}=v{i}" for i, name in enumerate(names)) + ")"
    source = f"""\
def build(body):
    if len(body) != {2 + len(names)} or body.get("v") != VERSION:
        return None
    try:
        {take or "pass"}
    except KeyError:
        return None
    if {" and ".join(tests) or "True"}:
        {make}
    return None
"""
    exec(compile(source, f"<codec builder for {cls.__name__}>", "exec"), env)
    return env["build"]


def _is_plain(cls) -> bool:
    """True if ``cls(**fields)`` only sets the fields, in order, with plain attribute stores:
    the __init__ is the one dataclasses wrote (its code has no file), the class is not
    frozen, has no __post_init__, no own __setattr__, and every field is an __init__ argument."""
    init = cls.__dict__.get("__init__")
    params = getattr(cls, "__dataclass_params__", None)
    return (
        init is not None
        and getattr(getattr(init, "__code__", None), "co_filename", None) == "<string>"
        and params is not None
        and not params.frozen
        and not hasattr(cls, "__post_init__")
        and cls.__setattr__ is object.__setattr__
        and all(f.init for f in dataclasses.fields(cls))
    )
