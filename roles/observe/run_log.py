"""Everything the controller writes about a run, in one place.

``metrics.jsonl`` (one line per step: the source of truth), ``eval.jsonl`` (one per eval round),
``samples.jsonl`` (the shown generations), the dashboards (``roles.observe.backends``) and the
progress display (``roles.observe.progress``) all get the same records, in this order: the
files first, so a dashboard that fails can never cost a line of the run's record. A dashboard
that fails mid-run is dropped with a warning; the run goes on (its numbers are in the files).

A resumed run appends to the same files, after dropping the lines its checkpoint does not
cover: the steps the crashed run logged past it will be run again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from roles.run_files import EVAL, METRICS, SAMPLES, keep_jsonl


class RunLog:
    def __init__(self, out: Path, *, evaluation: bool, resumed_at: int | None = None, backends=(), progress=None):
        """``resumed_at``: the steps the checkpoint this run continues from holds (None: a fresh run)."""
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.backends = list(backends)
        self.progress = progress
        self.history: list[dict] = []  # the metrics lines, the resumed run's earlier ones included
        self.evals: list[dict] = []
        if resumed_at is not None:
            self.history = keep_jsonl(self.out / METRICS, lambda r: r["step"] < resumed_at)
            if evaluation:
                self.evals = keep_jsonl(self.out / EVAL, lambda r: r["policy_version"] <= resumed_at)
            keep_jsonl(self.out / SAMPLES, lambda r: r["step"] < resumed_at)
        mode = "a" if resumed_at is not None else "w"
        self._metrics = open(self.out / METRICS, mode)
        self._eval = open(self.out / EVAL, mode) if evaluation else None
        self._samples = None
        self._samples_mode = mode

    def step(self, record: dict, shown: list[dict] = ()) -> None:
        """One step's line, and the generations shown from it."""
        _append(self._metrics, record)
        self.history.append(record)
        if shown:
            if self._samples is None:
                self._samples = open(self.out / SAMPLES, self._samples_mode)
            for row in shown:
                _append(self._samples, row)
        self._to_backends("log_step", record)
        if shown:
            self._to_backends("log_samples", record["step"], list(shown))
        if self.progress is not None:
            self.progress.step(record)

    def eval(self, record: dict) -> None:
        _append(self._eval, record)
        self.evals.append(record)
        self._to_backends("log_eval", record)
        if self.progress is not None:
            self.progress.eval(record)

    def write(self, message: str) -> None:
        """A line for whoever watches the run (the progress display, or stdout)."""
        if self.progress is not None:
            self.progress.write(message)
        else:
            print(f"mpirl: {message}", flush=True)

    def close(self, summary: dict | None = None) -> None:
        for f in (self._metrics, self._eval, self._samples):
            if f is not None:
                f.close()
        self._to_backends("close")
        self.backends = []
        if self.progress is not None:
            self.progress.close(summary)

    def _to_backends(self, method: str, *args) -> None:
        for backend in list(self.backends):
            try:
                getattr(backend, method)(*args)
            except Exception as e:  # noqa: BLE001 - a dashboard's failure must not end the run
                self.backends.remove(backend)
                print(
                    f"mpirl: warning: {type(backend).__name__} failed ({type(e).__name__}: {e}); "
                    "it is dropped for the rest of the run (metrics.jsonl has every step)",
                    file=sys.stderr,
                    flush=True,
                )


def _append(f, record: dict) -> None:
    try:
        f.write(json.dumps(record) + "\n")
        f.flush()
    except OSError as e:  # a full or lost disk: the one-line failure names the file, not just ENOSPC
        raise OSError(e.errno, f"{e.strerror}: writing {f.name}") from e
