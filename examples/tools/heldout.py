"""Tool-using episodes run locally with a Hugging Face model: the demo's held-out figures.

``run_episodes`` plays the tool demo's episodes turn by turn (every live episode of a turn in
one batch of the library's torch engine, greedy or sampled): the model's turn ends at its EOS,
a turn with a calculator call gets the tool's result as an observation and the episode goes on,
a turn without one ends it (its text is the final answer), as the built-in "tools" environment
does. Token ids grow as the RL job's episodes do: the sampled ids as they were sampled, then
the tool message's ids, rendered by the RL job's own ``TurnRenderer`` (``observation_ids``).

It reports accuracy (``examples.tools.task:FinalAnswer``), the share of episodes that call the
tool, the share of calls that succeed, and the accuracy of each kind. Calls are answered by
``examples.tools.calculator`` (the library's evaluator, outside the RL job's workers). Knows nothing of MPI or RL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from examples.tools.calculator import CALCULATOR_SPEC, TOOL_NAME, calculate, parse_call
from examples.tools.task import FinalAnswer
from roles.engines.base import SamplingConfig
from roles.episodes.rendering import TurnRenderer
from roles.tasks.base import Example


@dataclass
class Episode:
    example: Example
    messages: list[dict]  # the conversation so far, as the template takes it
    ids: list[int]  # prompt, turns and observations, token-exact
    final: str = ""  # the last turn's text (the answer scored)
    calls: int = 0
    calls_ok: int = 0
    done: bool = False


@dataclass
class EpisodeStats:
    episodes: int = 0
    accuracy: float = 0.0  # final answers that are the sum
    tool_rate: float = 0.0  # episodes that call the tool at least once
    tool_success: float = 0.0  # calls the calculator could evaluate (of all calls)
    acc_with_tool: float = 0.0  # accuracy of the episodes that called it ...
    acc_without_tool: float = 0.0  # ... and of those that answered directly
    turns_mean: float = 0.0
    ids: dict[int, list[int]] = field(default_factory=dict, repr=False)  # example id -> episode ids

    def summary(self) -> dict[str, float]:
        return {k: v for k, v in self.__dict__.items() if k != "ids"}


def prompt_messages(example: Example) -> list[dict]:
    return [{"role": "user", "content": example.prompt}]


def _renderer(tokenizer) -> TurnRenderer:
    """The RL job's renderer of openings and observations (roles.episodes.rendering), with the
    calculator; one per tokenizer (it checks the template once)."""
    if id(tokenizer) not in _RENDERERS:
        _RENDERERS[id(tokenizer)] = TurnRenderer(tokenizer, tools=[CALCULATOR_SPEC], end_ids=[tokenizer.eos_token_id])
    return _RENDERERS[id(tokenizer)]


_RENDERERS: dict[int, TurnRenderer] = {}


def prompt_ids(tokenizer, messages: Sequence[dict]) -> list[int]:
    """The prompt's ids, as the RL job renders it: the template with ``tools=``."""
    return _renderer(tokenizer).opening_ids(messages).tolist()


def observation_ids(tokenizer, observation: Sequence[dict]) -> list[int]:
    """The ids after an assistant turn's EOS: the template's separator, the ``observation``
    messages and the generation prompt, as the RL job appends them (never re-tokenising the
    turn itself)."""
    return _renderer(tokenizer).observation_ids(observation).tolist()


def run_episodes(
    model,
    tokenizer,
    examples: Sequence[Example],
    sampling: SamplingConfig,
    max_turns: int = 3,
) -> EpisodeStats:
    """Play one episode per example; turns of ``sampling.max_new_tokens`` at most, episodes up
    to the model's context (an episode with no room for another turn ends there)."""
    from roles.engines.torch_engine import TorchEngine

    was_training = model.training
    engine = TorchEngine(model)  # shares the weights; eval mode while it runs
    context = int(model.config.max_position_embeddings)
    episodes = [Episode(ex, prompt_messages(ex), prompt_ids(tokenizer, prompt_messages(ex))) for ex in examples]
    for turn in range(max_turns):
        live = [e for e in episodes if not e.done and len(e.ids) + sampling.max_new_tokens <= context]
        if not live:
            break
        seeded = SamplingConfig(
            **{**sampling.__dict__, "seed": None if sampling.seed is None else sampling.seed + turn}
        )
        samples = engine.generate([np.asarray(e.ids) for e in live], 1, seeded)
        for episode, (sample,) in zip(live, samples):
            _take_turn(tokenizer, episode, sample, last=turn == max_turns - 1)
    model.train(was_training)
    return _stats(episodes)


def _take_turn(tokenizer, episode: Episode, sample, last: bool) -> None:
    ids = sample.response_ids.tolist()
    episode.ids += ids
    stopped = sample.finish_reason == "stop"
    text = tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=True)
    episode.final = text
    call = parse_call(text)
    if call is None or not stopped or last:
        episode.calls += call is not None
        episode.done = True
        return
    result, ok = calculate(call)
    episode.calls += 1
    episode.calls_ok += ok
    episode.messages.append({"role": "assistant", "content": text})
    observation = [{"role": "tool", "name": TOOL_NAME, "content": result}]
    episode.ids += observation_ids(tokenizer, observation)
    episode.messages += observation


def _stats(episodes: Sequence[Episode]) -> EpisodeStats:
    reward = FinalAnswer()
    right = np.array([reward(e.final, e.example)["correct"] for e in episodes], dtype=float)
    called = np.array([e.calls > 0 for e in episodes])
    calls = sum(e.calls for e in episodes)
    turns = [sum(m["role"] == "assistant" for m in e.messages) + 1 for e in episodes]

    def mean(values) -> float:
        return float(np.mean(values)) if len(values) else 0.0

    return EpisodeStats(
        episodes=len(episodes),
        accuracy=mean(right),
        tool_rate=mean(called),
        tool_success=sum(e.calls_ok for e in episodes) / calls if calls else 0.0,
        acc_with_tool=mean(right[called]),
        acc_without_tool=mean(right[~called]),
        turns_mean=mean(turns),
        ids={e.example.id: e.ids for e in episodes},
    )


def heldout_figures(
    model_dir, seed: int = 0, examples: int = 200, max_new_tokens: int = 40, max_turns: int = 3, **task_options
) -> dict[str, dict[str, float]]:
    """Greedy and sampled (temperature 1) figures of the model in ``model_dir`` on the first
    ``examples`` of ``AdditionTask``'s eval split (its options as the role map gives them)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from examples.tools.task import AdditionTask

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    task = AdditionTask(AdditionTask.Config.model_validate(task_options), seed)
    held = task.examples("eval")[:examples]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens)
    sampled = SamplingConfig(temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
    return {
        "greedy": run_episodes(model, tokenizer, held, greedy, max_turns).summary(),
        "sampled": run_episodes(model, tokenizer, held, sampled, max_turns).summary(),
    }
