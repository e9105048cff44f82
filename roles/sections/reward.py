"""The ``reward:`` section: what ``roles.reward.RewardActor`` scores responses with, and its limits.

Each component's own options are checked by that reward's ``Config`` (``roles.rewards``).
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from roles.sections.base import Section, field_error


class RewardComponent(Section):
    """One scorer of a (possibly weighted) reward; its options are checked by its own Config."""

    name: str  # a built-in (roles.rewards.REWARDS) or "package.module:function" / ":Class"
    weight: float = 1.0  # the reward is the weighted sum of its components' scores
    # The name it is logged under (default: the name, or for package.module:fn just fn); unique.
    label: str | None = None
    options: dict = {}  # the reward's own options (written beside name in the role map)

    @model_validator(mode="before")
    @classmethod
    def _options_beside_name(cls, value):
        from roles.plugins import PluginError
        from roles.rewards import options_class, reward_object

        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return value  # pydantic names what is missing or mistyped
        own = {"name", "weight", "label"}
        options = {k: v for k, v in value.items() if k not in own}
        try:
            reward_object(value["name"])
            schema = options_class(value["name"])
        except PluginError as e:
            raise field_error(("name",), str(e), value["name"]) from None
        if schema is not None:
            schema.model_validate(options)  # raises with each option's location
        elif options:
            raise field_error(
                (sorted(options)[0],),
                f"reward {value['name']!r} takes no options (got {', '.join(sorted(options))})",
                options,
            )
        return {**{k: v for k, v in value.items() if k in own}, "options": options}

    @property
    def logged_as(self) -> str:
        return self.label or self.name.rpartition(":")[2]


class OverlongPenalty(Section):
    """``reward.overlong``: DAPO's soft over-length punishment, added to training rewards
    (``roles.rewards.overlong``; the formula is in docs/algorithms.md)."""

    buffer: int = Field(gt=0)  # L_cache: tokens before max_length where the penalty ramps from 0 to -1
    # L_max: the longest response (None: rollout.max_new_tokens; an episode: all its tokens' budget)
    max_length: int | None = Field(None, gt=0)
    weight: float = Field(1.0, gt=0, le=100)  # the penalty's scale in the reward


class RewardSection(Section):
    """The role map's ``reward:`` section: what scores a response, and the scorers' limits."""

    # What scores a response. Written as a name (reward: gsm8k), one component with its options
    # (reward: {name: format, boxed: true}), or weighted components (a list, or components:).
    # Empty: the task's default reward (gsm8k -> gsm8k, math -> math_verify).
    components: list[RewardComponent] = []
    # Seconds one response may take to score (all components); past it the scorer's process is
    # killed and the response scores 0 (counted in verifier_timeouts). Holds even inside C code.
    timeout_s: float = Field(5.0, gt=0)
    workers: int = Field(1, gt=0, le=1024)  # scorer processes per reward rank (give a rank as many cores)
    overlong: OverlongPenalty | None = None  # DAPO's soft over-length penalty (training rewards only)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value):
        if value is None:
            return {}
        if isinstance(value, (str, list)):
            return {"components": value if isinstance(value, list) else [value]}
        if isinstance(value, dict) and "name" in value:
            section = {k: value[k] for k in ("timeout_s", "workers", "overlong") if k in value}
            return {**section, "components": [{k: v for k, v in value.items() if k not in section}]}
        return value

    @field_validator("components")
    @classmethod
    def _unique_labels(cls, v: list[RewardComponent]) -> list[RewardComponent]:
        seen = [c.logged_as for c in v]
        for label in seen:
            if "/" in label or label in ("correct", "score"):
                raise ValueError(
                    f"a component cannot be logged as {label!r} (no '/', and 'correct' and "
                    "'score' are the reward's own keys): give it another label"
                )
            if seen.count(label) > 1:
                raise ValueError(f"two components are logged as {label!r}: give one a label")
        return v

    def component_specs(self) -> list:
        """The components as plain data for the scorer processes (``roles.rewards.combine``)."""
        from roles.rewards.combine import ComponentSpec

        return [
            ComponentSpec(label=c.logged_as, name=c.name, weight=c.weight, options=c.options) for c in self.components
        ]
