"""Checkpoints: everything a stopped run needs to continue exactly, written atomically.

One checkpoint is a folder in the run's checkpoint directory (``checkpoint.dir``, default
``<run.out>/checkpoints``)::

    step-00000050/
      trainer/            torch.distributed.checkpoint shards of {"model", "optim"}: each training
                          rank writes its own (no gather); loadable onto another number of trainers
      controller.json     steps done, the data position as of what was *trained*, counters
      rng/rank-00003.pkl  every rank's random states (Python, numpy, and torch where it has it)
      config.yaml         the role map the run was started with
      COMPLETE            written last
    latest                the name of the newest complete checkpoint (replaced atomically)

A checkpoint is written into ``.step-00000050.partial/`` and renamed only once every part is
in and synced, so a crash mid-save leaves the previous checkpoint as it was; older ones beyond
``keep_last`` are removed after that. Who writes what and when is ``roles.protocol``'s rule 5.

This module knows files and state dicts; it sends no message.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

COMPLETE = "COMPLETE"
LATEST = "latest"


def step_name(steps_done: int) -> str:
    return f"step-{steps_done:08d}"


def partial_dir(root: str | Path, steps_done: int) -> Path:
    """Where the checkpoint after ``steps_done`` steps is written before it becomes visible."""
    return Path(root) / f".{step_name(steps_done)}.partial"


def is_complete(path: str | Path) -> bool:
    return (Path(path) / COMPLETE).is_file()


# ------------------------------------------------------------------------------ writing


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _json_value(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"cannot write {type(value).__name__} into a checkpoint's JSON")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON and sync it (the checkpoint is only as durable as its parts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, default=_json_value)
        f.flush()
        os.fsync(f.fileno())


def rng_state() -> dict:
    """This process's random states. torch's only where torch is imported: the controller and
    reward ranks never import it (launch/job.py), and their files must not need it to load."""
    state = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state().numpy().tobytes()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch = sys.modules.get("torch")
    if torch is not None and state.get("torch") is not None:
        saved = state["torch"]
        if not isinstance(saved, torch.Tensor):  # bytes, as rng_state writes it
            saved = torch.frombuffer(bytearray(saved), dtype=torch.uint8)
        torch.set_rng_state(saved)


def rng_file(path: str | Path, rank: int) -> Path:
    return Path(path) / "rng" / f"rank-{rank:05d}.pkl"


def _torch_rng_file(path: str | Path, rank: int) -> Path:
    return Path(path) / "rng" / f"rank-{rank:05d}.pt"  # torch.save files, as earlier versions wrote them


def save_rng(path: str | Path, rank: int) -> None:
    out = rng_file(path, rank)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        pickle.dump(rng_state(), f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())


def load_rng(path: str | Path, rank: int) -> bool:
    """Restore this rank's random states from checkpoint ``path``; False if it holds none for ``rank``."""
    f = rng_file(path, rank)
    if f.is_file():
        set_rng_state(read_rng(f))
        return True
    old = _torch_rng_file(path, rank)
    if not old.is_file():
        return False
    import torch

    set_rng_state(torch.load(old, weights_only=False))
    return True


