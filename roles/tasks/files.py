"""Reading rows from a user's local data files; nothing is ever downloaded.

Three kinds of source are read, chosen by what the path is:

- JSON Lines: ``.jsonl``, or ``.json`` with one object per line; a ``.json`` file whose
  text starts with ``[`` holds one JSON array of objects instead. Read with :mod:`json`
  line by line, so an error can name its line.
- Parquet: ``.parquet``, read with pyarrow, only the needed columns.
- A folder written by ``datasets.Dataset.save_to_disk``, read with ``datasets.load_from_disk``
  (memory-mapped Arrow). A ``DatasetDict`` folder is refused: the user names one split's folder.

This module knows files, columns and rows; it knows nothing of tasks, prompts or answers.
Every failure is a :class:`~roles.tasks.base.TaskDataError` that names the role-map field
that named the file (``task.train_files[0]``), the file, and what is wrong. pyarrow and
datasets are imported only when a file of theirs is read: naming a JSONL file costs neither.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from roles import hub_cache
from roles.sections.base import shortened_path
from roles.tasks.base import TaskDataError

Kind = Literal["jsonl", "json", "parquet", "saved"]
_SUFFIXES: dict[str, Kind] = {".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
_SUPPORTED = ".jsonl, .json, .parquet, or a folder written by datasets' save_to_disk"
# Compressed files are not read: the JSON Lines reader names lines, and Parquet compresses inside.
_COMPRESSED = {".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4", ".tar", ".tgz"}


@dataclass(frozen=True)
class FileRows:
    """The rows of one file, holding only the columns asked for (and found)."""

    field: str  # the role-map field that named the file, for messages
    path: str  # as the user wrote it
    columns: tuple[str, ...]  # every column the file has (JSON Lines: every key seen)
    rows: list[dict[str, Any]]  # row i: {column: value} for the asked-for columns it has
    lines: list[int] | None = None  # JSON Lines: the 1-based line of row i, for messages

    def where(self, i: int) -> str:
        """Row ``i`` as a message names it: ``row 7``, or ``row 7 (line 9)`` in JSON Lines."""
        return f"row {i}" if self.lines is None else f"row {i} (line {self.lines[i]})"

    def error(self, problem: str) -> TaskDataError:
        return TaskDataError(_name(self.field, self.path, problem))


def _name(field: str | None, path: str | Path, problem: str) -> str:
    return f"{field}: {path}: {problem}" if field else f"{path}: {problem}"


def check_path(path: str | Path, field: str | None = None) -> Kind:
    """The kind of source at ``path``, from its name and a look at the folder (no reading).

    Cheap enough for config parsing: it checks that the path exists, is a file with a known
    extension or a ``save_to_disk`` folder of one dataset. ``field`` prefixes the message;
    config validators leave it out because pydantic already places the error.
    """
    p = Path(path)
    try:
        p.stat()
    except FileNotFoundError:
        pass
    except OSError as e:  # a name too long, a folder we may not enter: said, not a traceback
        raise TaskDataError(_name(field, shortened_path(path), f"cannot look at it: {e.strerror or e}")) from None
    if not p.exists():
        raise TaskDataError(_name(field, path, f"no such file or folder{_missing_hint(path, p)}"))
    if p.is_dir():
        _check_saved_folder(p, path, field)
        return "saved"
    kind = _SUFFIXES.get(p.suffix.lower())
    if kind is None:
        what = f"unknown file type {p.suffix!r}" if p.suffix else "no file extension"
        if p.suffix.lower() in _COMPRESSED:
            what = f"a compressed file ({p.suffix}), which is not read: decompress it first"
        raise TaskDataError(_name(field, path, f"{what} (supported: {_SUPPORTED})"))
    return kind


def _missing_hint(path: str | Path, p: Path) -> str:
    """Where a missing relative path was looked for, and why a shell pattern did not match."""
    where = "" if p.is_absolute() else f" (resolved to {p.resolve()})"
    # Paths are never shell-expanded: say so, rather than leave "~" or "*" a mystery.
    if str(path).startswith("~"):
        where += "; '~' is not expanded here: write the full path"
    elif any(c in str(path) for c in "*?["):
        where += "; patterns are not expanded: list each file"
    return where + hub_cache.bare_dataset_hint(str(path))


def _check_saved_folder(p: Path, path: str | Path, field: str | None) -> None:
    """A folder must be one dataset's ``save_to_disk`` output, not a DatasetDict or a folder of shards."""
    if (p / "dataset_dict.json").is_file():
        try:
            splits = json.loads((p / "dataset_dict.json").read_text())["splits"]
        except (OSError, ValueError, KeyError, TypeError):
            splits = sorted(c.name for c in p.iterdir() if c.is_dir())
        example = p / splits[0] if splits else p / "train"
        listed = ", ".join(map(str, splits)) or "none"
        message = f"a DatasetDict folder (splits: {listed}); name one split's folder, e.g. {example}"
        raise TaskDataError(_name(field, path, message))
    if not (p / "state.json").is_file():
        # A folder of shards (a hub download's data/train-0000x-of-0000n.parquet) is common:
        # name the files to list, since a folder's own order of them would be a guess.
        shards = sorted(c.name for c in p.iterdir() if c.is_file() and c.suffix.lower() in _SUFFIXES)
        hint = ""
        if shards:
            shown = ", ".join(shards[:3]) + (f", ... ({len(shards)} in all)" if len(shards) > 3 else "")
            hint = f"; it holds data files ({shown}): list each of them in the field instead"
        message = f"a folder, but not one written by datasets' save_to_disk (it has no state.json){hint}"
        raise TaskDataError(_name(field, path, message))


