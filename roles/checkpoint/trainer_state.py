"""The trainers' part of a checkpoint: the policy's and optimizer's shards, saved and loaded
with torch.distributed.checkpoint (each training rank its own shards, loadable onto another
number of trainers), and the failure tests' fault hook.

torch is imported inside the functions: the controller's rank reads checkpoints without it.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

from roles.checkpoint.layout import TRAINER_SHARDS, CheckpointIOError


@contextlib.contextmanager
def single_process_is_meant():
    """One trainer saves and loads alone (no_dist): torch's warning that it assumes so is noise."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


@contextlib.contextmanager
def dcp_errors_named(action: str, path, role: str = "trainer"):
    """DCP raises a ``CheckpointException`` (a BaseException, so ``except Exception`` misses it)
    whose text is every rank's traceback; turn it into one line per failed rank (of ``role``)."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as e:
        causes = "; ".join(
            f"{role} {rank}: {type(exc).__name__}: {exc}" for rank, (exc, _trace) in sorted(e.failures.items())
        )
        first = next(iter(e.failures.values()))[0]
        raise CheckpointIOError(f"{action} {path} failed ({causes})") from first


def save_trainer_state(
    path: str | Path, model, optimizer, group, *, shards: str = TRAINER_SHARDS, role: str = "trainer", only=None
) -> None:
    """The model's and optimizer's shards into ``path/trainer`` (``path/<shards>``: the critic's
    are beside them). Collective over ``group`` (the training ranks; None when there is one:
    then no other rank takes part). ``only(name)``: which of the model's entries are saved (a
    LoRA policy: the adapters; its frozen base is ``model.path``'s); all of them when None."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from roles.checkpoint.storage.raw_shards import RawShardWriter

    model_state, optim_state = get_state_dict(model, optimizer)
    model_state = _kept(model_state, only)
    with single_process_is_meant(), dcp_errors_named(f"saving the {role} state into", path, role):
        dcp.save(
            {"model": model_state, "optim": optim_state},
            # One file of raw tensor bytes per rank, written with direct I/O (storage/): no
            # torch.save archive per tensor, no page cache.
            storage_writer=RawShardWriter(Path(path) / shards),
            # A run's saves all have the same layout: reusing the first save's global plan
            # spares later ones the coordinator's gather-plan-scatter round. A changed plan is
            # detected and planned afresh. The cache is per process, and the ranks decide from
            # their own: all of the group must have saved the same times, so a single trainer
            # (no group, no round) keeps none.
            planner=dcp.DefaultSavePlanner(enable_plan_caching=group is not None),
            process_group=group,
            no_dist=group is None,
        )


def load_trainer_state(
    path: str | Path, model, optimizer, group, *, shards: str = TRAINER_SHARDS, role: str = "trainer", only=None
) -> None:
    """Load ``path/trainer`` (``path/<shards>``) into ``model`` and ``optimizer`` as they are
    sharded now (any number of ranks: torch.distributed.checkpoint reshards). Collective over
    ``group``. ``only``: as saved; the model's other entries keep what they hold (a LoRA
    policy's base, loaded from ``model.path``)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

    from roles.checkpoint.storage.raw_shards import RawShardReader

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": _kept(model_state, only), "optim": optim_state}
    with single_process_is_meant(), dcp_errors_named(f"loading the {role} state from", path, role):
        dcp.load(
            state,
            storage_reader=RawShardReader(Path(path) / shards),
            process_group=group,
            no_dist=group is None,
        )
    options = StateDictOptions(strict=only is None)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=options)


def _kept(model_state: dict, only) -> dict:
    return model_state if only is None else {n: t for n, t in model_state.items() if only(n)}


def shard_index(shards: Path) -> Path:
    """The trainers' ``.metadata`` in ``shards``, or a CheckpointIOError if it is missing."""
    f = shards / ".metadata"
    if not f.is_file():
        raise CheckpointIOError(f"{f}: missing (the trainers' shards are not all there)")
    return f


def read_shard_index(shards: Path) -> None:
    """The trainers' ``.metadata`` (where every tensor lies in the shard files) read, or a
    CheckpointIOError naming it: DCP logs a traceback for each way it tries to read a missing or
    damaged one before it raises, and raises an AssertionError that names no file."""
    from roles.checkpoint.storage.raw_shards import RawShardReader

    f = shard_index(shards)
    try:
        RawShardReader(shards).read_metadata()
    except Exception as e:  # noqa: BLE001 - a damaged pickle raises any of a dozen types
        raise CheckpointIOError(f"{f}: damaged ({type(e).__name__}: {e})") from e


def inject_fault(where: str, steps_done: int) -> None:
    """Fail here if ``MPIRL_INJECT_FAULT`` is ``where:steps_done`` (the failure tests' hook: a crash
    at a chosen point of a chosen checkpoint, on every rank that reaches it)."""
    from runtime.faults import fault_injected

    if fault_injected(where, steps_done):
        raise RuntimeError(f"fault injected at {where} of checkpoint {steps_done} (MPIRL_INJECT_FAULT)")
