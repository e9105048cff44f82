"""launch/warm.py: the modules a role's build needs, imported while rank 0 prepares the data."""

import subprocess
import sys

import pytest
from mpi_helpers import REPO

from launch import warm


@pytest.mark.parametrize("role", ["controller", "generator", "trainer", "reward", "colocated"])
@pytest.mark.parametrize("engine", ["torch", "vllm", "sim"])
def test_every_listed_module_exists(role, engine):
    assert warm.warm_imports(role, engine) == []


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
