"""Running a recipe from Python: a role map with overrides, the job under mpiexec, its metrics.

Used by the demos (``examples/*/demo.py``), the end-to-end tests and the benchmarks, so all of
them launch jobs the way a user's ``mpirl run`` does. Knows no task: each demo prepares its
own model and data (``examples/<demo>/prepare.py``).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from launch import preflight
from launch.cli import mpiexec_command
from launch.role_map_file import load_yaml
from roles.observe.progress import PROGRESS_ENV, launcher_env
from roles.run_files import METRICS, ROLE_MAP, read_jsonl


def write_config(base_config: str | Path, out_dir: str | Path, overrides: dict) -> Path:
    """A copy of ``base_config`` with ``overrides`` (``{"run": {"steps": 5}}``) merged in."""
    data = load_yaml(Path(base_config).read_text())
    merged = merge_overrides(copy.deepcopy(data), overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / ROLE_MAP
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    preflight.load(path)  # fail here, with the field named, rather than inside mpirun
    return path


def merge_overrides(base: dict, extra: dict) -> dict:
    """``extra`` merged into ``base`` in place, nested mappings key by key (``base`` is returned)."""
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge_overrides(base[k], v)
        else:
            base[k] = v
    return base


def run_job(
    config_path: str | Path, timeout_s: float | None = None, quiet: bool = False, extra_env: dict | None = None
) -> float:
    """Run a role map under mpiexec; return its wall time. Raises if the job fails or times out."""
    cfg = preflight.load(config_path)
    cmd, env = mpiexec_command(cfg.world.size, [sys.executable, "-m", "launch", str(config_path)])
    env.setdefault("OMP_NUM_THREADS", "1")
    if not quiet and PROGRESS_ENV not in env:  # a bar if our stdout is a terminal (see roles.observe.progress)
        env.update(launcher_env())
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [repo, env.get("PYTHONPATH", "")] if p)
    env.update(extra_env or {})
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            timeout=timeout_s,
            stdout=subprocess.PIPE if quiet else None,
            stderr=subprocess.STDOUT if quiet else None,
            text=True,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the job {config_path} ran past {timeout_s} s") from None
    if proc.returncode != 0:
        tail = (proc.stdout or "")[-4000:] if quiet else ""
        raise RuntimeError(f"the job {config_path} exited with {proc.returncode}\n{tail}")
    return time.perf_counter() - t0


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Every line of a finished run's metrics.jsonl, in file order; a missing file or a damaged
    line raises (a demo or test reads what a run it waited for wrote: damage there is a failure)."""
    path = Path(run_dir) / METRICS
    records, notes = read_jsonl(path)
    if notes:
        raise ValueError(f"{path}: {'; '.join(notes)}")
    return records


def mode_name(cfg) -> str:
    k = cfg.run.max_staleness
    return "sync" if k == 0 else f"async (max_staleness={k})"