def read_rows(path: str | Path, field: str, columns: Sequence[str], optional: Sequence[str] = ()) -> FileRows:
    """The rows of ``path`` with ``columns`` (each must be in the file) and those of ``optional``
    that the file has. Values are plain Python (str, int, list, dict, None)."""
    kind = check_path(path, field)
    wanted = list(dict.fromkeys([*columns, *optional]))
    if kind == "parquet":
        return _read_parquet(path, field, columns, wanted)
    if kind == "saved":
        return _read_saved(path, field, columns, wanted)
    return _read_json(path, field, kind, columns, wanted)


def no_column(wanted: str | Sequence[str], present: Sequence[str]) -> str:
    """The message for a column the file lacks (or all of several alternatives), listing
    those it has."""
    names = [wanted] if isinstance(wanted, str) else list(wanted)
    return f"no column {' or '.join(map(repr, names))} (columns: {', '.join(present) or 'none'})"


def _present(names: Sequence[str], required: Sequence[str], wanted: list[str], field, path):
    """The columns of ``wanted`` the file has; an error for a required one it lacks."""
    missing = [c for c in required if c not in names]
    if missing:
        raise TaskDataError(_name(field, path, no_column(missing[0], names)))
    return [c for c in wanted if c in names]


def _read_parquet(path, field: str, required, wanted: list[str]) -> FileRows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        names = tuple(pf.schema_arrow.names)
        # The column check comes before reading, so a wrong column name costs no read.
        table = pf.read(columns=_present(names, required, wanted, field, path))
    except (pa.ArrowException, OSError) as e:
        raise TaskDataError(_name(field, path, f"not a readable Parquet file ({type(e).__name__}: {e})")) from None
    return FileRows(field, str(path), names, table.to_pylist())


