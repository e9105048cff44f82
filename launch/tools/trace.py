"""``mpirl trace RUN_DIR``: the spans of every rank as a Perfetto trace and a PNG timeline.

Open ``trace.json`` in https://ui.perfetto.dev (or chrome://tracing): one track per rank,
named by its role. ``timeline.png`` shows the same lanes, coloured by activity, so the
overlap of generation and training (or its absence) is visible at a glance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from roles.run_files import ROLE_MAP, SPANS, TIMELINE, TRACE, json_objects
from runtime.spans import START_PREFIX, STOP_PREFIX

COLOURS = {
    "generate": "#4C72B0",
    "score": "#DD8452",
    "train": "#55A868",
    "weight_send": "#C44E52",
    "weight_receive": "#8172B3",
    "wait": "#CCCCCC",
}
# Start-up and shutdown phases (runtime/spans.py: "start.imports", "stop.finish", ...): one colour each.
PHASE_COLOURS = {START_PREFIX: ("start-up", "#E5C494"), STOP_PREFIX: ("shutdown", "#B3B3B3")}


def colour_of(name: str) -> str:
    for prefix, (_, colour) in PHASE_COLOURS.items():
        if name.startswith(prefix):
            return colour
    return COLOURS.get(name, "#937860")


class TraceError(ValueError):
    """The trace cannot be written (its files are in the way, the folder is read-only); the message says why."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _valid_span(line: dict) -> bool:
    """A span the trace can place: a name, and finite times that do not run backwards (one NaN
    start would move every rank's times to infinity, t0 being their minimum)."""
    start, end = line.get("start"), line.get("end")
    return isinstance(line.get("name"), str) and _is_time(start) and _is_time(end) and end >= start


def _valid_header(line: dict) -> bool:
    return (
        _is_int(line.get("rank"))
        and line["rank"] >= 0
        and isinstance(line.get("role"), str)
        and _is_int(line.get("index"))
    )


def _expected_ranks(run_dir: Path) -> int | None:
    """The job's rank count from the run's copy of its role map, when it can be read: so that a
    rank whose span file is missing altogether (the last one too) is named, not silently absent."""
    from launch.tools.report.runs import rank_count, read_config, section

    config, _ = read_config(run_dir / ROLE_MAP)
    counts = [rank_count(value) for value in section(config, "world").values()]
    return None if None in counts else sum(counts) or None


def read_spans(run_dir: Path, notes: list[str] | None = None) -> list[dict]:
    """One dict per rank: rank, role, index, spans (name, start, end).

    Each rank appends to its file every few seconds as it runs (runtime/spans.py), so a run
    that was killed or crashed leaves its spans up to then, perhaps with a line cut short:
    undecodable lines are skipped, and a file without its header line is left out. What was
    skipped or left out, and the ranks with no spans at all, go to ``notes`` when it is given.
    """
    notes = [] if notes is None else notes
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: a file, not a run's out folder (run.out)")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such folder")
    files = sorted((run_dir / SPANS).glob("rank-*.jsonl"))
    ranks = []
    for f in files:
        try:
            lines, undecodable = json_objects(f.read_bytes().splitlines())
        except OSError as e:  # a folder of that name, an unreadable file
            notes.append(f"{f}: unreadable ({e.strerror or e}): left out")
            continue
        bad = len(undecodable)
        if not lines or not _valid_header(lines[0]):
            notes.append(f"{f}: no header line (rank, role, index): left out")
            continue
        header, spans = lines[0], [s for s in lines[1:] if _valid_span(s)]
        bad += len(lines) - 1 - len(spans)
        if bad:
            notes.append(f"{f}: {bad} undecodable or incomplete line{'s' if bad > 1 else ''} skipped")
        ranks.append({**header, "spans": spans})
    if not ranks:
        raise FileNotFoundError(f"no spans in {run_dir / SPANS}: is {run_dir} a run's out folder (run.out)?")
    found = {r["rank"] for r in ranks}
    if len(found) < len(ranks):  # a file copied or renamed in: two lanes would share one track
        twice = sorted({r["rank"] for r in ranks if sum(q["rank"] == r["rank"] for q in ranks) > 1})
        notes.append(f"{run_dir / SPANS}: rank {', '.join(map(str, twice))} has more than one span file")
    expected = _expected_ranks(run_dir) or max(found) + 1
    missing = sorted(set(range(expected)) - found)
    if missing:
        shown = ", ".join(str(m) for m in missing[:10]) + (", ..." if len(missing) > 10 else "")
        notes.append(f"{run_dir / SPANS}: no spans of rank{'s' if len(missing) > 1 else ''} {shown}: not in the trace")
    return ranks


def chrome_trace(ranks: list[dict]) -> dict:
    t0 = min((s["start"] for r in ranks for s in r["spans"]), default=0.0)
    events = []
    for r in ranks:
        label = f"rank {r['rank']}: {r['role']} {r['index']}"
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r["rank"], "args": {"name": label}})
        for s in r["spans"]:
            events.append(
                {
                    "name": s["name"],
                    "cat": r["role"],
                    "ph": "X",
                    "pid": 0,
                    "tid": r["rank"],
                    "ts": (s["start"] - t0) * 1e6,
                    "dur": (s["end"] - s["start"]) * 1e6,
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def timeline_png(ranks: list[dict], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = min((s["start"] for r in ranks for s in r["spans"]), default=0.0)
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(ranks) + 1.5))
    for lane, r in enumerate(ranks):
        by_name: dict[str, list] = {}
        for s in r["spans"]:
            by_name.setdefault(s["name"], []).append((s["start"] - t0, s["end"] - s["start"]))
        for name, bars in by_name.items():
            ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=colour_of(name))
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"{r['role']} {r['index']} (rank {r['rank']})" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first span")
    used = {s["name"] for r in ranks for s in r["spans"]}
    handles = [Patch(color=c, label=n) for n, c in COLOURS.items() if n in used]
    handles += [
        Patch(color=c, label=label)
        for prefix, (label, c) in PHASE_COLOURS.items()
        if any(n.startswith(prefix) for n in used)
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        ncol=6,
        frameon=False,
    )
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_trace(run_dir: Path, title: str | None = None, notes: list[str] | None = None) -> list[Path]:
    """``trace.json`` and ``timeline.png`` in ``run_dir`` (those of an earlier trace are replaced);
    ``notes``: as for :func:`read_spans`."""
    run_dir = Path(run_dir)
    ranks = read_spans(run_dir, notes)
    trace_path = run_dir / TRACE
    png_path = run_dir / TIMELINE
    try:
        trace_path.write_text(json.dumps(chrome_trace(ranks), allow_nan=False))  # strict JSON: Perfetto's
        timeline_png(ranks, png_path, title if title is not None else str(run_dir))
    except OSError as e:  # a read-only folder, a full disk, a folder of that name: one line, not a traceback
        raise TraceError(f"{e.filename or run_dir}: cannot write the trace there ({e.strerror or e})") from e
    return [trace_path, png_path]
