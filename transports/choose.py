"""Which MPI transport a mailbox uses: the compiled one when it is built for this MPI.

transports/fast_transport.pyx is transports/mpi_transport.py's class compiled to C calls to
MPI (``python -m transports.build``; ``make venv`` runs it). It is built with the modules that go
with it (its buffer pool, the plain-message codec and the mailbox's compiled send and poll: see
``MODULES``). The two transports are the same on the wire, so ranks may even mix them. The
compiled one is used when it was built and is built for the MPI that mpi4py loaded;
``MPIRL_TRANSPORT=python`` asks for the Python one, ``=compiled`` makes its absence an error
(for the tests and benchmarks that measure it).

Each MPI family gets its own build folder (``transports/built/<mpi>/``, with its record
``build.json``), so environments on Open MPI and on MPICH can share one source tree: the
folder of the loaded MPI joins the ``transports`` and ``runtime`` packages' search paths just
before the modules are imported (:func:`expose`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path

from transports.mpi_transport import MPITransport

ENV = "MPIRL_TRANSPORT"
_HERE = Path(__file__).resolve().parent
BUILT = _HERE / "built"  # one folder per MPI family (build_folder)
# The compiled modules, built together (transports/build.py), and every source file they are
# compiled from, relative to the repository's root.
MODULES = ("transports.fast_buffers", "transports.fast_transport", "transports.fast_codec", "runtime.fast_mailbox")
SOURCES = (
    "transports/fast_buffers.pyx",
    "transports/fast_buffers.pxd",
    "transports/fast_transport.pyx",
    "transports/fast_transport.pxd",
    "transports/fast_codec.pyx",
    "transports/fast_codec.pxd",
    "runtime/fast_mailbox.pyx",
)


def source_digest(root: Path = _HERE.parent) -> str:
    """What a build records of the sources it compiled: modules older than their sources are not used."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((root / name).read_bytes())
    return digest.hexdigest()[:16]


class TransportUnavailable(RuntimeError):
    pass


def build_folder(vendor: str) -> Path:
    """Where the build for this MPI (``MPI.get_vendor()[0]``) lives: ``built/open-mpi``, ``built/mpich``."""
    return BUILT / (re.sub(r"[^a-z0-9]+", "-", vendor.lower()).strip("-") or "mpi")


def expose(folder: Path, package) -> None:
    """Let ``package``'s compiled modules be imported from the build ``folder`` (the mailbox's
    compiled path, runtime/fast_mailbox, is exposed the same way by runtime/mailbox.py)."""
    sub = str(folder / package.__name__)
    if sub not in package.__path__:
        package.__path__.append(sub)


@functools.cache
def compiled_transport():
    """The compiled transport class, or the reason it cannot be used (a string)."""
    from mpi4py import MPI

    loaded = MPI.get_vendor()[0]
    folder = build_folder(loaded)
    try:
        info = json.loads((folder / "build.json").read_text())
        built_for, built_from = info["mpi"], info["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"not built for {loaded} (python -m transports.build)"
    try:
        if built_from != source_digest():
            return f"older than its sources ({', '.join(SOURCES)}; python -m transports.build)"
    except OSError:  # an installed copy without the source: the build is all there is
        pass
    if built_for != loaded:  # checked before importing: the module is linked to its MPI's library
        return f"built for {built_for}, but mpi4py loaded {loaded} (python -m transports.build)"
    import transports

    expose(folder, transports)
    try:
        from transports import fast_transport
    except ImportError as e:
        return f"does not load ({e}; python -m transports.build)"
    if fast_transport.BUILT_FOR != loaded:
        return f"compiled against {fast_transport.BUILT_FOR}'s mpi.h, but mpi4py loaded {loaded}"
    return fast_transport.FastTransport


def transport_class():
    """The class a mailbox builds its transport with (see the module doc)."""
    want = os.environ.get(ENV, "auto").strip().lower()
    if want == "python":
        return MPITransport
    if want not in ("auto", "compiled"):
        raise TransportUnavailable(f"{ENV}={os.environ[ENV]!r}: expected auto, python or compiled")
    found = compiled_transport()
    if isinstance(found, str):
        if want == "compiled":
            raise TransportUnavailable(f"{ENV}=compiled, but the compiled transport is {found}")
        return MPITransport
    return found


def transport_notice() -> str | None:
    """A line for the job's log when its mailboxes will run on the Python transport unasked
    (the compiled one not built, or built for another MPI); None otherwise."""
    if os.environ.get(ENV, "auto").strip().lower() != "auto":
        return None
    found = compiled_transport()
    if not isinstance(found, str):
        return None
    return f"note: the mailboxes use the Python transport (slower per message): the compiled one is {found}"