def read_rng(f: Path) -> dict:
    """The random states in rng file ``f``; CheckpointIOError naming it when it is damaged."""
    try:
        with open(f, "rb") as fh:
            state = pickle.load(fh)
    except OSError as e:
        raise CheckpointIOError(f"{f}: cannot be read ({e.strerror or e})") from e
    except Exception as e:  # noqa: BLE001 - a damaged pickle raises any of a dozen types
        raise CheckpointIOError(f"{f}: damaged ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict) or "python" not in state or "numpy" not in state:
        raise CheckpointIOError(f"{f}: damaged (no Python and numpy random states in it)")
    return state


@contextlib.contextmanager
def _single_process_is_meant():
    """One trainer saves and loads alone (no_dist): torch's warning that it assumes so is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


class CheckpointIOError(RuntimeError):
    """A checkpoint cannot be written or read: a trainer-state save or load that failed (the
    message names each failing rank's own error), or a damaged small file of a checkpoint
    (``controller.json``, ``config.yaml``, ``rng/*.pkl``: the message names the file and what is
    wrong with it)."""


@contextlib.contextmanager
def _dcp_errors_named(action: str, path):
    """DCP raises a ``CheckpointException`` (a BaseException, so ``except Exception`` misses it)
    whose text is every rank's traceback; turn it into one line per failed rank."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as e:
        causes = "; ".join(
            f"trainer {rank}: {type(exc).__name__}: {exc}" for rank, (exc, _trace) in sorted(e.failures.items())
        )
        first = next(iter(e.failures.values()))[0]
        raise CheckpointIOError(f"{action} {path} failed ({causes})") from first


def save_trainer_state(path: str | Path, model, optimizer, group) -> None:
    """The model's and optimizer's shards into ``path/trainer``. Collective over ``group``
    (the training ranks; None when there is one: then no other rank takes part)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from roles.raw_shards import RawShardWriter

    model_state, optim_state = get_state_dict(model, optimizer)
    with _single_process_is_meant(), _dcp_errors_named("saving the trainer state into", path):
        dcp.save(
            {"model": model_state, "optim": optim_state},
            # One file of raw tensor bytes per rank, written with direct I/O (roles.raw_shards,
            # roles.direct_io): no torch.save archive per tensor, no page cache.
            storage_writer=RawShardWriter(Path(path) / "trainer"),
            # A run's saves all have the same layout: reusing the first save's global plan
            # spares later ones the coordinator's gather-plan-scatter round (0.76 s -> 0.55 s
            # for two trainers at 25M). A changed plan is detected and planned afresh. The
            # cache is per process, and the ranks decide from their own: all of the group must
            # have saved the same times, so a single trainer (no group, no round) keeps none.
            planner=dcp.DefaultSavePlanner(enable_plan_caching=group is not None),
            process_group=group,
            no_dist=group is None,
        )


def inject_fault(where: str, steps_done: int) -> None:
    """Fail here if ``MPIRL_INJECT_FAULT`` is ``where:steps_done`` (the failure tests' hook: a crash
    at a chosen point of a chosen checkpoint, on every rank that reaches it)."""
    from runtime.faults import fault_injected

    if fault_injected(where, steps_done):
        raise RuntimeError(f"fault injected at {where} of checkpoint {steps_done} (MPIRL_INJECT_FAULT)")


def load_trainer_state(path: str | Path, model, optimizer, group) -> None:
    """Load ``path/trainer`` into ``model`` and ``optimizer`` as they are sharded now (any number
    of trainers: torch.distributed.checkpoint reshards). Collective over ``group``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from roles.raw_shards import RawShardReader

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    with _single_process_is_meant(), _dcp_errors_named("loading the trainer state from", path):
        dcp.load(
            state,
            storage_reader=RawShardReader(Path(path) / "trainer"),
            process_group=group,
            no_dist=group is None,
        )
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def finalize(root: str | Path, steps_done: int, keep_last: int) -> Path:
    """Make the partial checkpoint after ``steps_done`` steps visible, then prune old ones.

    The order is what makes it atomic: COMPLETE inside the partial folder, the folder renamed,
    ``latest`` replaced; a crash at any point leaves either the old or the new one complete.
    """
    root = Path(root)
    partial, final = partial_dir(root, steps_done), root / step_name(steps_done)
    (partial / COMPLETE).write_text(f"{steps_done}\n")
    _fsync_dir(partial)
    if final.exists():  # a checkpoint of the same step from an earlier attempt
        _remove(final)
    os.rename(partial, final)
    tmp = root / f".{LATEST}.tmp"
    tmp.write_text(final.name + "\n")
    os.replace(tmp, root / LATEST)
    _fsync_dir(root)
    for old in complete_checkpoints(root)[:-keep_last]:
        _remove(old)
    return final


def _remove(path: Path) -> None:
    """Remove a complete checkpoint: renamed out of sight first (atomic), then deleted. A crash
    in the middle of ``rmtree`` would otherwise leave a folder whose COMPLETE is still there
    while its shards are gone: one resume would pick and fail to load."""
    doomed = path.with_name(f".{path.name}{REMOVING}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


REMOVING = ".removing"  # the suffix of a checkpoint being removed (remove_partials finishes it)


@dataclass(frozen=True)
class CheckpointPlan:
    """Where a run's checkpoints go, how many are kept, and the role map each one records."""

    root: str
    keep_last: int
    config_text: str  # the parsed role map as YAML, written into every checkpoint

    def partial(self, steps_done: int) -> Path:
        return partial_dir(self.root, steps_done)

    def write_controller_part(self, steps_done: int, state: dict) -> Path:
        """The controller's files: its state, the role map, its random states (rank 0)."""
        path = self.partial(steps_done)
        write_json(path / "controller.json", {"steps_done": steps_done, **state})
        (path / "config.yaml").write_text(self.config_text)
        save_rng(path, 0)
        return path

    def finalize(self, steps_done: int) -> Path:
        return finalize(self.root, steps_done, self.keep_last)


def remove_partials(root: str | Path) -> None:
    """Remove the partial checkpoints a stopped run left behind, and the ones it was removing
    (never a complete one)."""
    root = Path(root)
    if root.is_dir():
        for p in [*root.glob(".step-*.partial"), *root.glob(f".step-*{REMOVING}")]:
            shutil.rmtree(p, ignore_errors=True)


def keep_jsonl(path: str | Path, keep) -> list[dict]:
    """Rewrite a JSON-lines log with only the records ``keep(record)`` accepts; return them.

    A resumed run drops what was logged after its checkpoint, so the log has each step once.
    A last line cut short by the crash is dropped too.
    """
    path = Path(path)
    if not path.is_file():
        return []
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if keep(record):
            kept.append(record)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)
    return kept


def export_hf(path: str | Path, out: str | Path) -> Path:
    """Write the policy of checkpoint ``path`` as a plain Hugging Face folder (safetensors,
    config, generation config, tokenizer) that ``from_pretrained`` and vLLM load.

    Runs in one process without torch.distributed: the trainers' shards, however many wrote
    them, are read into one whole model (the optimizer state is not read).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    from roles.models import ModelConfig
    from roles.policy import Policy, load_model
    from roles.raw_shards import RawShardReader

    path = Path(path)
    if not is_complete(path):
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE} file)")
    saved = read_saved_config(path)
    shards = path / "trainer"
    _read_shard_index(shards)
    # The architecture and tokenizer come from the run's model folder; the weights from here.
    model_path = saved.get("model", {}).get("path") if isinstance(saved.get("model"), dict) else None
    if not isinstance(model_path, str) or not (Path(model_path) / "config.json").is_file():
        raise CheckpointIOError(
            f"{path}/config.yaml: its model.path {model_path!r}, whose architecture and tokenizer export "
            "writes with the checkpoint's weights, is not a model folder here (moved or removed?)"
        )
    model_cfg = ModelConfig.model_construct(**saved["model"])
    model = load_model(model_cfg)
    state = {"model": get_model_state_dict(model)}
    # A shard file cut short is DCP's CheckpointException (named by _dcp_errors_named); anything
    # else that fails here names the checkpoint too, rather than escape as a traceback.
    with _single_process_is_meant(), _dcp_errors_named("reading the policy from", path):
        try:
            dcp.load(state, storage_reader=RawShardReader(shards), no_dist=True)
        except Exception as e:  # noqa: BLE001 - a damaged file raises any of many types
            raise CheckpointIOError(f"reading the policy from {path} failed ({type(e).__name__}: {e})") from e
    set_model_state_dict(model, state["model"])
    Policy(model, model_cfg.path, sharded=False).save(out, is_leader=True)
    return Path(out)


def _shard_index(shards: Path) -> Path:
    """The trainers' ``.metadata`` in ``shards``, or a CheckpointIOError if it is missing."""
    f = shards / ".metadata"
    if not f.is_file():
        raise CheckpointIOError(f"{f}: missing (the trainers' shards are not all there)")
    return f


def _read_shard_index(shards: Path) -> None:
    """The trainers' ``.metadata`` (where every tensor lies in the shard files) read, or a
    CheckpointIOError naming it: DCP logs a traceback for each way it tries to read a missing or
    damaged one before it raises, and raises an AssertionError that names no file."""
    from roles.raw_shards import RawShardReader

    f = _shard_index(shards)
    try:
        RawShardReader(shards).read_metadata()
    except Exception as e:  # noqa: BLE001 - a damaged pickle raises any of a dozen types
        raise CheckpointIOError(f"{f}: damaged ({type(e).__name__}: {e})") from e


# ------------------------------------------------------------------------------ finding


def complete_checkpoints(root: str | Path) -> list[Path]:
    """The complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and is_complete(p)]
    return sorted(found, key=lambda p: p.name)


RUN_CHECKPOINTS = "checkpoints"  # under run.out, unless checkpoint.dir puts them elsewhere


def resolve(path: str | Path) -> Path:
    """``path`` itself, or for a checkpoint folder (one with ``latest``) its newest checkpoint,
    or for a run folder (``run.out``, whose ``checkpoints/`` has one) the newest of its own."""
    path = Path(path)
    if path.is_dir() and not (path / LATEST).is_file() and (path / RUN_CHECKPOINTS / LATEST).is_file():
        path = path / RUN_CHECKPOINTS
    if path.is_dir() and (path / LATEST).is_file():
        named = path / (path / LATEST).read_text().strip()
        # A crash between removing a checkpoint and replacing ``latest`` leaves it naming one
        # that is gone: the newest complete one is what it would have named.
        return named if is_complete(named) else (newest(path) or named)
    return path


def newest(root: str | Path) -> Path | None:
    done = complete_checkpoints(root)
    return done[-1] if done else None


# ------------------------------------------------------------------------------ reading
#
# A checkpoint's small files are read on rank 0 before any rank starts (launch/resume.py calls
# check_readable): a damaged one is a CheckpointIOError naming the file, not a traceback from
# deep inside a rank that has already begun.


def _read_text(f: Path) -> str:
    try:
        return f.read_text()
    except OSError as e:
        raise CheckpointIOError(f"{f}: cannot be read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise CheckpointIOError(f"{f}: damaged (not text: {e.reason} at byte {e.start})") from e


def read_controller_state(path: str | Path) -> dict:
    """``controller.json`` of checkpoint ``path``, checked: a JSON object with a whole
    ``steps_done`` (the step its folder is named after), a ``position`` and ``next_eval_group``."""
    f = Path(path) / "controller.json"
    try:
        state = json.loads(_read_text(f))
    except ValueError as e:
        raise CheckpointIOError(f"{f}: damaged (not valid JSON: {e})") from e
    if not isinstance(state, dict):
        raise CheckpointIOError(f"{f}: damaged (a JSON {type(state).__name__}, not an object)")
    steps = state.get("steps_done")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise CheckpointIOError(f"{f}: damaged (steps_done is {steps!r}, not a count of steps)")
    if Path(path).name.startswith("step-") and Path(path).name != step_name(steps):
        raise CheckpointIOError(f"{f}: damaged (steps_done is {steps}, but the folder is {Path(path).name})")
    for key in ("position", "next_eval_group"):
        if key not in state:
            raise CheckpointIOError(f"{f}: damaged (no {key!r} in it)")
    if not isinstance(state["position"], dict):
        raise CheckpointIOError(f"{f}: damaged (position is not an object)")
    return state


def read_saved_config(path: str | Path) -> dict:
    """The role map checkpoint ``path`` was written with (its ``config.yaml``), as a dict."""
    import yaml

    f = Path(path) / "config.yaml"
    try:
        saved = yaml.safe_load(_read_text(f))
    except yaml.YAMLError as e:
        raise CheckpointIOError(f"{f}: damaged (not valid YAML: {' '.join(str(e).split())})") from e
    if not isinstance(saved, dict):
        raise CheckpointIOError(f"{f}: damaged (not a role map but a {type(saved).__name__})")
    return saved


def check_readable(path: str | Path) -> None:
    """CheckpointIOError naming the first damaged small file of checkpoint ``path``: its
    ``controller.json``, ``config.yaml`` and every rank's ``rng/rank-*.pkl``, and the trainers'
    shard index (``trainer/.metadata``) missing. The shards are read, and a damaged one named,
    by the trainers themselves (load_trainer_state); the index is only looked for here, since
    reading it takes torch, which the controller's rank, where this runs, does without."""
    read_controller_state(path)
    read_saved_config(path)
    for f in sorted((Path(path) / "rng").glob("rank-*.pkl")):
        read_rng(f)
    _shard_index(Path(path) / "trainer")


def steps_done(path: str | Path) -> int:
    return read_controller_state(path)["steps_done"]


@dataclass(frozen=True)
class Resume:
    """Where a resumed run continues from: the checkpoint, and how many steps it holds."""

    path: str
    steps_done: int

    def controller_state(self) -> dict:
        return read_controller_state(self.path)
