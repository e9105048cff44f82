"""Reading run folders for ``mpirl report``: what the controller wrote, tolerantly.

A run folder may be finished, still going, stopped, or resumed: every file but
``metrics.jsonl`` may be absent, and the last line of a JSON-lines log may be cut short by
a write in progress. Nothing of that is an error; what was skipped is counted in
``Run.notes`` so the page can say so. Only a folder with no ``metrics.jsonl`` at all is
refused (``ReportError``): it is not a run's out folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from roles.run_files import EVAL, METRICS, ROLE_MAP, SAMPLES, SUMMARY, read_jsonl


class ReportError(ValueError):
    """A report cannot be written (not a run folder, an unwritable out folder); the message says why."""


@dataclass
class Run:
    path: Path
    name: str
    metrics: list[dict]  # one record per trainer step, in step order, each step once
    evals: list[dict] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    summary: dict | None = None  # None: no summary.json (still going, or stopped without one)
    config: dict | None = None  # None: no config.yaml, or one that does not parse
    notes: list[str] = field(default_factory=list)  # skipped lines, unreadable files

    @property
    def steps(self) -> int:
        return len(self.metrics)

    @property
    def configured_steps(self) -> int | None:
        steps = section(self.config, "run").get("steps")
        return steps if isinstance(steps, int) else None

    @property
    def status(self) -> str:
        """Finished, stopped early, or still going, from summary.json and the steps logged.

        The controller writes summary.json when it stops, on a preemption too, and a resumed run
        keeps the old one until it stops again: so a summary alone does not mean finished.
        """
        if self.summary is None:
            return "partial: no summary.json (still going, or stopped before writing one)"
        summary_steps = self.summary.get("steps")
        # bool is an int to Python: "steps": true would read as step 1 ("an earlier stop at step True")
        if isinstance(summary_steps, int) and not isinstance(summary_steps, bool) and self.steps > summary_steps:
            return f"resumed and still going: summary.json is from an earlier stop at step {summary_steps}"
        wanted = self.configured_steps
        if wanted is not None and self.steps < wanted:
            return f"stopped early: {self.steps} of {wanted} steps (preempted, or resumable)"
        return "finished"

    @property
    def finished(self) -> bool:
        return self.status == "finished"


def number(record: dict | None, key: str) -> float | None:
    """``record[key]`` as a float; ``key`` may be dotted (``trainer.ratio_mean``). None when absent,
    null, not a number, or not finite: every figure plots only what a step really measured."""
    value = record
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def section(config: dict | None, name: str) -> dict:
    """A top-level section of a role map, or {} when it is missing or not a mapping."""
    value = (config or {}).get(name)
    return value if isinstance(value, dict) else {}


def rank_count(value) -> int | None:
    """A ``world:`` entry's rank count: an int, or a mapping's ``ranks`` (1 when not given); None
    when it is neither."""
    count = value.get("ranks", 1) if isinstance(value, dict) else value
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def read_log(path: Path) -> tuple[list[dict], list[str]]:
    """A JSON-lines log's records and notes (``roles.run_files.read_jsonl``): none for a missing
    file, and a note for one that cannot be read."""
    if not path.is_file():
        return [], []
    try:
        return read_jsonl(path)
    except OSError as e:
        return [], [f"{path.name}: unreadable ({e.strerror or e})"]


def step_records(records: list[dict]) -> tuple[list[dict], list[str]]:
    """The metrics records in step order, each step once (a repeated step: the later line wins,
    as it would after a resume that re-ran it), and notes on what was dropped."""
    by_step: dict[int, dict] = {}
    no_step = repeated = 0
    for r in records:
        step = r.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            no_step += 1
            continue
        repeated += step in by_step
        by_step[step] = r
    notes = []
    if no_step:
        notes.append(f"{METRICS}: {no_step} record{'s' if no_step > 1 else ''} without a step number skipped")
    if repeated:
        notes.append(f"{METRICS}: {repeated} step{'s' if repeated > 1 else ''} logged twice: the later line kept")
    return [by_step[s] for s in sorted(by_step)], notes


def read_json(path: Path) -> tuple[dict | None, list[str]]:
    if not path.is_file():
        return None, []
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, [f"{path.name}: present but unreadable: ignored"]
    if not isinstance(value, dict):
        return None, [f"{path.name}: not a JSON object: ignored"]
    return value, []


def read_config(path: Path) -> tuple[dict | None, list[str]]:
    if not path.is_file():
        return None, []
    import yaml

    # Read as the launcher reads a role map (launch.role_map_file.load_yaml): 1e-5 is a number, and a key
    # written twice is an error, not the last one silently winning (advise would size the
    # layout from a second world: block the run never had).
    from launch.role_map_file import load_yaml

    try:
        value = load_yaml(path.read_text())
    except UnicodeDecodeError:  # a ValueError, not an OSError
        return None, [f"{path.name}: present but does not parse (not UTF-8): settings not shown"]
    except OSError as e:
        return None, [f"{path.name}: present but does not parse ({e.strerror or e}): settings not shown"]
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or type(e).__name__
        return None, [f"{path.name}: present but does not parse ({problem}): settings not shown"]
    if not isinstance(value, dict):
        return None, [f"{path.name}: not a mapping: settings not shown"]
    return value, []


def load_run(path: Path, name: str | None = None) -> Run:
    path = Path(path)
    if path.exists() and not path.is_dir():  # "no such folder" would send the user looking for a typo
        raise ReportError(f"{path}: a file, not a run folder (give the run.out folder of a run)")
    if not path.is_dir():
        raise ReportError(f"{path}: no such folder")
    if not (path / METRICS).is_file():
        raise ReportError(f"{path}: not a run folder (no {METRICS}; give the run.out folder of a run)")
    records, notes = read_log(path / METRICS)
    metrics, step_notes = step_records(records)
    evals, eval_notes = read_log(path / EVAL)
    samples, sample_notes = read_log(path / SAMPLES)
    summary, summary_notes = read_json(path / SUMMARY)
    config, config_notes = read_config(path / ROLE_MAP)
    run = Run(
        path=path,
        name=name or run_name(path),
        metrics=metrics,
        evals=evals,
        samples=samples,
        summary=summary,
        config=config,
        notes=notes + step_notes + eval_notes + sample_notes + summary_notes + config_notes,
    )
    run.notes += later_than_the_run(run)
    return run


def later_than_the_run(run: Run) -> list[str]:
    """A note on eval records dated after the run stopped: the controller opens eval.jsonl only
    when eval is on, so a run without eval in a reused folder leaves an older run's file there."""
    wall_s = number(run.summary, "wall_s")
    if wall_s is None or run.status.startswith("resumed"):
        return []
    late = [r for r in run.evals if (number(r, "elapsed_s") or 0.0) > 1.05 * wall_s + 1.0]
    if not late:
        return []
    return [
        f"{EVAL}: {len(late)} of {len(run.evals)} records are dated after the run stopped "
        f"(elapsed_s past summary.json's wall_s): probably left in this folder by an earlier run"
    ]


