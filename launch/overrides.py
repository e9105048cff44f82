"""Dotted command-line overrides of a role map: ``rollout.temperature=0.7 world.generator.ranks=2``.

Each ``KEY=VALUE`` sets one value in the file's data before it is validated, so an override
is checked exactly as the same line in the file would be (an unknown key or a bad value: exit
2 naming it). Values are YAML (``0.7``, ``true``, ``[a, b]``, ``{ranks: 2}``, ``null``); keys are
the sections' names joined by dots. What ran is the merged role map: the run folder's
``config.yaml`` records it (``merged_text``), and a resume compares against it.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from launch.role_map_file import load_yaml


class OverrideError(ValueError):
    """An override that cannot be applied (malformed, or under a value that is not a section)."""


def parse_overrides(items: list[str]) -> list[tuple[list[str], Any]]:
    """``KEY=VALUE`` strings as (key path, value) pairs."""
    out = []
    for item in items:
        key, eq, text = item.partition("=")
        path = key.strip().split(".")
        if not eq or not all(part.strip() for part in path):
            raise OverrideError(f"override {item!r}: write KEY=VALUE with a dotted key, e.g. rollout.temperature=0.7")
        try:
            value = load_yaml(text) if text.strip() else ""
        except yaml.YAMLError as e:
            raise OverrideError(f"override {item!r}: the value is not YAML ({e.__class__.__name__})") from None
        out.append(([p.strip() for p in path], value))
    return out


def apply_overrides(data: Any, overrides: list[tuple[list[str], Any]]) -> Any:
    """A copy of the file's ``data`` with each override set, in order (a later one wins)."""
    if not overrides:
        return data
    if not isinstance(data, dict):
        raise OverrideError("overrides apply to a role map that is a mapping of sections")
    data = copy.deepcopy(data)
    for path, value in overrides:
        node = data
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if child is None:  # an empty section in the file (``eval:``)
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise OverrideError(
                    f"override {'.'.join(path)}: {where} is {child!r} in the file, not a section; "
                    f"set {where} itself (e.g. {where}={{...}}) or write its long form in the file"
                )
            node = child
        node[path[-1]] = value
    return data


def merged_text(data: dict, source: str, items: list[str]) -> str:
    """The merged role map as YAML, headed by where it came from (the run folder's config.yaml)."""
    head = f"# {source}, with the command line's overrides: {' '.join(items)}\n"
    return head + yaml.safe_dump(data, sort_keys=False)
