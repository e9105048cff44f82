"""Compile the mailbox's C path for the MPI that mpi4py loads: the transport (transports/fast_transport.pyx)
with its buffer pool (fast_buffers.pyx), the plain-message codec (fast_codec.pyx) and the
mailbox's send and poll (runtime/fast_mailbox.pyx), which calls the transport and the codec in
C. They are built together (transports/choose.py lists them) and used only together, into
the loaded MPI's own folder (``transports/built/open-mpi``, ``transports/built/mpich``, ...), so
a source tree can serve environments on different MPIs.

    python -m transports.build [--quiet]

``make venv`` runs this after installing the packages; a conda environment runs it once by
hand. It needs Cython, a C compiler and the mpi.h of the MPI that mpi4py loads (found with
that MPI's ``mpicc``). Nothing depends on it: without the compiled module, or when it was
built for another MPI than the one loaded, the mailbox uses the Python transport
(transports/choose.py), which is slower per message but the same on the wire. So a failed
build warns and exits 0; ``--strict`` makes it exit 1 instead.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Where builds went before they had a folder per MPI: found first on import, so removed.
_OLD_LAYOUT = ("transports/fast_*.so", "runtime/fast_mailbox*.so", "transports/fast_transport.json")


class BuildError(Exception):
    pass


def find_mpicc() -> str:
    """The ``mpicc`` of the MPI mpi4py loads: the environment's own first, then PATH's."""
    candidates = [os.environ.get("MPICC"), str(Path(sys.executable).parent / "mpicc"), shutil.which("mpicc")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise BuildError("no mpicc found (set MPICC, or install the MPI's compiler wrappers)")


def compile_flags(mpicc: str) -> tuple[list[str], list[str]]:
    """(include dirs, link flags) of the MPI behind ``mpicc`` (Open MPI: -showme, MPICH: -show)."""
    for ask in (["-showme"], ["-show"]):
        try:
            out = subprocess.run([mpicc, *ask], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise BuildError(f"{mpicc}: {e}") from None
        if out.returncode == 0 and out.stdout.strip():
            words = shlex.split(out.stdout)[1:]  # drop the compiler's own name
            includes = [w[2:] for w in words if w.startswith("-I")]
            links = [w for w in words if w.startswith(("-L", "-l", "-Wl,"))]
            return includes, links
    raise BuildError(f"{mpicc} does not say its flags (-showme / -show)")


def build(quiet: bool = False) -> list[Path]:
    """Compile the modules in place; the paths of the built extensions."""
    try:
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
    except ImportError as e:
        raise BuildError(f"Cython and setuptools are needed ({e})") from None
    from mpi4py import MPI

    from transports.choose import MODULES, build_folder, source_digest

    digest = source_digest()  # of the source as it is compiled, not as it may be by the end
    mpicc = find_mpicc()
    includes, links = compile_flags(mpicc)
    vendor = MPI.get_vendor()[0]
    folder = build_folder(vendor)
    root = HERE.parent
    # Each against the MPI's mpi.h: the mailbox path cimports the transport's class, MPI fields included.
    exts = [
        Extension(
            name,
            [name.replace(".", "/") + ".pyx"],
            include_dirs=includes,
            extra_link_args=links,
            extra_compile_args=["-O2", "-Wno-unused-function"],
        )
        for name in MODULES
    ]
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.chdir(root)  # the extension's name is relative to the repository's root
            modules = cythonize(exts, quiet=quiet, compiler_directives={"language_level": 3}, build_dir=tmp)
            dist = Distribution({"name": "mpirl-fast-transport", "ext_modules": modules})
            cmd = dist.get_command_obj("build_ext")
            cmd.inplace = False
            cmd.build_lib = str(folder)
            cmd.build_temp = tmp
            dist.run_command("build_ext")
            built = [Path(cmd.get_ext_fullpath(name)).resolve() for name in MODULES]
        except Exception as e:  # noqa: BLE001 - any compiler or Cython failure is a failed build
            raise BuildError(f"{type(e).__name__}: {e}") from None
        finally:
            os.chdir(cwd)
    # Which MPI it was compiled against, read before it is imported (importing a module linked
    # to another MPI library than the loaded one would mix the two).
    info = {"mpi": vendor, "source": digest, "mpicc": mpicc, "python": sysconfig.get_python_version()}
    (folder / "build.json").write_text(json.dumps(info) + "\n")
    for pattern in _OLD_LAYOUT:
        for old in root.glob(pattern):
            old.unlink()
    return built


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transports.build", description=__doc__.splitlines()[0])
    p.add_argument("--quiet", action="store_true", help="print only the outcome")
    p.add_argument("--strict", action="store_true", help="exit 1 when the build fails (default: warn, exit 0)")
    args = p.parse_args(argv)
    try:
        if args.quiet:  # the compiler's command lines go to a log nobody needs on success
            with open(os.devnull, "w") as null:
                saved = os.dup(1)
                os.dup2(null.fileno(), 1)
                try:
                    paths = build(quiet=True)
                finally:
                    os.dup2(saved, 1)
                    os.close(saved)
        else:
            paths = build()
    except BuildError as e:
        print(f"transports.build: the compiled transport was not built: {e}", file=sys.stderr)
        print("transports.build: the mailbox will use the Python transport (slower per message)", file=sys.stderr)
        return 1 if args.strict else 0
    print(f"transports.build: built {', '.join(str(p.relative_to(HERE.parent)) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
