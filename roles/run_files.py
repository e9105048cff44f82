"""A run's out folder (``run.out``): the names of its files, and the one reader of its JSON-lines logs.

The controller writes them (``roles.observe.run_log``, ``roles.controller``), the launcher copies
the role map in (``launch.run_folder``), and the offline tools read them (``launch.tools``:
report, trace, restarts; ``launch.recipe``). A log is read tolerantly: a run still
writing, or killed mid-write, leaves its last line cut short, and a damaged line is skipped and
noted, not fatal.

Knows nothing of what a record holds (steps, evals, spans), of a checkpoint's insides
(``roles.checkpoint``), or of how a run is shown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

METRICS = "metrics.jsonl"  # one line per trainer step: the run's record
EVAL = "eval.jsonl"  # one line per eval round
SAMPLES = "samples.jsonl"  # the generations shown
SUMMARY = "summary.json"  # written when the run stops
ROLE_MAP = "config.yaml"  # the role map the job was started with
CHECKPOINTS = "checkpoints"  # the run's checkpoints, unless checkpoint.dir puts them elsewhere
SPANS = "spans"  # every rank's timeline, rank-NNNN.jsonl (runtime.spans writes it; runtime is below roles/)
TENSORBOARD = "tensorboard"  # TensorBoard's event files
WANDB_RUN_ID = "wandb_run_id"  # a resumed run continues the same W&B run
TRACE = "trace.json"  # the spans as a Chrome trace (mpirl trace)
TIMELINE = "timeline.png"  # and as a picture


def json_objects(lines: list[bytes]) -> tuple[list[dict], list[int]]:
    """The JSON objects among ``lines`` (bytes, decoded one by one: what mpirl writes is ASCII, so
    a line that is not UTF-8 is damaged, not read with a garbled key), and the numbers (from 1)
    of the non-blank lines that are not one."""
    records, bad = [], []
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError too
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(number_)
    return records, bad


def read_jsonl(path: Path) -> tuple[list[dict], list[str]]:
    """The JSON objects of a JSON-lines file, and notes on the lines that were not one.

    A cut last line is told apart from damage elsewhere: it is what a run still writing leaves.
    A file that cannot be read (or is missing) raises OSError: whether that is an error is the
    caller's to say.
    """
    path = Path(path)
    lines = path.read_bytes().splitlines()
    records, bad = json_objects(lines)
    notes = []
    last = max((i for i, line in enumerate(lines, start=1) if line.strip()), default=0)
    if last in bad:
        bad.remove(last)
        notes.append(f"{path.name}: the last line (line {last}) is cut short or undecodable: skipped")
    if bad:
        shown = ", ".join(str(i) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
        notes.append(f"{path.name}: {len(bad)} undecodable line{'s' if len(bad) > 1 else ''} skipped (line {shown})")
    return records, notes


def keep_jsonl(path: str | Path, keep: Callable[[dict], bool]) -> list[dict]:
    """Rewrite a JSON-lines log with only the records ``keep(record)`` accepts; return them.

    A resumed run drops what was logged after its checkpoint, so the log has each step once.
    A last line cut short by the crash is dropped too.
    """
    path = Path(path)
    if not path.is_file():
        return []
    kept = [record for record in read_jsonl(path)[0] if keep(record)]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)
    return kept
