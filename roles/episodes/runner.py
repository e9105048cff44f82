"""Episodes in the streaming generator: a turn is an engine request, a tool call a pool call.

For each group the generator admits, the runner starts ``n`` episodes: it asks the
environment (in its sandboxed workers, ``roles.environments.pool``) to reset each from the
group's example, renders the opening, and adds the first turn as a request to the engine.
When a turn ends, its text goes to the environment; the observation's ids
(``roles.episodes.rendering``) are appended and the next turn goes back to the engine. The
engine never waits for a tool: an episode waiting on one holds no slot, and the other
episodes decode on. A group is done when its last episode ends (the environment said done,
``max_turns``, the token budget, a turn cut at its length, or an error).

Turn ``t`` of episode ``j`` of a group seeded ``s`` is sampled with a seed drawn from
(s, j, t) alone, so an episode samples the same tokens whatever else runs (at a fixed policy).

Failures are the environment's, never the job's: a call that raised ends its episode
(``end: error``; the reward rank scores it 0); one that timed out or whose worker died goes
on with an error observation or ends the episode, as ``environment.on_error`` says. Not known
here: messages on the wire, rewards, weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from roles.engines.base import Sample, SamplingConfig
from roles.engines.requests import Finished, Request
from roles.environments.base import EnvironmentConfig, Opening, StepResult
from roles.episodes.episode import Episode
from roles.episodes.rendering import TemplateError


def turn_seed(group_seed: int | None, index: int, turn: int) -> int | None:
    if group_seed is None:
        return None
    state = np.random.SeedSequence([group_seed & (2**64 - 1), index, turn, 0x7E4]).generate_state(1, np.uint64)
    return int(state[0] >> 1)


@dataclass
class _Group:
    episodes: list[Episode]
    sampling: SamplingConfig
    fallback_ids: np.ndarray  # the task's prompt, for an episode whose reset failed
    left: int
    messages: list  # the task's prompt as chat messages (what reset was given)


@dataclass
class GroupDone:
    """A group's episodes, ended: one sample, loss mask and record per episode."""

    key: int
    prompt_ids: np.ndarray  # what the group's openings share (the rest leads each response, masked)
    samples: list[Sample]
    masks: list[np.ndarray]
    infos: list[dict]


