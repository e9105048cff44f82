"""Finding a component by name: a built-in from a registry, or user code as ``package.module:Name``.

Tasks and rewards are looked up the same way, through one registry each (a dict of lazy
``module:attribute`` paths, so naming a component imports only that component); so are engines
(``roles.engines.ENGINES``, built-ins only). There is no if-chain on names anywhere: adding a
built-in is one module plus one registry line.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any


class PluginError(ValueError):
    """A component name that cannot be resolved; the message says what is wrong."""


def is_user_path(spec: str) -> bool:
    return ":" in spec


def import_object(spec: str, what: str) -> Any:
    """The attribute ``Name`` of ``package.module:Name``; ``what`` ("task", "reward") words errors."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or not all(part.isidentifier() for part in attr.split(".")):
        raise PluginError(f"a user {what} is written 'package.module:Name', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's to see, named
        raise PluginError(
            f"cannot import module {module_name!r} for {what} {spec!r}: {type(e).__name__}: {e}"
        ) from None
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise PluginError(f"module {module_name!r} has no {attr!r} (for {what} {spec!r})")
    return obj


def resolve(spec: str, registry: dict[str, str], what: str) -> Any:
    """A registered built-in (by name) or a user object (``package.module:Name``)."""
    if is_user_path(spec):
        return import_object(spec, what)
    if spec not in registry:
        raise PluginError(
            f"unknown {what} {spec!r} (built-ins: {', '.join(sorted(registry))}; or 'package.module:Name' for your own)"
        )
    return import_object(registry[spec], what)


def check_signature(fn: Any, args: tuple, what: str, expected: str) -> None:
    """Refuse ``fn`` unless it can be called with ``args`` (placeholders of the right number):
    a user function with the wrong parameters is named now, not at the first scored response.
    ``expected`` words the call it must accept (``(response, example)``)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or an extension without a signature: trust it
        return
    try:
        signature.bind(*args)
    except TypeError as e:
        raise PluginError(f"{what} must accept {expected}, but its signature is {signature} ({e})") from None
