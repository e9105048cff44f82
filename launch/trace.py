"""``mpirl trace RUN_DIR``: the spans of every rank as a Perfetto trace and a PNG timeline.

Open ``trace.json`` in https://ui.perfetto.dev (or chrome://tracing): one track per rank,
named by its role. ``timeline.png`` shows the same lanes, coloured by activity, so the
overlap of generation and training (or its absence) is visible at a glance.
"""

from __future__ import annotations

import json
from pathlib import Path

from runtime.spans import START_PREFIX, STOP_PREFIX

COLOURS = {
    "generate": "#4C72B0",
    "score": "#DD8452",
    "train": "#55A868",
    "weight_send": "#C44E52",
    "weight_receive": "#8172B3",
    "wait": "#CCCCCC",
}
# Start-up and shutdown phases (runtime/spans.py: "start.imports", "stop.finish", ...): one
# colour per kind, so the timeline shows how long a rank took to get going and to leave.
PHASE_COLOURS = {START_PREFIX: ("start-up", "#E5C494"), STOP_PREFIX: ("shutdown", "#B3B3B3")}


def colour_of(name: str) -> str:
    for prefix, (_, colour) in PHASE_COLOURS.items():
        if name.startswith(prefix):
            return colour
    return COLOURS.get(name, "#937860")


def read_spans(run_dir: Path) -> list[dict]:
    """One dict per rank: rank, role, index, spans (name, start, end).

    Each rank appends to its file every few seconds as it runs (runtime/spans.py), so a run
    that was killed or crashed leaves its spans up to then, perhaps with a line cut short:
    undecodable lines are skipped, and a file without its header line is left out.
    """
    files = sorted((run_dir / "spans").glob("rank-*.jsonl"))
    ranks = []
    for f in files:
        lines = []
        for text in f.read_text(errors="replace").splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if isinstance(line, dict):
                lines.append(line)
        if lines and "role" in lines[0]:
            header, spans = lines[0], [s for s in lines[1:] if {"name", "start", "end"} <= s.keys()]
            ranks.append({**header, "spans": spans})
    if not ranks:
        raise FileNotFoundError(f"no spans in {run_dir / 'spans'}: is {run_dir} a run's out folder (run.out)?")
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


def write_trace(run_dir: Path, title: str | None = None) -> list[Path]:
    ranks = read_spans(run_dir)
    trace_path = run_dir / "trace.json"
    trace_path.write_text(json.dumps(chrome_trace(ranks)))
    png_path = run_dir / "timeline.png"
    timeline_png(ranks, png_path, title if title is not None else str(run_dir))
    return [trace_path, png_path]
