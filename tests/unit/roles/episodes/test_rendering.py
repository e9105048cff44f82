"""roles/episodes/rendering.py: the ids of an episode's opening and observations."""

from __future__ import annotations

import numpy as np
import pytest

from roles.episodes.rendering import TemplateError, TurnRenderer
from support.tool_chat import CALCULATOR, STRIPPING_TEMPLATE, TOOLS_TEMPLATE, tool_chat_tokenizer

pytestmark = pytest.mark.timeout(120)

QUESTION = [{"role": "user", "content": "What is 12+30?"}]
CALL = '<think>12 plus 30</think><tool_call>{"name": "calculator", "arguments": {"expression": "12+30"}}</tool_call>'
RESULT = [{"role": "tool", "name": "calculator", "content": "42"}]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tool_chat_tokenizer(tmp_path_factory.mktemp("tok"))


def _renderer(tok, template=TOOLS_TEMPLATE):
    tok.chat_template = template
    return TurnRenderer(tok, tools=[CALCULATOR], end_ids=[tok.eos_token_id], where="model.path /m")


def _turn(tok, text: str) -> np.ndarray:
    return np.asarray(tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id], np.int32)


def test_an_observation_is_the_separator_the_tool_turn_and_the_generation_prompt(tok):
    r = _renderer(tok)
    assert r.observation_text(RESULT) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    two = r.observation_text(RESULT + [{"role": "tool", "name": "calculator", "content": "7"}])
    assert two.count("<|im_start|>user") == 1 and "42" in two and "7" in two  # one turn for both


def test_the_episode_is_the_whole_conversation_when_the_template_keeps_every_turn(tok):
    r = _renderer(tok)
    first, second = _turn(tok, CALL), _turn(tok, "42")
    episode = np.concatenate([r.opening_ids(QUESTION), first, r.observation_ids(RESULT), second])
    whole = r.render(
        QUESTION + [{"role": "assistant", "content": CALL}] + RESULT + [{"role": "assistant", "content": "42"}], False
    )
    assert episode.tolist() == r.encode(whole).tolist()[: len(episode)]  # the template adds "\n" after the last


def test_a_template_that_strips_earlier_reasoning_changes_nothing_appended(tok):
    plain = _renderer(tok).observation_ids(RESULT)
    r = _renderer(tok, STRIPPING_TEMPLATE)
    assert r.observation_ids(RESULT).tolist() == plain.tolist()
    # Rendered whole, that template would train on a turn the model never sampled:
    whole = r.render(QUESTION + [{"role": "assistant", "content": CALL}] + RESULT, True)
    assert "<think>" not in whole and "12 plus 30" not in whole
    tok.chat_template = TOOLS_TEMPLATE


def test_the_environment_reads_a_turn_without_its_end_token(tok):
    r = _renderer(tok)
    assert r.turn_text(_turn(tok, CALL)) == CALL
    assert r.turn_text(_turn(tok, "42")[:-1]) == "42"  # cut at its length: nothing to drop


def test_a_tokenizer_without_a_template_or_one_that_ignores_tools_is_named(tok):
    tok.chat_template = None
    with pytest.raises(TemplateError, match="model.path /m: the tokenizer has no chat template"):
        TurnRenderer(tok, tools=[CALCULATOR], end_ids=[tok.eos_token_id], where="model.path /m")
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(TemplateError, match="does not render tools.*calculator"):
        TurnRenderer(tok, tools=[CALCULATOR], end_ids=[tok.eos_token_id], where="model.path /m")
    tok.chat_template = TOOLS_TEMPLATE


def test_a_template_that_never_closes_a_turn_with_the_end_token_is_named(tok):
    tok.chat_template = TOOLS_TEMPLATE.replace("m.content + '<|im_end|>\\n'", "m.content + '\\n\\n'")
    r = TurnRenderer(tok, tools=[CALCULATOR], end_ids=[tok.eos_token_id], where="model.path /m")
    with pytest.raises(TemplateError, match="writes none of the end-of-turn tokens"):
        r.observation_text(RESULT)
    tok.chat_template = TOOLS_TEMPLATE
