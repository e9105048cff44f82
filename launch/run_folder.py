"""The run's output folder (``run.out``), checked against the machine before any work.

A role map can be valid and still point its output at a file, or at a folder this user cannot
write; found here, before models load, it is a config error naming ``run.out``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from launch.config import ConfigError, RoleMap
from roles.run_files import ROLE_MAP


def check_run_folder(cfg: RoleMap, create: bool = True) -> Path:
    """Prove ``run.out`` writable, creating it if ``create`` (the launch; ``mpirl check`` only
    looks: the nearest folder that exists must let this user create the rest)."""
    out = Path(cfg.run.out)
    existing = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    if not existing.is_dir():
        raise ConfigError(f"run.out: {str(existing)!r} is a file, not a folder (run.out is {str(out)!r})")
    if not create:
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(f"run.out: {str(existing)!r} is not writable by this user (run.out is {str(out)!r})")
        return out
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".mpirl-write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"run.out: cannot write in {str(out)!r}: {e.strerror or e}") from None
    return out


def record_role_map(source: str | Path, out: str | Path, overrides=()) -> Path | None:
    """Copy the role map the job was started with into ``run.out/config.yaml``, where ``mpirl
    report`` and ``mpirl advise`` read a run's settings; returns the copy (None when ``source``
    already is that file, as for the demos, which write their role map there, and no override
    changed it).

    The user's own text, comments included; with command-line ``overrides`` the merged role
    map instead (what ran, headed by the overrides). Replaced atomically, so a resumed run's
    copy is always a whole file, that of its latest start. Call on one rank, once every rank
    has read ``source``.
    """
    target = Path(out) / ROLE_MAP
    source = Path(source)
    if not overrides and target.exists() and os.path.samefile(source, target):
        return None
    if overrides:
        from launch.overrides import merged_text
        from launch.preflight import read_with_overrides

        text = merged_text(read_with_overrides(source, overrides), str(source), list(overrides)).encode()
    else:
        text = source.read_bytes()
    with tempfile.NamedTemporaryFile("wb", dir=target.parent, prefix=".config.yaml-", delete=False) as f:
        f.write(text)
    os.replace(f.name, target)
    return target
