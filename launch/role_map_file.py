"""Reading a role-map file: bounded in size and shape, with YAML read as users write it.

A role map is a page of YAML. What no role map needs is refused before it can cost minutes or
gigabytes — a huge file, nesting deep enough to exhaust the parser's stack, aliases that expand
into far more values than the text holds — each as one :class:`ConfigError` line naming the
file. Knows nothing of the schema: what the mapping must hold is ``launch/config.py``'s.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from launch.config import ConfigError
from roles.sections.base import shortened_path

MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but ``1e-5`` is a float (YAML 1.1 wants ``1.0e-5``; 1.2 and users
    do not), and a key written twice in one mapping is an error: PyYAML keeps the last, so a
    second ``run:`` block would silently replace the first one whole. Keys a merge (``<<``) brings
    may still be overridden, as YAML intends."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first_line[key] + 1})", key_node.start_mark
                    )
                first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """Parse role-map YAML (safe: no Python objects), with numbers read as users write them."""
    return yaml.load(text, Loader=_YamlLoader)


def read_role_map_file(path: Path) -> Any:
    """The YAML document of the role-map file at ``path``, which must be there."""
    try:
        found = path.is_file()
    except OSError as e:  # a name too long: said, not a traceback
        raise ConfigError(f"cannot look for a role-map file at {shortened_path(path)!r}: {e.strerror or e}") from None
    if not found:
        raise ConfigError(f"no role-map file at {str(path)!r}")
    return read_yaml_file(path)


def read_yaml_file(path: Path) -> Any:
    """The YAML document of the role-map file at ``path``, or a ConfigError saying what is wrong."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path}: is {size} bytes; a role map is at most {MAX_FILE_BYTES} (is it the right file?)"
            )
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: is not UTF-8 text (byte {e.start} is {raw[e.start]:#04x})") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a role map") from None
    _check_size(data, str(path))
    return data


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: what, and where (its own text spans several, with excerpts)."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    context = getattr(e, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}" + (f" ({context})" if context else "")


def _check_size(data: Any, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH and more than MAX_VALUES values once aliases are
    expanded (each alias counts every value it stands for, as validation would visit them)."""
    seen, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(f"{source}: expands to more than {MAX_VALUES} values (YAML aliases?); not a role map")
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ConfigError(f"{source}: nested more than {MAX_DEPTH} levels deep; not a role map")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((item, depth + 1) for _, item in items)
