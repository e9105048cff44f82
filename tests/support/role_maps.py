"""What the role-map checks say of a role map they refuse (the config tests' helper)."""

from __future__ import annotations

import pytest


def config_error(raw: dict) -> str:
    """The one-line message ``launch.config.parse`` refuses ``raw`` with (as from roles.yaml)."""
    from launch import config

    with pytest.raises(config.ConfigError) as info:
        config.parse(raw, "roles.yaml")
    return str(info.value)
