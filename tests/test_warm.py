"""launch/warm.py: the modules a role's build needs, imported while rank 0 prepares the data."""

import subprocess
import sys

from mpi_helpers import REPO

from launch import warm


def test_every_listed_module_exists():
    """All of them, in a process of its own (vllm's import is not for the test process)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from launch.warm import warm_imports; "
        "print({(r, e): warm_imports(r, e) for r in ['controller', 'generator', 'trainer', 'reward', 'colocated'] "
        "for e in ['torch', 'vllm', 'sim'] if warm_imports(r, e)})"
    )
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "{}", out.stdout[-2000:] + out.stderr[-2000:]


def test_a_module_that_fails_is_returned_not_raised(monkeypatch):
    monkeypatch.setitem(warm._BY_ROLE, "generator", ["launch.job", "mpirl_no_such_module"])
    assert warm.warm_imports("generator", "sim") == ["mpirl_no_such_module"]


def test_the_warm_imports_are_what_the_build_then_finds_imported():
    """In a fresh process: after warming the trainer's modules, loading the policy imports
    nothing slow (transformers' auto classes are there already)."""
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from launch.warm import warm_imports; "
        "warm_imports('trainer', None); before = set(sys.modules); "
        "from transformers import AutoModelForCausalLM; import roles.policy, roles.trainer; "
        "print(sorted(m for m in set(sys.modules) - before if m.startswith(('transformers.models.auto', 'torch'))))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
