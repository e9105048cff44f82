"""What a run writes, made and read back for the tests: a metrics.jsonl line as the controller
writes it, and the scalars TensorBoard and W&B hold, read by their own readers."""

from __future__ import annotations

import json
from pathlib import Path


def step_record(step: int, reward: float = 0.5) -> dict:
    """A metrics.jsonl line as the controller writes it."""
    return {
        "step": step,
        "policy_version": step + 1,
        "reward_mean": reward,
        "correct_mean": reward / 2,
        "reward_components": {"arith_exact": reward, "correct": reward / 2},
        "response_length_mean": 3.5 + step,
        "response_length_max": 9,
        "response_clip_ratio": 0.125,
        "zero_advantage_group_share": 0.25,
        "loss": -0.1 * step,
        "tokens": 400,
        "generation_s": 0.5,
        "reward_s": 0.05,
        "training_s": 0.3,
        "weight_sync_s": 0.01,
        "generator_wait_s": 0.0,
        "staleness_max": 1.0,
        "staleness_mean": 0.5,
        "verifier_failures": 0,
        "verifier_timeouts": 0,
        "step_s": 2.0,
        "busy": {"generator": 0.25, "reward": 0.025, "trainer": 0.155},
        "elapsed_s": 2.0 * (step + 1),
        "checkpoint_save_s": None,
        "trainer": {"grad_norm": 1.5, "clip_frac": 0.01, "ratio_mean": 1.0, "ratio_max": 2.5, "kl_mu_pi": float("nan")},
    }


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar in ``log_dir``'s event files, as TensorBoard's own reader sees them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def wandb_records(run_file: Path):
    """The records of a W&B run file (``run-<id>.wandb``): after a 7-byte header (``:W&B``, a
    magic and a version), LevelDB's log format (32 KiB blocks of checksummed pieces, a record
    in one piece or split first/middle/last), each record a ``wandb_internal_pb2.Record``.
    wandb 0.31 reads these files in its Go core only, so the test reads them itself."""
    from wandb.proto import wandb_internal_pb2

    data, block = run_file.read_bytes(), 32768
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pieces = 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # too little room for a piece's header: the block's tail is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if kind == 0 and length == 0:  # zero padding
            pos += left
            continue
        pieces += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full, or the last piece of a split record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            yield record
            pieces = b""


def wandb_history(run_file: Path) -> list[dict]:
    """The history rows of an offline run, each as {metric: value}."""

    def value(item):
        kind = item.WhichOneof("value") if item.DESCRIPTOR.oneofs_by_name.get("value") else None
        if kind in ("integer", "number", "text", "boolean"):
            return getattr(item, kind)
        return json.loads(item.value_json or item.json or "null")

    rows = []
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): value(item) for item in record.history.item})
    return rows
