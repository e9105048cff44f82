"""roles/engines/__init__.py: the registry of engines, and the engine a role map names."""

from typing import get_args

import pytest

from roles.engines import ENGINES, EngineConfig, engine_class, make_engine
from roles.engines.sim_engine import SimEngine


def test_the_registry_holds_exactly_the_engines_a_role_map_accepts():
    assert set(get_args(EngineConfig.model_fields["engine"].annotation)) == set(ENGINES)


def test_each_registered_engine_builds_itself_from_the_role_map():
    for name in ENGINES:
        assert callable(engine_class(name).from_config)


def test_an_unknown_engine_is_named():
    with pytest.raises(ValueError, match="world.generator.engine: unknown engine 'tgi'"):
        engine_class("tgi")


def test_the_sim_engine_is_built_from_its_section_and_seed():
    engine = make_engine(EngineConfig(engine="sim"), None, max_seqs=4, seed=3)
    assert isinstance(engine, SimEngine) and engine.config == EngineConfig(engine="sim").sim