def run_name(path: Path, parents: int = 0) -> str:
    """The folder's name, with ``parents`` folders above it (``gsm/async``) when that is needed."""
    resolved = Path(path).resolve()
    parts = resolved.parts[1:] if resolved.anchor else resolved.parts  # not "/" itself: no "//tmp/..."
    return "/".join(parts[-1 - parents :]) if parts else str(path)


def load_runs(paths: list[Path]) -> list[Run]:
    """The runs, each named by its folder; names that two runs share get their parent folder
    (then more of the path), so every curve and column on the page is told apart."""
    if not paths:
        raise ReportError("no run folders given")
    resolved = [Path(p).resolve() for p in paths]
    names = [run_name(p) for p in resolved]
    for parents in range(1, max(len(p.parts) for p in resolved)):
        # Only different folders of one name clash: the same folder given twice would otherwise
        # climb to the root ("//tmp/runs/async") without ever being told apart.
        clashes = {n for n in names if len({p for p, m in zip(resolved, names) if m == n}) > 1}
        if not clashes:
            break
        names = [run_name(p, parents) if n in clashes else n for p, n in zip(resolved, names)]
    # The same folder given twice keeps clashing: number the repeats.
    seen: dict[str, int] = {}
    for i, n in enumerate(names):
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            names[i] = f"{n} ({seen[n]})"
    return [load_run(p, n) for p, n in zip(paths, names)]
