"""The shape of the library: imports point downward only, no import cycle, no module over 400
lines and no function over 60 in runtime/, roles/ and launch/, and every package says in its
``__init__`` docstring what it holds. Read from the source with ast: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.paths import REPO

# Each layer may import itself and the layers after it in this list, never one before it.
LAYERS = ["launch", "roles", "runtime", "transports"]
ALLOWED = {
    "transports": {"transports"},
    "runtime": {"runtime", "transports"},
    "roles": {"roles", "runtime", "transports"},
    "launch": {"launch", "roles", "runtime", "transports"},
}
SIZED = ("runtime", "roles", "launch")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules(package: str) -> list[Path]:
    return sorted(p for p in (REPO / package).rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports included)."""
    names: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


LIBRARY = {module_name(p): p for layer in LAYERS for p in modules(layer)}


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_downward_and_never_into_examples_tests_or_bench(layer):
    wrong = []
    for path in modules(layer):
        for name in imported(path):
            top = name.split(".")[0]
            if top in LAYERS and top not in ALLOWED[layer] or top in ("examples", "tests", "support", "bench"):
                wrong.append(f"{path.relative_to(REPO)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_library_modules():
    graph = {name: {n for n in imported(path) if n in LIBRARY and n != name} for name, path in LIBRARY.items()}
    # A package's __init__ importing its own submodules is how a package exposes them, not a cycle.
    for name in graph:
        graph[name] = {n for n in graph[name] if not n.startswith(name + ".")}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", SIZED)
def test_modules_and_functions_stay_small(package):
    too_long = []
    for path in modules(package):
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(REPO)}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)


def test_every_package_says_what_it_holds():
    silent = []
    for layer in LAYERS:
        for init in (REPO / layer).rglob("__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            if len(doc.split()) < 8:
                silent.append(str(init.relative_to(REPO)))
    assert not silent, "packages without a docstring saying what they hold: " + ", ".join(silent)
