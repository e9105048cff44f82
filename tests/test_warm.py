"""launch/warm.py: the modules a role's build needs, imported while rank 0 prepares the data."""

import importlib.util

import pytest

from launch import warm


@pytest.mark.parametrize("role", ["controller", "generator", "trainer", "reward", "colocated"])
@pytest.mark.parametrize("engine", ["torch", "vllm", "sim"])
def test_every_listed_module_exists(role, engine):
    # Found, not imported (vllm's import is not for the test process, nor worth its seconds).
    assert [m for m in warm.modules_for(role, engine) if importlib.util.find_spec(m) is None] == []


def test_a_module_that_fails_is_returned_not_raised(monkeypatch):
    monkeypatch.setitem(warm._BY_ROLE, "generator", ["launch.job", "mpirl_no_such_module"])
    assert warm.warm_imports("generator", "sim") == ["mpirl_no_such_module"]