class EpisodeRunner:
    """``pool``: the environment's workers; ``renderer``: a ``TurnRenderer`` with its tools;
    ``examples``: example id -> (Example, its prompt as chat messages); ``add``: the engine's
    ``add``; ``version``: the policy version the engine holds now."""

    def __init__(
        self,
        config: EnvironmentConfig,
        pool,
        renderer,
        examples: Callable,
        max_new_tokens: int,
    ):
        self.config = config
        self.pool = pool
        self.renderer = renderer
        self.examples = examples
        self.budget = config.max_episode_tokens or max_new_tokens * config.max_turns
        self.groups: dict[int, _Group] = {}
        self.turns: dict[int, Episode] = {}  # engine tag -> the episode whose turn it is
        self.calls: dict[int, tuple[Episode, str]] = {}  # pool key -> (episode, call)
        self._next_tag = 0
        self._next_call = 0
        self.add: Callable[[Request], None] | None = None  # set by the generator: engine.add
        self.version: Callable[[], int] = lambda: 0

    # ----------------------------------------------------------------------- the generator's

    def start(self, key: int, example_id: int, n: int, sampling: SamplingConfig, prompt_ids) -> None:
        """Group ``key``'s ``n`` episodes of example ``example_id``; ``sampling.seed`` seeds them."""
        episodes = [Episode(key, j, sampling.seed, self.budget) for j in range(n)]
        example, messages = self.examples(example_id)
        self.groups[key] = _Group(episodes, sampling, np.asarray(prompt_ids, np.int32), n, messages)
        for ep in episodes:
            self._call(ep, "reset", (example, messages))

    def live(self) -> bool:
        return bool(self.groups)

    def turn_ended(self, finished: Finished) -> list[GroupDone]:
        ep = self.turns.pop(finished.tag)
        ep.add_turn(finished.sample, self.version())
        if ep.end == "error":  # its reset failed: one turn from the task's prompt, scored 0
            return self._end(ep, "error")
        if finished.sample.finish_reason == "length":
            return self._end(ep, "length")
        self._call(ep, "step", (ep.state, self.renderer.turn_text(finished.sample.response_ids)))
        return []

    def pump(self, wait_s: float = 0.0) -> list[GroupDone]:
        """Take the environment's answers that are in (waiting up to ``wait_s`` for one)."""
        done: list[GroupDone] = []
        if not self.calls:
            return done
        for result in self.pool.ready(wait_s):
            ep, call = self.calls.pop(result.key)
            done += getattr(self, f"_after_{call}")(ep, result)
        return done

    def close(self) -> None:
        self.pool.close()

    # ----------------------------------------------------------------------------- the calls

    def _call(self, ep: Episode, call: str, args: tuple) -> None:
        key, self._next_call = self._next_call, self._next_call + 1
        self.calls[key] = (ep, call)
        self.pool.submit(key, call, args)

    def _after_reset(self, ep: Episode, result) -> list[GroupDone]:
        group = self.groups[ep.group]
        try:
            if not result.ok:
                raise _Failed(result.error)
            opening = _opening(result.value, group.messages)
            ep.state = opening.state
            ep.prompt_ids = self.renderer.opening_ids(opening.messages)
        except (_Failed, TemplateError):  # sampled from the task's own prompt, then ended and scored 0
            ep.env_errors += 1
            ep.end = "error"
            ep.prompt_ids = group.fallback_ids
        self._next_turn(ep)
        return []

    def _after_step(self, ep: Episode, result) -> list[GroupDone]:
        if not result.ok:
            ep.env_errors += 1
            if self.config.on_error == "end" or not _recoverable(result):
                return self._end(ep, "error")
            step = StepResult(messages=[{"role": "tool", "content": f"error: {result.error}"}])
        elif not _is_step(result.value):  # the environment's mistake: that episode only
            ep.env_errors += 1
            return self._end(ep, "error")
        else:
            ep.state, step = result.value
        ep.add_info(step.info)
        ep.turn_rewards.append(step.reward)
        if step.done or not step.messages:
            return self._end(ep, "done")
        if ep.turns >= self.config.max_turns:
            return self._end(ep, "max_turns")
        try:
            obs = self.renderer.observation_ids(step.messages)
        except TemplateError:  # messages the chat template refuses: that episode only
            ep.env_errors += 1
            return self._end(ep, "error")
        if len(obs) >= ep.left:  # no room for the observation and one more token
            return self._end(ep, "token_budget")
        ep.add_observation(obs)
        self._next_turn(ep)
        return []

    def _after_final(self, ep: Episode, result) -> list[GroupDone]:
        if result.ok:
            ep.env_reward = None if result.value is None else float(result.value)
        else:
            ep.env_errors += 1
            ep.end = "error"
        return self._group_if_done(ep)

    # -------------------------------------------------------------------------- the episode

    def _next_turn(self, ep: Episode) -> None:
        group = self.groups[ep.group]
        tag, self._next_tag = self._next_tag, self._next_tag + 1
        self.turns[tag] = ep
        sampling = replace(
            group.sampling,
            max_new_tokens=max(1, min(group.sampling.max_new_tokens, ep.left)),
            seed=turn_seed(group.sampling.seed, ep.index, ep.turns),
        )
        self.add(Request(tag, ep.context(), 1, sampling))

    def _end(self, ep: Episode, reason: str) -> list[GroupDone]:
        if ep.end is None:
            ep.end = reason
        if ep.end == "error":  # no final reward for an episode the environment failed
            return self._group_if_done(ep)
        self._call(ep, "final", (ep.state,))
        return []

    def _group_if_done(self, ep: Episode) -> list[GroupDone]:
        group = self.groups[ep.group]
        group.left -= 1
        if group.left:
            return []
        del self.groups[ep.group]
        eps = group.episodes
        shared = _shared_prefix([e.prompt_ids for e in eps])
        for e in eps:
            e.lead_with(e.prompt_ids[shared:])
        samples, masks, infos = [e.sample() for e in eps], [e.loss_mask() for e in eps], [e.info() for e in eps]
        return [GroupDone(ep.group, eps[0].prompt_ids[:shared], samples, masks, infos)]


def _shared_prefix(arrays: list[np.ndarray]) -> int:
    """How many leading ids every array shares (a random reset makes openings differ)."""
    first = arrays[0]
    n = min(len(a) for a in arrays)
    for a in arrays[1:]:
        differs = np.flatnonzero(a[:n] != first[:n])
        n = int(differs[0]) if len(differs) else n
    return n


class _Failed(Exception):
    """An environment call that failed (its worker's words)."""


def _opening(value, messages) -> Opening:
    """What ``reset`` returned as an ``Opening`` (None: the task's messages, no state)."""
    if value is None:
        return Opening(messages=list(messages))
    if not isinstance(value, Opening):
        raise _Failed(f"reset returned {type(value).__name__}, not an Opening")
    return value


def _is_step(value) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], StepResult)


def _recoverable(result) -> bool:
    """A call cut at its time limit or lost with its worker (the state from before it is
    still good); one that raised is the environment's own failure."""
    return bool(getattr(result, "timed_out", False) or getattr(result, "crashed", False))
