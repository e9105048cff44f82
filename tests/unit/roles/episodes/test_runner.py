"""roles/episodes/runner.py: a group's episodes turn by turn, with a scripted engine and pool."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from roles.engines.base import Sample, SamplingConfig
from roles.engines.requests import Finished
from roles.environments.base import Environment, EnvironmentConfig, Opening, StepResult
from roles.episodes.rendering import TurnRenderer
from roles.episodes.runner import EpisodeRunner
from roles.tasks.base import Example
from support.tool_chat import CALCULATOR, STRIPPING_TEMPLATE, TOOLS_TEMPLATE, tool_chat_tokenizer

pytestmark = pytest.mark.timeout(120)

CALL = '<think>12 plus 30</think><tool_call>{"name": "calculator", "arguments": {"expression": "12+30"}}</tool_call>'
EXAMPLE = Example(id=3, prompt="What is 12+30?", answer="42")


class Calculating(Environment):
    """A tool call gets "42" back; a turn without one ends the episode; ``raise_on`` turns raise."""

    def __init__(self, config=None, raise_on: str | None = None, final: float | None = 0.5):
        super().__init__(config or EnvironmentConfig(name="t"))
        self.raise_on, self.final = raise_on, final

    def tools(self):
        return [CALCULATOR]

    def reset(self, example, messages):
        return Opening(messages=list(messages), state=0)

    def step(self, state, turn):
        if self.raise_on is not None and self.raise_on in turn:
            raise ValueError("the environment broke")
        if "<tool_call>" in turn:
            info = {"tool_calls": 1.0, "tool_latency_s": 0.01}
            return state + 1, StepResult([{"role": "tool", "name": "calculator", "content": "42"}], info=info)
        return state, StepResult([], done=True, reward=0.25)

    def final_reward(self, state):
        return self.final


@dataclass
class Result:
    key: int
    ok: bool
    value: object = None
    error: str | None = None
    seconds: float = 0.0
    timed_out: bool = False
    crashed: bool = False


class InlinePool:
    """The pool's contract, run in this process; ``cut`` calls come back timed out."""

    def __init__(self, env, cut: set[str] = frozenset(), fail_reset: bool = False):
        self.env, self.cut, self.fail_reset = env, set(cut), fail_reset
        self.queue, self.closed = [], False

    def submit(self, key, call, args):
        self.queue.append((key, call, args))

    def ready(self, timeout_s=0.0):
        out, taken, self.queue = [], self.queue, []
        for key, call, args in taken:
            if call in self.cut:
                out.append(Result(key, False, error="timed out after 1 s", timed_out=True))
            elif call == "reset" and self.fail_reset:
                out.append(Result(key, False, error="KeyError: 3"))
            else:
                try:
                    out.append(Result(key, True, getattr(self.env, {"final": "final_reward"}.get(call, call))(*args)))
                except Exception as e:  # noqa: BLE001
                    out.append(Result(key, False, error=f"{type(e).__name__}: {e}"))
        return out

    def tools(self):
        return list(self.env.tools())

    def close(self):
        self.closed = True


class Engine:
    """Takes the runner's requests; the test decides what each turn samples."""

    def __init__(self):
        self.requests = []

    def add(self, request):
        self.requests.append(request)

    def finish(self, runner, tok, text: str, eos: bool = True, logprob: float = -0.5):
        """Every open request ends with ``text``: the groups that ended."""
        done, pending, self.requests = [], self.requests, []
        for r in pending:
            ids = tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])
            ids = np.asarray(ids, np.int32)
            sample = Sample(
                ids, np.full(len(ids), logprob, np.float32), "stop" if eos else "length", np.zeros(len(ids), np.int32)
            )
            done += runner.turn_ended(Finished(r.tag, 0, sample))
        return done


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tool_chat_tokenizer(tmp_path_factory.mktemp("tok"))


