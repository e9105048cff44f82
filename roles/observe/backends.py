"""TensorBoard and W&B: the dashboards the controller feeds, beside ``metrics.jsonl``.

Each backend gets every step line, every eval round and the step's shown generations, under
the names of ``roles.observe.metric_names``. ``check_backends`` (``mpirl check`` and the launch
preflight) refuses a backend whose package is missing; ``open_backends`` starts them on the
controller's rank before any rank loads a model, so one that fails at start (an unwritable
folder, a W&B login missing for ``mode: online``) is a config error, not a crash mid-run.

After a resume the dashboards must not show the steps that were lost with the crash twice:
TensorBoard purges the events from the checkpoint's step on (``purge_step``); W&B continues the
same run (its id is kept in the run folder), with the trainer step as its x-axis.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import time
import uuid
from pathlib import Path

from roles.observe.metric_names import eval_scalars, step_scalars
from roles.run_files import TENSORBOARD, WANDB_RUN_ID
from roles.sections.observability import LoggingConfig

# backend -> (module that must import, the pip package that provides it)
_PACKAGES = {"tensorboard": ("torch.utils.tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


class BackendError(ValueError):
    """A logging backend that cannot run: named as a config error before any work."""


def check_backends(config: LoggingConfig) -> None:
    """Every backend the section names has its package installed (found, not imported: cheap)."""
    for name in config.backends():
        module, package = _PACKAGES[name]
        if not _importable(module):
            raise BackendError(
                f"logging.{name}: the {package!r} package is not installed (pip install {package}, "
                f"or turn logging.{name} off)"
            )


def _importable(module: str) -> bool:
    try:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return False
        # torch.utils.tensorboard is part of torch but needs the tensorboard package to import.
        return module != "torch.utils.tensorboard" or importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):
        return False


def open_backends(config: LoggingConfig, out: Path, run_config: dict, resumed_at: int = 0) -> list:
    """Start the backends of ``config`` writing under ``out``. Any failure is a BackendError."""
    check_backends(config)
    starts = []
    if config.tensorboard:
        starts.append(("tensorboard", lambda: TensorBoardBackend(out / TENSORBOARD, run_config, resumed_at)))
    if config.wandb is not None:
        starts.append(("wandb", lambda: WandbBackend(config, out, run_config, resumed_at)))
    backends = []
    for name, start in starts:
        try:
            backends.append(start())
        except Exception as e:  # noqa: BLE001 - the library's own error, whatever it is, named as config
            close_all(backends)
            raise BackendError(f"logging.{name}: could not start: {type(e).__name__}: {e}") from e
    return backends


def close_all(backends: list) -> None:
    for backend in backends:
        backend.close()


def samples_markdown(rows: list[dict]) -> str:
    """The shown generations as a Markdown table (TensorBoard's text plugin renders it)."""

    def cell(text) -> str:
        return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")

    lines = ["| prompt | response | reward | version | finish |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(
            f"| {cell(r['prompt'])} | {cell(r['response'])} | {r['reward']:.3f} "
            f"| {r['policy_version']} | {r['finish_reason']} |"
        )
    return "\n".join(lines)


class TensorBoardBackend:
    """Event files through tensorboard's own writer: torch's ``SummaryWriter`` wraps the same
    writer but imports torch, which the controller otherwise never does."""

    def __init__(self, log_dir: Path, run_config: dict, resumed_at: int):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary, self._text_pb = Event, Summary, text_pb
        log_dir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(log_dir))
        if resumed_at:
            # A session restarted at this step hides the events a killed run wrote past its
            # checkpoint (what SummaryWriter's purge_step writes).
            self.writer.add_event(
                Event(step=resumed_at, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START))
            )
        else:
            self._add_text("config", "```\n" + json.dumps(run_config, indent=2) + "\n```", 0)

    def _add(self, summary, step: int) -> None:
        self.writer.add_event(self._event(wall_time=time.time(), step=int(step), summary=summary))

    def _add_scalars(self, scalars: dict, step: int) -> None:
        values = [self._summary.Value(tag=name, simple_value=float(v)) for name, v in scalars.items()]
        self._add(self._summary(value=values), step)
        self.writer.flush()

    def _add_text(self, tag: str, text: str, step: int) -> None:
        self._add(self._text_pb(tag + "/text_summary", text), step)  # the tag SummaryWriter.add_text gives

    def log_step(self, record: dict) -> None:
        self._add_scalars(step_scalars(record), record["step"])

    def log_eval(self, record: dict) -> None:
        self._add_scalars(eval_scalars(record), record["policy_version"])

    def log_samples(self, step: int, rows: list[dict]) -> None:
        self._add_text("samples", samples_markdown(rows), step)

    def close(self) -> None:
        self.writer.close()


class WandbBackend:
    """A W&B run. Its x-axis is the trainer step (``trainer_step``), so an eval round that ends
    after later steps were logged is still drawn at the version it evaluated."""

    ID_FILE = WANDB_RUN_ID  # in the run folder: a resumed run continues the same W&B run

    def __init__(self, config: LoggingConfig, out: Path, run_config: dict, resumed_at: int):
        import wandb

        self.wandb = wandb
        w = config.wandb
        id_file = out / self.ID_FILE
        run_id = id_file.read_text().strip() if resumed_at and id_file.is_file() else uuid.uuid4().hex[:12]
        self.run = wandb.init(
            project=w.project,
            entity=w.entity,
            name=w.name or out.resolve().name,
            mode=w.mode,
            dir=str(out),
            config=run_config,
            id=run_id,
            resume="allow",
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )
        id_file.write_text(run_id + "\n")
        self.run.define_metric("trainer_step")
        self.run.define_metric("*", step_metric="trainer_step")

    def log_step(self, record: dict) -> None:
        self.run.log({"trainer_step": record["step"], **step_scalars(record)})

    def log_eval(self, record: dict) -> None:
        self.run.log({"trainer_step": record["policy_version"], **eval_scalars(record)})

    def log_samples(self, step: int, rows: list[dict]) -> None:
        columns = ["step", "prompt", "response", "reward", "policy_version", "finish_reason", "components"]
        table = self.wandb.Table(columns=columns)
        for r in rows:
            table.add_data(
                step, r["prompt"], r["response"], r["reward"], r["policy_version"], r["finish_reason"],
                json.dumps(r.get("components", {})),
            )  # fmt: skip
        self.run.log({"trainer_step": step, "samples": table})

    def close(self) -> None:
        self.run.finish()
