"""The checks of a role map with an ``environment:``, before any work: the environment builds,
its tools' schemas are valid, and the model's chat template renders its tools and its
observations token-exactly (``roles.episodes.rendering``). Any problem is a ``ConfigError``
naming the field and, for a template, the model and how to fix it.

Runs in the preflight's process (the environment's constructor and ``tools()`` only: episodes
run in sandboxed workers). Knows nothing of the data beyond the tokenizer it is given.
"""

from __future__ import annotations

from launch.config import ConfigError, RoleMap


def episode_tools(cfg: RoleMap, tokenizer) -> list[dict]:
    """The environment's tools (what prompts are rendered with), once the checks pass."""
    from roles.environments import build_environment
    from roles.episodes.rendering import TemplateError, TurnRenderer
    from roles.plugins import PluginError

    env_cfg = cfg.environment
    try:
        env = build_environment(env_cfg, seed=cfg.run.seed)
        tools = [dict(t) for t in env.tools()]
    except (PluginError, ValueError) as e:
        raise ConfigError(f"environment: {e}") from None
    except Exception as e:  # noqa: BLE001 - a user environment's own failure, named
        raise ConfigError(f"environment: {env_cfg.name!r} failed to build: {type(e).__name__}: {e}") from None
    eos = getattr(tokenizer, "eos_token_id", None)
    try:
        renderer = TurnRenderer(
            tokenizer,
            tools=tools,
            end_ids=() if eos is None else (eos,),
            template_kwargs=env_cfg.chat_template_kwargs,
            where=f"model.path {cfg.model.path}",
        )
        name = tools[0]["function"]["name"] if tools else "tool"
        renderer.observation_text([{"role": "tool", "name": name, "content": "0"}])
    except TemplateError as e:
        raise ConfigError(f"environment: {e}") from None
    return tools
