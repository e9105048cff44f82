"""The Environment interface: what an episode of several turns is made of.

An environment turns a task's example into an episode: :meth:`Environment.reset` gives the
opening messages (and the episode's state), :meth:`Environment.step` takes the model's turn
(its decoded text) and gives the observation messages that follow it, a reward for the turn
(optional) and whether the episode is done; :meth:`Environment.final_reward` is the episode's
own reward at its end (optional: the task's reward ranks score the final turn in any case).

An environment object is built once per worker process from its ``Config`` and the run seed,
and holds no episode's state: the state is a plain, picklable value that goes to the worker
with each call and comes back with the result. So any worker can take any episode's next
step, a worker killed for a hung tool loses one call and not its episodes, and the generator
that runs the episodes (``roles.episodes``) holds every episode's state.

Not known here: tokens, the chat template, engines, ranks, time limits (``roles.environments.pool``
runs the calls in sandboxed worker processes under ``environment.timeout_s``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field

from roles.sections.base import Section
from roles.tasks.base import Example

# A chat message as the template takes it: {"role": ..., "content": ...} (and what else the
# template reads, such as "name" or "tool_call_id").
Message = Mapping[str, Any]


class EnvironmentConfig(Section):
    """The ``environment:`` section: which environment, and the bounds of its episodes."""

    # A built-in (roles.environments.ENVIRONMENTS) or "package.module:Class".
    name: str = ""
    max_turns: int = Field(4, ge=1)  # model turns per episode at most
    # Tokens after the prompt (the model's turns and the observations between them) at most;
    # None: rollout.max_new_tokens per turn times max_turns, observations included.
    max_episode_tokens: int | None = Field(None, gt=0)
    timeout_s: float = Field(30.0, gt=0)  # one reset or step in a worker at most
    workers: int = Field(2, ge=1, le=256)  # sandboxed worker processes per generator rank
    # A reset or step that hangs, crashes or floods: "observe" goes on with an error
    # observation (the state from before the step), "end" ends the episode there.
    on_error: Literal["observe", "end"] = "observe"
    # The tool-call format the model writes (roles.environments.tool_calls.FORMATS), or
    # "package.module:Class" with the same interface.
    tool_format: str = "hermes"
    # Extra arguments of apply_chat_template (a thinking model's enable_thinking, say).
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)


@dataclass
class StepResult:
    """What follows the model's turn."""

    messages: list[dict[str, Any]]  # observation messages (role "tool", "user", ...); [] if done
    done: bool = False
    reward: float | None = None  # this turn's reward, if the environment gives one
    # Counted per episode and reported (roles.episodes.metrics): tool_calls, tool_errors
    # (malformed calls, unknown tools, tools that raised or timed out), tool_latency_s.
    info: dict[str, float] = field(default_factory=dict)


@dataclass
class Opening:
    """What an episode starts from."""

    messages: list[dict[str, Any]]  # the conversation before the model's first turn
    state: Any = None  # picklable; passed back to step() and final_reward()


class Environment:
    """Base class of environments; subclass it (with a nested ``Config`` for options)."""

    Config: ClassVar[type[EnvironmentConfig]] = EnvironmentConfig

    def __init__(self, config: EnvironmentConfig, seed: int = 0):
        self.config = config
        self.seed = seed

    def tools(self) -> Sequence[Mapping[str, Any]]:
        """The tools the model may call, as JSON-schema function specs for the chat template's
        ``tools=`` (``{"type": "function", "function": {"name", "description", "parameters"}}``);
        none by default."""
        return ()

    def reset(self, example: Example, messages: list[dict[str, Any]]) -> Opening:
        """The episode's opening. ``messages`` is the task's prompt as chat messages (its system
        prompt included); the default keeps it and no state."""
        return Opening(messages=list(messages))

    def step(self, state: Any, turn: str) -> tuple[Any, StepResult]:
        """The model's ``turn`` (its text, without the end-of-turn token): the new state and
        what follows. Raising counts as an error (``on_error``)."""
        raise NotImplementedError

    def final_reward(self, state: Any) -> float | None:
        """The episode's own reward at its end (added to the reward ranks' score); None: none."""
        return None


EndReason = Literal["done", "max_turns", "token_budget", "length", "error"]
END_REASONS: tuple[str, ...] = ("done", "max_turns", "token_budget", "length", "error")