def _runner(tok, env=None, template=TOOLS_TEMPLATE, pool=None, **config):
    tok.chat_template = template
    env = env or Calculating()
    pool = pool or InlinePool(env)
    renderer = TurnRenderer(tok, tools=pool.tools(), end_ids=[tok.eos_token_id])
    cfg = EnvironmentConfig(name="t", **config)
    runner = EpisodeRunner(cfg, pool, renderer, lambda i: (EXAMPLE, [{"role": "user", "content": EXAMPLE.prompt}]), 64)
    engine = Engine()
    runner.add = engine.add
    return runner, engine


def _drain(runner) -> list:
    """Pump until the environment has answered every call (a step's answer may ask for the final reward)."""
    done = []
    while runner.calls:
        done += runner.pump()
    return done


def _start(runner, n=2, seed=11):
    runner.start(
        key=5, example_id=3, n=n, sampling=SamplingConfig(1.0, 1.0, 64, seed), prompt_ids=np.array([9, 9], np.int32)
    )


@pytest.mark.parametrize("template", [TOOLS_TEMPLATE, STRIPPING_TEMPLATE], ids=["keeps_turns", "strips_reasoning"])
def test_trained_tokens_are_the_sampled_tokens_turn_by_turn(tok, template):
    runner, engine = _runner(tok, template=template)
    _start(runner)
    assert runner.pump() == [] and len(engine.requests) == 2
    opening = engine.requests[0].prompt_ids
    first = engine.finish(runner, tok, CALL, logprob=-0.25)
    assert first == [] and runner.pump() == []
    turn1 = np.asarray(tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    context = engine.requests[0].prompt_ids
    assert context[: len(opening)].tolist() == opening.tolist()
    assert context[len(opening) : len(opening) + len(turn1)].tolist() == turn1.tolist()  # the turn as sampled
    assert engine.finish(runner, tok, "42", logprob=-0.75) == []
    (done,) = _drain(runner)
    assert done.key == 5 and done.prompt_ids.tolist() == opening.tolist()
    turn2 = np.asarray(tok("42", add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    obs = context[len(opening) + len(turn1) :]
    assert tok.decode(obs.tolist()).startswith("\n<|im_start|>user\n<tool_response>\n42")
    for sample, mask, info in zip(done.samples, done.masks, done.infos):
        assert sample.response_ids.tolist() == turn1.tolist() + obs.tolist() + turn2.tolist()
        assert sample.response_ids[mask == 1].tolist() == turn1.tolist() + turn2.tolist()  # only sampled tokens train
        assert np.all(sample.logprobs[mask == 0] == 0) and set(sample.logprobs[mask == 1]) == {-0.25, -0.75}
        assert info["turns"] == 2 and info["end"] == "done" and info["tool_calls"] == 1.0
        assert info["final_start"] == len(turn1) + len(obs) and info["observation_tokens"] == len(obs)
        assert info["env_reward"] == 0.5 and info["turn_reward"] == 0.25


def test_turns_are_seeded_by_group_sample_and_turn_alone(tok):
    runner, engine = _runner(tok)
    _start(runner, seed=11)
    runner.pump()
    seeds = [r.sampling.seed for r in engine.requests]
    assert len(set(seeds)) == 2
    engine.finish(runner, tok, CALL)
    runner.pump()
    later = [r.sampling.seed for r in engine.requests]
    assert not set(later) & set(seeds)
    again, engine2 = _runner(tok)
    _start(again, seed=11)
    again.pump()
    assert [r.sampling.seed for r in engine2.requests] == seeds


def test_max_turns_and_the_token_budget_end_an_episode(tok):
    runner, engine = _runner(tok, max_turns=1)
    _start(runner, n=1)
    runner.pump()
    engine.finish(runner, tok, CALL)
    (done,) = _drain(runner)
    assert done.infos[0]["end"] == "max_turns" and done.infos[0]["turns"] == 1
    runner, engine = _runner(tok, max_episode_tokens=40)
    _start(runner, n=1)
    runner.pump()
    assert engine.requests[0].sampling.max_new_tokens == 40
    engine.finish(runner, tok, CALL)  # ~30 tokens: the observation does not fit in what is left
    (done,) = _drain(runner)
    assert done.infos[0]["end"] == "token_budget" and done.masks[0].all()


def test_a_turn_cut_at_its_length_ends_the_episode(tok):
    runner, engine = _runner(tok)
    _start(runner, n=1)
    runner.pump()
    engine.finish(runner, tok, "<tool_call>", eos=False)
    (done,) = _drain(runner)
    assert done.infos[0]["end"] == "length" and done.samples[0].finish_reason == "length"


def test_an_environment_that_raises_ends_that_episode_only(tok):
    runner, engine = _runner(tok, env=Calculating(raise_on="12+30"))
    _start(runner, n=1)
    runner.pump()
    engine.finish(runner, tok, CALL)
    (done,) = _drain(runner)
    assert done.infos[0]["end"] == "error" and done.infos[0]["env_errors"] == 1


def test_a_step_cut_at_its_time_limit_goes_on_with_an_error_observation_or_ends(tok):
    env = Calculating()
    runner, engine = _runner(tok, env=env, pool=InlinePool(env, cut={"step"}))
    _start(runner, n=1)
    runner.pump()
    engine.finish(runner, tok, CALL)
    assert runner.pump() == [] and len(engine.requests) == 1  # on with an error observation
    assert "error: timed out after 1 s" in tok.decode(engine.requests[0].prompt_ids.tolist())
    runner, engine = _runner(tok, env=env, pool=InlinePool(env, cut={"step"}), on_error="end")
    _start(runner, n=1)
    runner.pump()
    engine.finish(runner, tok, CALL)
    (done,) = _drain(runner)
    assert done.infos[0]["end"] == "error"


def test_a_failed_reset_samples_the_task_prompt_and_is_marked(tok):
    env = Calculating()
    runner, engine = _runner(tok, env=env, pool=InlinePool(env, fail_reset=True))
    _start(runner, n=1)
    runner.pump()
    assert engine.requests[0].prompt_ids.tolist() == [9, 9]
    (done,) = engine.finish(runner, tok, "42")
    assert done.infos[0]["end"] == "error" and done.prompt_ids.tolist() == [9, 9]


class RandomOpening(Calculating):
    def reset(self, example, messages):
        return Opening(
            messages=[{"role": "system", "content": f"seed {len(self.seen)}"}, *messages], state=self.seen.append(1)
        )

    seen: list = []


def test_openings_that_differ_share_a_prompt_and_lead_each_response_masked(tok):
    RandomOpening.seen = []
    runner, engine = _runner(tok, env=RandomOpening())
    _start(runner, n=2)
    runner.pump()
    openings = [r.prompt_ids for r in engine.requests]
    engine.finish(runner, tok, "42")
    (done,) = _drain(runner)
    shared = len(done.prompt_ids)
    assert shared < len(openings[0]) and openings[0][:shared].tolist() == openings[1][:shared].tolist()
    for opening, sample, mask, info in zip(openings, done.samples, done.masks, done.infos):
        lead = opening[shared:]
        assert sample.response_ids[: len(lead)].tolist() == lead.tolist() and not mask[: len(lead)].any()
        assert info["final_start"] == len(lead)


class Careless(Calculating):
    """Returns what an environment must not: ``reset`` None (allowed: the task's messages) and
    a ``step`` that is not (state, StepResult), or observation messages no template renders."""

    def __init__(self, bad_step: str):
        super().__init__()
        self.bad_step = bad_step

    def reset(self, example, messages):
        return None

    def step(self, state, turn):
        if self.bad_step == "shape":
            return "done"
        return state, StepResult([{"role": "tool", "content": object()}])  # not text: the template raises


@pytest.mark.parametrize("bad_step", ["shape", "unrenderable"])
def test_an_environment_that_answers_wrongly_ends_that_episode_only(tok, bad_step):
    runner, engine = _runner(tok, env=Careless(bad_step))
    _start(runner, n=1)
    runner.pump()
    assert len(engine.requests) == 1  # reset gave None: the task's own messages open it
    assert "What is 12+30?" in tok.decode(engine.requests[0].prompt_ids.tolist())
    engine.finish(runner, tok, CALL)
    (done,) = _drain(runner)
    assert done.infos[0]["end"] == "error" and done.infos[0]["env_errors"] == 1
