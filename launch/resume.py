"""Which checkpoint a run continues from (``run.resume``), and whether it may.

``auto``: the newest complete checkpoint in the run's checkpoint folder, if any; ``never``:
none; otherwise the path of one checkpoint. A checkpoint records the role map it was written
with; resuming is refused where a change would make the continuation wrong — another model,
another task or data, another seed, a colocated layout for a disaggregated one — and allowed
where it is harmless (more or fewer steps, eval and checkpoint intervals, logging, the number
of trainers or generators: torch.distributed.checkpoint reshards the policy). Refused too: a
``run.steps`` below the steps the checkpoint has done (there is no going back to fewer), partial
rollouts and dynamic sampling both turned off (their checkpoints hold examples taken but not
yet trained, which only they hand out again), and training prompts that are not those the
checkpoint's data position indexes (``check_data``). A checkpoint whose small files are
damaged is refused the same way, naming the file; nothing is removed.
"""

from __future__ import annotations

from pathlib import Path

from launch.config import ConfigError, RoleMap
from roles.checkpoint.layout import COMPLETE, CheckpointIOError, complete_checkpoints, is_complete, step_name
from roles.checkpoint.lora_base import check_base
from roles.checkpoint.resume import (
    Resume,
    check_readable,
    newest,
    read_saved_config,
    resolve_checkpoint_path,
    steps_done,
)
from roles.prompt_stream import data_changed, fingerprint
from roles.sections.rollout import RolloutConfig

# Dotted fields that must be the same as when the checkpoint was written, and why.
MUST_MATCH = {
    "model": "the checkpoint's policy and optimizer belong to that model",
    "task": "the data position indexes that task's examples",
    "run.seed": "the data order and every batch's sampling seed come from it",
    "world.colocated.ranks": "colocated and disaggregated runs hold different state",
}


def _get(data: dict, dotted: str):
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def check_compatible(cfg: RoleMap, path: Path) -> None:
    """Raise ConfigError naming the first field that differs from the checkpoint's role map."""
    saved = read_saved_config(path)
    now = cfg.model_dump(mode="json")
    for field, why in MUST_MATCH.items():
        if field == "world.colocated.ranks":
            differs = bool(_get(saved, field)) != bool(_get(now, field))
        else:
            differs = _get(saved, field) != _get(now, field)
        if differs:
            raise ConfigError(
                f"{field}: differs from the checkpoint's ({path}): {why}; "
                f"was {_get(saved, field)!r}, now {_get(now, field)!r} (or set run.resume: never)"
            )
    if _hands_out_ahead(saved.get("rollout")) and not _hands_out_ahead(now["rollout"]):
        raise ConfigError(
            f"rollout.oversample, rollout.dynamic_sampling: the checkpoint ({path}) was written with partial "
            "rollouts or dynamic sampling, so its data position is past examples taken but not yet trained, "
            "which only a run with one of them on hands out again; with both off they would be skipped: keep "
            f"the checkpoint's (oversample {_get(saved, 'rollout.oversample') or 0}) or set run.resume: never"
        )


def _hands_out_ahead(rollout: dict | None) -> bool:
    """Partial rollouts or dynamic sampling: the controller's slot book, whose checkpoints carry examples."""
    try:
        r = RolloutConfig.model_validate(rollout or {})
    except ValueError:  # an older checkpoint's section this schema no longer reads: its raw values
        raw = rollout if isinstance(rollout, dict) else {}
        return bool(raw.get("oversample")) or bool(raw.get("dynamic_sampling"))
    return r.oversample > 0 or r.dynamic_sampling.enabled


def find_resume(cfg: RoleMap) -> Resume | None:
    """The checkpoint this run continues from, checked; None to start afresh."""
    mode = cfg.run.resume
    if mode == "never":
        return None
    if mode == "auto":
        path = newest(cfg.checkpoint_dir())
        if path is None:
            return None
    else:
        path = resolve_checkpoint_path(mode)
        if not is_complete(path):
            raise ConfigError(f"run.resume: {mode!r} is not a complete checkpoint (no {COMPLETE} file)")
    try:
        check_readable(path)  # every small file, before any rank starts
    except CheckpointIOError as e:
        raise ConfigError(_damaged(path, e)) from e
    check_compatible(cfg, path)
    try:  # a LoRA checkpoint's adapters only: its base, model.path, must be the one they trained on
        check_base(path, cfg.model.path)
    except CheckpointIOError as e:
        raise ConfigError(f"model.path: {e}; or set run.resume: never (start afresh)") from e
    done = steps_done(path)
    if cfg.run.steps < done:
        # Resuming would train nothing and leave the policy of step `done`, not of run.steps,
        # with a summary that says `done`: the request cannot be met, so it is named.
        last = step_name(cfg.run.steps)
        older = [p for p in complete_checkpoints(path.parent) if p.name <= last]
        ways = [f"run.resume: {older[-1]} (an earlier checkpoint)"] if older else []
        ways.append("run.resume: never (start afresh)")
        raise ConfigError(
            f"run.steps ({cfg.run.steps}) is below the {done} steps checkpoint {path} has done; "
            f"raise run.steps to continue, or set {', or '.join(ways)}"
        )
    return Resume(str(path), done)


def check_data(cfg: RoleMap, resume: Resume, train_prompts: dict, digest: str | None = None) -> None:
    """Raise ConfigError when the prepared training prompts are not those the checkpoint's data
    position indexes: the files named in the role map were rewritten since (the role maps
    match, which ``check_compatible`` saw). Resumed, the position would pick other examples
    than the ones it stands for, or past the end; found here, on rank 0 before any work.
    ``digest``: ``fingerprint(train_prompts)``, when the caller has it already."""
    position = resume.controller_state()["position"].get("stream", {})
    digest = fingerprint(train_prompts) if digest is None else digest
    why = data_changed(position, len(train_prompts), digest)
    if why is not None:
        field = "task.train_files" if getattr(cfg.task, "train_files", None) else "task"
        raise ConfigError(
            f"{field}: the training data changed since checkpoint {resume.path} was written: {why} "
            "(the same files, rewritten?); restore them, or set run.resume: never (start afresh)"
        )


def _damaged(path: Path, error: CheckpointIOError) -> str:
    """The refusal of a damaged checkpoint: which file, what is wrong, and how to go on. Nothing
    is removed: the checkpoint stays for the user to look at."""
    older = [p for p in complete_checkpoints(path.parent) if p.name < path.name]
    ways = [f"run.resume: {older[-1]} (the one before)"] if older else []
    ways.append("run.resume: never (start afresh)")
    return f"run.resume: checkpoint {path} cannot be resumed: {error}; set {', or '.join(ways)}"


def fresh_start_notice(cfg: RoleMap, resume: Resume | None) -> str | None:
    """A warning when this start begins afresh in a run folder whose metrics an earlier start
    logged: the run log is then replaced, which a user who raised run.steps to continue a run
    without checkpoints (or with checkpoints elsewhere) would otherwise learn only afterwards."""
    from launch.tools.restarts import steps_reached

    if resume is not None or not (logged := steps_reached(cfg.run.out)):
        return None
    if cfg.run.resume == "never":
        why = "run.resume is never"
    elif not cfg.checkpoint.every_steps:
        why = "checkpoints are off (checkpoint.every_steps 0), so there is none to continue from"
    else:
        why = f"there is no complete checkpoint in {cfg.checkpoint_dir()} to continue from"
    return (
        f"warning: {cfg.run.out} holds {logged} steps logged by an earlier start, but {why}: "
        "starting afresh, and its metrics.jsonl, eval.jsonl and samples.jsonl are replaced"
    )
