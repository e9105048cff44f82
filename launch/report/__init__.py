"""``mpirl report RUN_DIR [RUN_DIR ...]``: PNG figures and a Markdown page for one or several runs.

Is it learning, and where does the time go? ``report.md`` has a table of the runs side by
side (status, totals, reward and eval figures, key settings), the figures beside it
(``figures.py``: several runs on one axis, so a speed-up shows) and a few generations.
Runs may be finished, still going, or resumed (``runs.py`` reads them tolerantly).
"""

from __future__ import annotations

from pathlib import Path

from launch.report.runs import ReportError, Run, load_runs

__all__ = ["ReportError", "Run", "load_runs", "write_report"]


def write_report(run_dirs: list[Path], out: Path) -> Path:
    """Write the figures and ``report.md`` into ``out``; return the page's path."""
    from launch.report.figures import FIGURES
    from launch.report.page import write_page

    runs = load_runs([Path(d) for d in run_dirs])
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"{out}: cannot write the report there ({e.strerror or e})") from e
    figures = []
    for file_name, heading, draw, why_skipped in FIGURES:
        path = out / file_name
        path.unlink(missing_ok=True)  # a figure an earlier report drew, which the data no longer has
        figures.append((heading, draw(runs, path), why_skipped))
    return write_page(runs, figures, out)
