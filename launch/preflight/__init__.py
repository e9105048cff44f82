"""The checks before any work: the role map as a job takes it, its values and then this machine.

Here: the checks against the host (below), the memory a rank needs (``sizing``), the model's
weight files (``model_files``) and the run's data, built and rendered once (``data``).

``launch/config.py`` checks values only. Here come the checks that read the disk and ask the
host — the model's context in its ``config.json``, the logging packages installed, the memory
one rank needs against this machine's, the job's size against the ranks asked for — run by
``mpirl check``, ``mpirl run`` and every rank of ``python -m launch`` before any work. Each
refusal is a :class:`ConfigError`, one line naming the field, and exit code 2.

This module knows nothing of the data (``data``) or the run folder (``launch/run_folder.py``).
"""

from __future__ import annotations

from pathlib import Path

from launch import config
from launch.config import ConfigError, RoleMap
from launch.preflight.sizing import check_memory
from launch.role_map_file import read_role_map_file
from roles.observe.backends import check_backends


def load(path: str | Path, overrides: list[str] | tuple = ()) -> RoleMap:
    """The role-map file at ``path``, read, with the command line's ``KEY=VALUE`` overrides
    applied (``launch.overrides``), parsed and checked."""
    return parse(read_with_overrides(path, overrides), str(path))


def read_with_overrides(path: str | Path, overrides: list[str] | tuple = ()):
    """The role-map file's data with ``overrides`` applied (ConfigError naming a bad one)."""
    from launch.overrides import OverrideError, apply_overrides, parse_overrides

    data = read_role_map_file(Path(path))
    try:
        return apply_overrides(data, parse_overrides(list(overrides)))
    except OverrideError as e:
        raise ConfigError(f"{path}: {e}") from None


def parse(data: dict, source: str = "<config>") -> RoleMap:
    """``config.parse`` (the values), then :func:`check` (the disk and the host)."""
    return check(config.parse(data, source), source)


def check(cfg: RoleMap, source: str = "<config>") -> RoleMap:
    """``cfg`` against this machine; returned when it passes."""
    try:
        check_context(cfg)
        check_backends(cfg.logging)  # a missing package, named now rather than at the first step
        check_memory(cfg)  # after the checks above: it reads sizes they have made consistent
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None
    return cfg


def check_context(cfg: RoleMap) -> None:
    """The longest prompt kept and the longest response fit the model's context (its config.json)."""
    context = cfg.model.context_length()
    limit, new = cfg.task.max_prompt_tokens, cfg.longest_response()
    which = "eval.max_new_tokens" if new > cfg.rollout.max_new_tokens else "rollout.max_new_tokens"
    if context is None:
        return
    if new >= context:
        raise ValueError(
            f"{which} ({new}) leaves no room for a prompt in the model's context of {context} tokens (its config.json)"
        )
    if limit is not None and limit + new > context:
        raise ValueError(
            f"task.max_prompt_tokens ({limit}) + {which} ({new}) "
            f"exceeds the model's context of {context} tokens (its config.json)"
        )


def check_world_size(cfg: RoleMap, size: int, source: str = "<config>") -> None:
    """The job was started with as many ranks as the role map asks for."""
    if cfg.world.size != size:
        parts = " + ".join(f"{r} {n}" for r, n in cfg.world.counts().items())
        raise ConfigError(
            f"{source}: world: the role map asks for {cfg.world.size} ranks ({parts}) "
            f"but the job has {size}; run it with mpirun -n {cfg.world.size}"
        )
