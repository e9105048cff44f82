"""Rewards: scorers behind one interface (``roles.rewards.base``), found by name.

``REWARDS`` is the registry of built-in verifiers (lazy ``module:attribute`` paths) and
``roles.rewards.learned.LEARNED`` that of learned rewards (a reward model, a judge, a
server, run in the rank: ``scoring`` adds them to the verifiers); a role map may also name
``package.module:function`` or ``package.module:Class``. A task module may own
its reward (the arith demo's ``arith_exact`` lives beside its task). ``combine`` weighs a
reward's components; ``sandbox``, ``worker`` and ``server_signals`` run the scorers in
separate processes under a time limit.

A verifier sees decoded text and the task's example: it knows nothing of tokens, models,
ranks or messages. The role map's ``reward:`` section is ``roles.sections.reward.RewardSection``.
"""

from __future__ import annotations

from typing import Any

from roles import plugins
from roles.rewards.base import RewardConfig, RewardFn, score_of

REWARDS: dict[str, str] = {
    "exact": "roles.rewards.exact:ExactMatch",
    "gsm8k": "roles.rewards.gsm8k:GSM8KReward",
    "math_verify": "roles.rewards.math_verify:MathVerifyReward",
    "format": "roles.rewards.format:FormatReward",
    "arith_exact": "roles.tasks.arith:ArithExact",
}


def reward_object(name: str) -> Any:
    """The registered class or user function/class called ``name``, checked to be callable the
    way the scorer calls it (``roles.rewards.base``), or a learned reward's class
    (``roles.rewards.learned``: built with its config and the rank's context, not called)."""
    from roles.rewards.learned import LEARNED
    from roles.rewards.learned.base import LearnedReward

    obj = plugins.resolve(name, {**REWARDS, **LEARNED}, "reward")
    if isinstance(obj, type) and issubclass(obj, LearnedReward):
        return obj
    if not callable(obj):
        raise plugins.PluginError(f"reward {name!r} is not callable")
    if not isinstance(obj, type):
        plugins.check_signature(obj, ("", None), f"reward {name!r}", "(response, example)")
        return obj
    config = getattr(obj, "Config", None)
    takes_config = isinstance(config, type) and issubclass(config, RewardConfig)
    plugins.check_signature(
        obj, (None,) if takes_config else (), f"reward class {name!r}", "(config)" if takes_config else "no arguments"
    )
    # The instances' __call__, from the class's own MRO (obj.__call__ would be type's, which
    # calls the class).
    call = next((k.__dict__["__call__"] for k in obj.__mro__ if "__call__" in k.__dict__), None)
    if call is None:
        raise plugins.PluginError(f"reward class {name!r} has no __call__(self, response, example)")
    plugins.check_signature(call, (None, "", None), f"{name!r}.__call__", "(self, response, example)")
    return obj


def options_class(name: str) -> type[RewardConfig] | None:
    """The reward's ``Config`` (its options schema), or None when it takes no options."""
    obj = reward_object(name)
    cfg = getattr(obj, "Config", None) if isinstance(obj, type) else None
    return cfg if isinstance(cfg, type) and issubclass(cfg, RewardConfig) else None


def build_reward(name: str, options: dict | None = None) -> RewardFn:
    """An instance ready to call: ``Class(Config(**options))``, ``Class()``, or the function."""
    obj = reward_object(name)
    options = dict(options or {})
    if isinstance(obj, type):
        cfg_cls = options_class(name)
        if cfg_cls is not None:
            return obj(cfg_cls.model_validate(options))
        if options:
            raise plugins.PluginError(f"reward {name!r} takes no options, got {sorted(options)}")
        return obj()
    if options:
        raise plugins.PluginError(f"reward {name!r} is a function and takes no options, got {sorted(options)}")
    return obj


__all__ = ["REWARDS", "RewardConfig", "RewardFn", "build_reward", "options_class", "reward_object", "score_of"]
