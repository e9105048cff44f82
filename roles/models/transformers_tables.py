"""transformers' auto-class tables read from their source, without importing transformers.

Importing ``transformers.models.auto`` takes seconds and imports torch; the role map's checks
run on ranks that must not (the controller). The tables are ``OrderedDict([(model_type, class
name), ...])`` literals in that package's files, parsed here; None when a file is not laid out
so (the caller then falls back to the import, or refuses nothing).
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path


@cache
def table_from_source(module_file: str, name: str) -> dict[str, str] | None:
    """The table ``name`` assigned in ``transformers/<module_file>`` (e.g.
    ``models/auto/modeling_auto.py``), as ``{model_type: class name}``."""
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    source = Path(spec.submodule_search_locations[0]) / module_file
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Call)
            and node.value.args
        ):
            try:
                return dict(ast.literal_eval(node.value.args[0]))
            except (ValueError, TypeError):
                return None
    return None
