"""The tools chat template of examples.toy.tiny_bpe: plain prompts render as before, and a
whole episode rendered at once is the token layout of issue 40 (prompt, sampled turns each
ending in <|im_end|>, observations from the separator to the next generation prompt)."""

from __future__ import annotations

import json

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from examples.tools.calculator import CALCULATOR_SPEC, call_text
from examples.tools.heldout import observation_ids, prompt_ids
from examples.tools.prepare import sft_row
from examples.toy.tiny_bpe import CHAT_TEMPLATE, IM_END, IM_START, TOOL_TOKENS, TOOLS_CHAT_TEMPLATE

pytestmark = pytest.mark.timeout(120)

PLAIN = [
    [{"role": "user", "content": "What is 1+2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
]


def render(template: str, messages, **kw) -> str:
    return render_jinja_template([messages], chat_template=template, **kw)[0][0]


@pytest.mark.parametrize("messages", PLAIN)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_plain_prompts_render_as_chat_template_does(messages, generation_prompt):
    kw = dict(add_generation_prompt=generation_prompt)
    assert render(TOOLS_CHAT_TEMPLATE, messages, **kw) == render(CHAT_TEMPLATE, messages, **kw)


def test_tools_block_holds_the_specs_and_the_system_message():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 1+2?"}]
    text = render(TOOLS_CHAT_TEMPLATE, messages, tools=[CALCULATOR_SPEC], add_generation_prompt=True)
    head, rest = text.split(f"{IM_END}\n", 1)
    assert head.startswith(f"{IM_START}system\nBe brief.\n\n# Tools\n<tools>\n")
    assert json.dumps(CALCULATOR_SPEC["function"]) in head and "<tool_call>" in head
    assert rest == f"{IM_START}user\nWhat is 1+2?{IM_END}\n{IM_START}assistant\n"  # system not repeated


def test_consecutive_tool_messages_share_one_user_turn():
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "c"},
        {"role": "tool", "name": "calculator", "content": "1"},
        {"role": "tool", "name": "calculator", "content": "2"},
    ]
    text = render(TOOLS_CHAT_TEMPLATE, messages, tools=[CALCULATOR_SPEC], add_generation_prompt=True)
    want = (
        f"{IM_END}\n{IM_START}user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
        f"{IM_END}\n{IM_START}assistant\n"
    )
    assert text.endswith(f"{IM_START}assistant\nc{want}")


def test_structured_tool_calls_render_as_the_call_text():
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12+34"}}}
    structured = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    as_text = [{"role": "user", "content": "q"}, {"role": "assistant", "content": call_text("12+34")}]
    kw = dict(tools=[CALCULATOR_SPEC])
    assert render(TOOLS_CHAT_TEMPLATE, structured, **kw) == render(TOOLS_CHAT_TEMPLATE, as_text, **kw)


def test_a_whole_episode_is_prompt_turns_and_observations(tools_tok, task):
    """Token-exact: the ids an episode grows by (prompt, sampled turn + EOS, observation, ...)
    are the ids of the whole conversation rendered at once (its final separator aside)."""
    ex = task.examples("eval")[0]
    turn1, turn2 = call_text(f"{ex.metadata['a']}+{ex.metadata['b']}"), ex.answer
    messages = [{"role": "user", "content": ex.prompt}]
    tool = [{"role": "tool", "name": "calculator", "content": ex.answer}]
    eos = [tools_tok.eos_token_id]
    ids = prompt_ids(tools_tok, messages) + tools_tok(turn1, add_special_tokens=False).input_ids + eos
    with_turn = [*messages, {"role": "assistant", "content": turn1}]
    obs = observation_ids(tools_tok, tool)
    ids += obs + tools_tok(turn2, add_special_tokens=False).input_ids + eos
    whole = [*with_turn, *tool, {"role": "assistant", "content": turn2}]
    text = tools_tok.apply_chat_template(whole, tools=[CALCULATOR_SPEC], tokenize=False)
    assert text.endswith(f"{IM_END}\n")
    assert ids == tools_tok(text[:-1], add_special_tokens=False).input_ids
    assert tools_tok.decode(obs) == (
        f"\n{IM_START}user\n<tool_response>\n{ex.answer}\n</tool_response>{IM_END}\n{IM_START}assistant\n"
    )
    # The SFT rows are laid out the same way, with loss on the turns and their EOS only.
    prompt, target, mask = sft_row(tools_tok, whole)
    assert prompt.tolist() + target.tolist() == ids
    assert tools_tok.decode(target[mask == 1]) == f"{turn1}{IM_END}{turn2}{IM_END}"
    assert target[mask == 0].tolist() == obs


def test_tool_tokens_are_single_non_special_ids(tools_tok):
    for token in TOOL_TOKENS:
        ids = tools_tok(token, add_special_tokens=False).input_ids
        assert len(ids) == 1
        assert tools_tok.decode(ids, skip_special_tokens=True) == token  # kept: a turn's text shows its call
