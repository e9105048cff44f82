"""The tool demo up to RL: tokenizer, base model, a warm start that sometimes calls the tool.

``prepare`` trains a byte-level BPE chat tokenizer with the tools template
(``examples.toy.tiny_bpe``) on the texts of the demo's conversations, builds a small Llama over
it and warm-starts it with SFT on rendered conversations of ``AdditionTask``'s training split,
loss on the assistant's tokens only (each turn and its ``<|im_end|>``), in two stages. First
every row calls the calculator and answers with its result (``copy_sft``): the model learns to
copy the operands into the call and the result into the answer. Then a share ``tool_fraction``
of the rows call it and the rest answer directly (``sft``): the model learns that it may
answer without the tool. A tiny model cannot add four-digit numbers in its head, so its direct
answers are wrong and its calls mostly right: RL, rewarded for right answers, has a reason to
call more often. (Mixed rows from the start leave the copying unlearnt: the direct answers'
digits, which no tiny model can predict, drown its signal.) The held-out figures
(``examples.tools.heldout``) are measured greedy and sampled after SFT and kept in the report.

Knows nothing of MPI or of RL; the episodes' token layout is the chat template's.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from examples.tools.calculator import CALCULATOR_SPEC, TOOL_NAME, call_text
from examples.tools.heldout import observation_ids, prompt_ids, prompt_messages, run_episodes
from examples.tools.task import AdditionTask
from examples.toy.sft import SFTConfig, sft_train
from examples.toy.tiny_llama import ModelSize
from roles.engines.base import SamplingConfig
from roles.tasks.base import Example

# gsm8k's DEMO_SIZE with room for the tools block: a prompt is about 90 tokens, a whole
# episode with one call about 140.
DEMO_SIZE = ModelSize(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=256, max_position_embeddings=256)


@dataclass(frozen=True)
class PrepareConfig:
    task: dict = field(default_factory=dict)  # AdditionTask's options (digits, sizes); the seed is the run's
    vocab_size: int = 512  # BPE ids at most, the tool tokens included
    size: ModelSize = DEMO_SIZE
    # SFT rows that call the calculator; the rest answer directly. At 0.3 the warm-started model
    # never calls it greedily (held-out greedy accuracy 0) and does in about 0.3 of sampled
    # episodes: RL has to find the tool. At 0.5 it always called it greedily (0.535), leaving RL
    # only the copying to improve (+0.09 greedy in 150 steps; docs/log.md).
    tool_fraction: float = 0.3
    # Stage 1, calls only: with seed 0 the copying forms by step 200 at this rate (one seed in
    # two in 400 steps; lr 2e-3 was slower, a third layer slower still).
    copy_sft: SFTConfig = field(default_factory=lambda: SFTConfig(fraction=0.25, steps=400, lr=3e-3, batch=16))
    # Stage 2, the mix: gentler, so the copying survives the direct answers' noise.
    sft: SFTConfig = field(
        default_factory=lambda: SFTConfig(fraction=0.25, steps=200, lr=1e-3, batch=16, micro_batches=2)
    )
    max_new_tokens: int = 40  # tokens of one turn at most: room above a call (about 25)
    max_turns: int = 3  # model turns of an episode at most (the role map's environment.max_turns)
    eval_examples: int = 200  # held-out episodes measured after SFT (greedy, and sampled at temperature 1)


def build_task(seed: int = 0, **options) -> AdditionTask:
    return AdditionTask(AdditionTask.Config.model_validate(options), seed)


def prepare(out_dir: str | Path, seed: int = 0, config: PrepareConfig = PrepareConfig()) -> dict:
    """Write ``out_dir/base`` and ``out_dir/sft``; return the SFT report with held-out figures.

    Reuses a finished ``sft`` folder made with the same settings (its stamp file).
    """
    from transformers import AutoModelForCausalLM

    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    out = Path(out_dir)
    config = replace(config, copy_sft=replace(config.copy_sft, seed=seed), sft=replace(config.sft, seed=seed))
    stamp = out / "sft" / "mpirl-sft.json"
    settings = json.loads(json.dumps({**asdict(config), "seed": seed, "tool": CALCULATOR_SPEC}, default=str))
    if stamp.is_file():
        done = json.loads(stamp.read_text())
        if done.get("settings") == settings:
            return done["report"]

    t0 = time.perf_counter()
    task = build_task(seed, **config.task)
    train = task.examples("train")
    uses_tool = np.random.default_rng(seed + 1).random(len(train)) < config.tool_fraction
    conversations = [conversation(ex, tool) for ex, tool in zip(train, uses_tool)]
    calls = [conversation(ex, True) for ex in train]  # hold every text a direct answer has too
    tokenizer = save_bpe_chat_tokenizer(out / "base", chat_texts(calls), config.vocab_size, tools=True)
    base = build_tiny_llama_for_tokenizer(out / "base", tokenizer, seed=seed, **config.size.kwargs())
    t_model = time.perf_counter()

    call_rows = [sft_row(tokenizer, c) for c in calls]
    rows = [
        call_rows[i] if tool else sft_row(tokenizer, c) for i, (c, tool) in enumerate(zip(conversations, uses_tool))
    ]
    longest = max(len(p) + len(t) for p, t, _ in call_rows)
    if longest > config.size.max_position_embeddings:
        raise ValueError(f"an SFT conversation has {longest} tokens, more than the model's context ({config.size})")
    copy_report = sft_train(base, tokenizer, call_rows, out / "copy", None, config.copy_sft)
    report = sft_train(out / "copy", tokenizer, rows, out / "sft", None, config.sft)
    t_sft = time.perf_counter()

    model = AutoModelForCausalLM.from_pretrained(str(out / "sft"))
    held = task.examples("eval")[: config.eval_examples]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=config.max_new_tokens)
    sampled = SamplingConfig(temperature=1.0, max_new_tokens=config.max_new_tokens, seed=seed)
    report.update(
        {
            "greedy": run_episodes(model, tokenizer, held, greedy, config.max_turns).summary(),
            "sampled": run_episodes(model, tokenizer, held, sampled, config.max_turns).summary(),
            "copy_sft": copy_report,
            "tokenizer_model_s": t_model - t0,
            "eval_s": time.perf_counter() - t_sft,
            "total_s": time.perf_counter() - t0,
            "vocab": len(tokenizer),
            "train_rows": len(rows),
            "tool_rows": int(uses_tool.sum()),
            "prompt_tokens_max": max(len(p) for p, _, _ in rows),
            "conversation_tokens_max": longest,
        }
    )
    report = json.loads(json.dumps(report, default=float))  # as a reuse will read it back
    stamp.write_text(json.dumps({"settings": settings, "report": report}))
    return report


def conversation(example: Example, use_tool: bool) -> list[dict]:
    """The taught conversation: the question, then a call, its result and the answer, or the
    answer alone."""
    messages = prompt_messages(example)
    a, b = example.metadata["a"], example.metadata["b"]
    if use_tool:
        messages += [
            {"role": "assistant", "content": call_text(f"{a}+{b}")},
            {"role": "tool", "name": TOOL_NAME, "content": example.answer},
        ]
    return [*messages, {"role": "assistant", "content": example.answer}]


def chat_texts(conversations: list[list[dict]]) -> list[str]:
    """What the tokenizer should learn from: the conversations as the tools template renders
    them, cut at its special tokens (which the tokenizer holds already)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from examples.toy.tiny_bpe import SPECIAL_TOKENS, TOOLS_CHAT_TEMPLATE

    rendered, _ = render_jinja_template(conversations, tools=[CALCULATOR_SPEC], chat_template=TOOLS_CHAT_TEMPLATE)
    cut = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    return [piece for text in rendered for piece in cut.split(text) if piece]


def sft_row(tokenizer, messages: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt ids, the rest of the episode's ids, its loss mask): 1 on each assistant turn and
    its EOS, 0 on the observations, laid out as ``run_episodes`` lays out sampled episodes."""
    prompt = prompt_ids(tokenizer, messages[:1])
    target: list[int] = []
    mask: list[int] = []
    eos = int(tokenizer.eos_token_id)
    for i, message in enumerate(messages[1:], start=1):
        if message["role"] == "assistant":
            turn = tokenizer(message["content"], add_special_tokens=False).input_ids + [eos]
            target += turn
            mask += [1] * len(turn)
        elif message["role"] == "tool" and messages[i - 1]["role"] != "tool":
            obs = observation_ids(tokenizer, messages[i : i + _run_length(messages, i)])
            target += obs
            mask += [0] * len(obs)
    as_array = lambda ids: np.asarray(ids, dtype=np.int32)  # noqa: E731
    return as_array(prompt), as_array(target), as_array(mask)


def _run_length(messages: list[dict], start: int) -> int:
    n = 0
    while start + n < len(messages) and messages[start + n]["role"] == "tool":
        n += 1
    return n