def _read_saved(path, field: str, required, wanted: list[str]) -> FileRows:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; each is the user's to see
        raise TaskDataError(
            _name(field, path, f"cannot load this save_to_disk folder ({type(e).__name__}: {e})")
        ) from None
    if not isinstance(ds, datasets.Dataset):  # check_path saw no dataset_dict.json, but be sure
        raise TaskDataError(_name(field, path, f"holds a {type(ds).__name__}, not one Dataset"))
    names = tuple(ds.column_names)
    try:
        rows = ds.select_columns(_present(names, required, wanted, field, path)).to_list()
    except TaskDataError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged Arrow file shows only when read
        raise TaskDataError(
            _name(field, path, f"cannot read this save_to_disk folder ({type(e).__name__}: {e})")
        ) from None
    return FileRows(field, str(path), names, rows)


def _read_json(path, field: str, kind: Kind, required, wanted: list[str]) -> FileRows:
    names: dict[str, None] = {}  # every key seen, in order of first appearance
    rows: list[dict[str, Any]] = []

    def keep(obj: dict) -> None:
        names.update(dict.fromkeys(obj))
        rows.append({k: obj[k] for k in wanted if k in obj})  # drop what no one asked for

    try:
        with open(path, encoding="utf-8-sig") as f:  # -sig: a BOM is not part of line 1
            if kind == "json" and _starts_array(f):
                lines = None
                for obj in _json_array(f.read(), field, path):
                    keep(obj)
            else:  # line by line: the file's text is never held whole
                lines = []
                for n, obj in _json_lines(f, field, path, hint=kind == "json"):
                    keep(obj)
                    lines.append(n)
    except (OSError, UnicodeDecodeError) as e:
        raise TaskDataError(_name(field, path, f"cannot read as UTF-8 text ({e})")) from None
    # A key in some objects only is a column with missing values there (as in Arrow). A file
    # without a single row has no columns at all: that is "no rows", not a missing column.
    if rows:
        _present(tuple(names), required, wanted, field, path)
    return FileRows(field, str(path), tuple(names), rows, lines)


def _starts_array(f) -> bool:
    """Whether the text's first non-blank character opens a JSON array; ``f`` is rewound."""
    while (c := f.read(1)) and c.isspace():
        pass
    f.seek(0)
    return c == "["


def _json_array(text: str, field: str, path) -> list[dict]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskDataError(_name(field, path, f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}")) from None
    except (ValueError, RecursionError) as e:  # valid JSON that Python will not hold (see _json_lines)
        raise TaskDataError(_name(field, path, f"unreadable JSON ({_unreadable(e)})")) from None
    for i, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise TaskDataError(_name(field, path, f"item {i} of the JSON array is a {_json_type(obj)}, not an object"))
    return data


def _json_lines(lines, field: str, path, hint: bool):
    """``(line number, object)`` for each non-blank line."""
    # A pretty-printed .json object fails on its first line; say what the two forms are.
    tip = " (a .json file holds one object per line, or one array of objects)" if hint else ""
    for n, line in enumerate(lines, start=1):
        if not line.strip():  # blank lines (a trailing one, above all) are not rows
            continue
        line = line.rstrip("\r\n")  # else an error at the line's end is "column 1" of the next
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            where = f"column {e.colno}" + (" (the end of the line)" if e.pos >= len(line) else "")
            raise TaskDataError(_name(field, path, f"line {n}: invalid JSON at {where}: {e.msg}{tip}")) from None
        except (ValueError, RecursionError) as e:
            raise TaskDataError(_name(field, path, f"line {n}: unreadable JSON ({_unreadable(e)})")) from None
        if not isinstance(obj, dict):
            raise TaskDataError(
                _name(field, path, f"line {n}: a JSON {_json_type(obj)}, where each line holds one object{tip}")
            )
        yield n, obj


def _unreadable(e: Exception) -> str:
    """Why well-formed JSON still failed to load: Python's limits on integer digits (4300) and
    on nesting (the recursion limit) turn a valid document into a ValueError or RecursionError."""
    if isinstance(e, RecursionError):
        return "nested too deeply for Python's JSON parser"
    return f"{e}".split(";")[0]


def _json_type(value: Any) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)
