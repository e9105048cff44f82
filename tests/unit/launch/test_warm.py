"""launch/warm.py: the modules a role's build needs, imported while rank 0 prepares the data."""

import importlib.util
import json
import subprocess
import sys

import pytest

from launch import warm
from support.paths import REPO


@pytest.mark.parametrize("role", ["controller", "generator", "trainer", "reward", "colocated"])
@pytest.mark.parametrize("engine", ["torch", "vllm", "sim"])
def test_every_listed_module_exists(role, engine):
    # Found, not imported (vllm's import is not for the test process, nor worth its seconds).
    assert [m for m in warm.modules_for(role, engine) if importlib.util.find_spec(m) is None] == []


def test_a_module_that_fails_is_returned_not_raised(monkeypatch):
    monkeypatch.setitem(warm._BY_ROLE, "generator", ["launch.job", "mpirl_no_such_module"])
    assert warm.warm_imports("generator", "sim") == ["mpirl_no_such_module"]


def _cfg(tmp_path, engine="torch", quantization=None, model_config=None):
    from types import SimpleNamespace

    if model_config is not None:
        (tmp_path / "config.json").write_text(json.dumps(model_config))
    generator = SimpleNamespace(engine=engine, quantization=quantization)
    return SimpleNamespace(world=SimpleNamespace(generator=generator), model=SimpleNamespace(path=str(tmp_path)))


def test_torchao_is_left_out_only_where_nothing_can_use_it(tmp_path):
    plain = {"model_type": "llama"}
    assert warm.unused_optional_packages(_cfg(tmp_path, model_config=plain)) == ("torchao",)
    assert warm.unused_optional_packages(_cfg(tmp_path, engine="sim", model_config=plain)) == ("torchao",)
    assert warm.unused_optional_packages(_cfg(tmp_path, quantization="int8", model_config=plain)) == ()
    assert warm.unused_optional_packages(_cfg(tmp_path, engine="vllm", model_config=plain)) == ()
    saved = {"model_type": "llama", "quantization_config": {"quant_method": "torchao"}}
    assert warm.unused_optional_packages(_cfg(tmp_path, model_config=saved)) == ()
    (tmp_path / "config.json").write_text("{not json")
    assert warm.unused_optional_packages(_cfg(tmp_path)) == ()  # unreadable: no guess
    (tmp_path / "config.json").unlink()
    assert warm.unused_optional_packages(_cfg(tmp_path)) == ()


_WARM_HIDING = """
import sys
from launch import warm
failed = warm.warm_imports("trainer", None, hide=tuple(sys.argv[1:]))
from transformers.utils import is_torchao_available
print(failed, "torchao" in sys.modules, is_torchao_available())
import torchao  # mpirl's own import (int8 generation) still works afterwards
print("torchao" in sys.modules)
"""


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")
@pytest.mark.parametrize("hide", [(), ("torchao",)], ids=["kept", "hidden"])
def test_a_hidden_package_is_not_imported_by_transformers_and_imports_after(hide):
    # A fresh interpreter: in this one transformers may have looked for torchao already.
    repo = str(REPO)
    run = subprocess.run(
        [sys.executable, "-c", _WARM_HIDING, *hide], capture_output=True, text=True, timeout=240, cwd=repo
    )
    assert run.returncode == 0, run.stderr[-3000:]
    during, after = run.stdout.splitlines()[-2:]
    assert during == ("[] False False" if hide else "[] True True")
    assert after == "True"


def test_the_rule_reads_a_real_role_map(tmp_path):
    # The fields it reads, as the role map's own sections hold them (not stand-ins).
    from launch import preflight, recipe

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    base = REPO / "examples/arith/async.yaml"
    cfg = preflight.load(recipe.write_config(base, tmp_path / "plain", {"model": {"path": str(model)}}))
    assert warm.unused_optional_packages(cfg) == ("torchao",)
    int8 = {"model": {"path": str(model)}, "world": {"generator": {"quantization": "int8"}}}
    cfg = preflight.load(recipe.write_config(base, tmp_path / "int8", int8))
    assert warm.unused_optional_packages(cfg) == ()
