"""``mpirl report RUN_DIR [RUN_DIR ...]``: PNG figures and a Markdown page for one or several runs.

Is it learning, and where does the time go? ``report.md`` has a table of the runs side by
side (status, totals, reward and eval figures, key settings), the figures beside it
(``figures.py``: several runs on one axis, so a speed-up shows) and a few generations.
Runs may be finished, still going, or resumed (``runs.py`` reads them tolerantly).

Holds the report only: reading run folders (``runs.py``), drawing (``figures.py``), the page
(``page.py``). Knows nothing of a live job: it reads the files a run left (``run.out``),
imports nothing that starts MPI or loads a model, and works on runs whose ranks are gone.
"""

from __future__ import annotations

from pathlib import Path

from launch.tools.report.runs import ReportError, Run, load_runs

__all__ = ["ReportError", "Run", "load_runs", "write_report"]


def write_report(run_dirs: list[Path], out: Path) -> Path:
    """Write the figures and ``report.md`` into ``out``; return the page's path."""
    from launch.tools.report import episode_figures, figures
    from launch.tools.report.page import write_page

    runs = load_runs([Path(d) for d in run_dirs])
    # The episodes' figure only for runs that had episodes: for others it is not "skipped", it is not theirs.
    FIGURES = (*figures.FIGURES, *((episode_figures.FIGURE,) if episode_figures.applies(runs) else ()))
    out = Path(out)
    check_out(out, [file_name for file_name, *_ in FIGURES])
    try:
        out.mkdir(parents=True, exist_ok=True)
        figures = []
        for file_name, heading, draw, why_skipped in FIGURES:
            path = out / file_name
            path.unlink(missing_ok=True)  # a figure an earlier report drew, which the data no longer has
            figures.append((heading, draw(runs, path), why_skipped))
        return write_page(runs, figures, out)
    except OSError as e:  # a full disk, a read-only folder: one line, not a traceback
        where = e.filename or out
        raise ReportError(f"{where}: cannot write the report there ({e.strerror or e})") from e


# The page's own line (page.render): how a report.md that an earlier ``mpirl report`` wrote is told
# from a file of the user's of that name, which must not be written over.
WRITTEN_BY = b"Written by `mpirl report`"


def check_out(out: Path, figure_names: list[str]) -> None:
    """Refuse, before anything is written, an ``--out`` that is a file, or a folder holding a
    ``report.md`` or figures of the report's names that no ``mpirl report`` wrote: writing the
    report again over its own earlier one is what re-running is for; over someone's files, not."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"{out}: a file, not a folder: give --out a folder to write the report into")
    if not out.is_dir():
        return
    page = out / "report.md"
    if page.is_file():
        try:
            with open(page, "rb") as f:
                ours = WRITTEN_BY in f.read(65536)
        except OSError:
            ours = False
    else:
        ours = False
    names = ["report.md"] + figure_names
    held = [n for n in names if (out / n).exists() and not (ours and (out / n).is_file())]
    if held:
        raise ReportError(
            f"{out}: holds {', '.join(held)} not written by mpirl report: "
            "choose another --out (or move them), so that nothing there is written over"
        )
