"""The controller's progress on its terminal, or in a log file.

On a terminal: a tqdm bar of steps with the reward, the last eval's pass@1, tokens per second
and the ETA, redrawn in place. When stdout is not a terminal (a Slurm log, ``| tee``), redraws
would fill the log with carriage returns, so a plain line is printed every ``every_s`` seconds
instead (and for the first and last step). Both print one line per eval round, and a final
summary when the run ends.

Which of the two is not the rank's own decision to make under Open MPI: ``mpirun`` gives every
rank a pseudo-terminal for stdout, whether its own stdout is a terminal or a Slurm log file,
and one with no size, so a bar sized from it is empty. ``mpirl run`` knows: it sets
``MPIRL_PROGRESS`` (``bar`` or ``lines``) and ``COLUMNS`` for the job. A rank started by
``mpirun`` directly without them prints lines; one started otherwise (``srun``, no launcher)
asks its stdout.
"""

from __future__ import annotations

import os
import sys
import time

PROGRESS_ENV = "MPIRL_PROGRESS"  # bar | lines: set by `mpirl run` from its own stdout


def launcher_env(stream=None) -> dict[str, str]:
    """What a launcher (``mpirl run``, the demos) tells the job about its own stdout, for
    ``progress_mode``: a bar for a terminal (and its width), plain lines for anything else."""
    import shutil

    stream = stream if stream is not None else sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return {PROGRESS_ENV: "bar", "COLUMNS": str(shutil.get_terminal_size().columns)}
    return {PROGRESS_ENV: "lines"}


def progress_mode(stream, environ=os.environ) -> str:
    """``bar`` or ``lines`` for a controller writing to ``stream`` (see the module's docstring)."""
    asked = environ.get(PROGRESS_ENV, "").strip().lower()
    if asked in ("bar", "lines"):
        return asked
    if "OMPI_COMM_WORLD_SIZE" in environ:  # under Open MPI's mpirun: stdout is its pty
        return "lines"
    return "bar" if hasattr(stream, "isatty") and stream.isatty() else "lines"


def _duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class Progress:
    """Steps done out of ``total`` (``initial`` already done by a resumed run's earlier part)."""

    def __init__(
        self, total: int, initial: int = 0, *, every_s: float = 30.0, stream=None, clock=time.monotonic, mode=None
    ):
        """``mode``: ``bar`` or ``lines`` (default: ``progress_mode`` of the stream)."""
        self.stream = stream if stream is not None else sys.stdout
        self.total, self.done = total, initial
        self.every_s, self.clock = every_s, clock
        self.t0 = clock()
        self.started_at = initial  # the ETA counts only the steps of this launch
        self.last_line = None  # when the last plain line went out
        self.reward = self.pass1 = self.tokens_per_s = None
        self.terminal = (mode or progress_mode(self.stream)) == "bar"
        self.bar = None
        if self.terminal:
            from tqdm import tqdm

            # The size is given, not asked of the terminal: a rank's pty under mpirun has none.
            columns = int(os.environ.get("COLUMNS", "0") or 0) or 100
            self.bar = tqdm(
                total=total,
                initial=initial,
                desc="mpirl",
                unit="step",
                ncols=max(columns, 40),
                nrows=50,
                file=self.stream,
            )

    def step(self, record: dict) -> None:
        """One ``metrics.jsonl`` line: the step it finished."""
        self.done = record["step"] + 1
        if record.get("reward_mean") is not None:
            self.reward = record["reward_mean"]
        if record.get("step_s") and record.get("tokens") is not None:
            self.tokens_per_s = record["tokens"] / record["step_s"]
        if self.bar is not None:
            self.bar.update(self.done - self.bar.n)
            self.bar.set_postfix_str(self._figures(), refresh=True)
            return
        now = self.clock()
        due = self.last_line is None or now - self.last_line >= self.every_s or self.done >= self.total
        if due:
            self.last_line = now
            self._print(f"step {self.done}/{self.total} ({100 * self.done / self.total:.0f}%)  {self._figures()}  "
                        f"elapsed {_duration(now - self.t0)}  eta {self._eta(now)}")  # fmt: skip

    def eval(self, record: dict) -> None:
        """One ``eval.jsonl`` line: a line of its own, and its pass@1 on the bar from now on."""
        self.pass1 = record.get("pass@1")
        extra = "".join(
            f"  {k} {record[k]:.3f}" for k in sorted(record) if k.startswith(("pass@", "mean@")) and k != "pass@1"
        )
        self.write(
            f"eval {record['eval_round']} (policy version {record['policy_version']}): "
            f"pass@1 {record['pass@1']:.3f}{extra} on {record.get('examples', '?')} examples"
        )

    def write(self, message: str) -> None:
        """A line of its own, above the bar on a terminal."""
        if self.bar is not None:
            self.bar.write(f"mpirl: {message}", file=self.stream)
        else:
            self._print(message)

    def close(self, summary: dict | None = None) -> None:
        """End the bar; with ``summary`` (summary.json's figures), print the run's result."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if summary:
            self._print(self._summary_line(summary))

    # ------------------------------------------------------------------ helpers

    def _figures(self) -> str:
        parts = []
        if self.reward is not None:
            parts.append(f"reward {self.reward:.3f}")
        if self.pass1 is not None:
            parts.append(f"eval pass@1 {self.pass1:.3f}")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:.0f} tok/s")
        return "  ".join(parts)

    def _eta(self, now: float) -> str:
        steps = self.done - self.started_at
        if steps <= 0:
            return "?"
        return _duration((now - self.t0) / steps * (self.total - self.done))

    @staticmethod
    def _summary_line(s: dict) -> str:
        line = f"done: {s.get('steps')} steps in {_duration(s.get('wall_s') or 0)}"
        first, last = s.get("train_reward_first10"), s.get("train_reward_last10")
        if first is not None and last is not None:
            line += f"; training reward {first:.3f} -> {last:.3f} (first / last 10 steps)"
        if s.get("eval_first") and s.get("eval_last"):
            line += f"; eval pass@1 {s['eval_first']['pass@1']:.3f} -> {s['eval_last']['pass@1']:.3f}"
        return line

    def _print(self, message: str) -> None:
        print(f"mpirl: {message}", file=self.stream, flush=True)
