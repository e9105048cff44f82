"""The long-tail workload: a tiny Llama that answers ``a+b=``, then writes a filler of heavy-tailed length.

Reasoning models' response lengths are long-tailed: most answers are short, a few run for a
long time, and a batch waits for its longest. This workload reproduces that on a CPU with the
real engines. The RL job sees the built-in ``dataset`` task over the prompts written here
(``PROMPTS``) and the reward ``examples.long_tail.reward``; this module writes the prompts,
builds the model and warm-starts it (SFT). A prompt is ``c3+15=``, a response ``18ccc...c<eos>``:

- the prompt's first character is a length class (``LENGTH_CLASSES``: short, medium or long,
  drawn per prompt), as a hard problem draws a long answer: the response, after the sum, is a
  run of that character whose length is geometric with the class's mean. Over all prompts
  lengths are a mixture of short, medium and long geometrics (a heavy, hyper-exponential tail,
  capped at ``MAX_FILLER`` in the data), and a group's samples share their class. A constant
  stop rate per character is all the model learns, which a tiny one does in a few hundred
  SFT steps; and since the prompts fix the classes, RL cannot shift the mix of lengths;
- the sum is the learnable part: the reward is its correctness, which the warm start leaves
  far from saturated (SFT sees a quarter of the training pairs), so RL can move it. It comes
  first so that a response's length has no bearing on its reward (with the sum last, the
  tiny model answered long responses worse and RL cut the mean length from 22 to 8 tokens in
  60 steps).

``prepare_model`` caches its result under the folder it is given and reuses it when the
settings match. The bench (``bench/long_tail.py``) runs ``BASE_CONFIG`` on what it makes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from examples.long_tail.reward import FILLER

# (filler character, share of prompts, mean filler length): about 19 filler tokens on average
# (22 response tokens with the sum and EOS), median 10, one response in 40 over 100.
LENGTH_CLASSES = ((FILLER[0], 0.55, 6.0), (FILLER[1], 0.30, 20.0), (FILLER[2], 0.15, 64.0))
MAX_NEW_TOKENS = 160  # the rollout cap; the data's responses all end before it
MAX_FILLER = MAX_NEW_TOKENS - 10  # room for the answer and EOS, and some for the model's own tail
ALPHABET = "0123456789+=" + FILLER
BASE_CONFIG = Path(__file__).resolve().parent / "async.yaml"
MAX_OPERAND = 20  # the arith task's default split: 320 training pairs, 80 held out
SFT_PAIR_FRACTION = 0.25  # of the training pairs: the rest are left for RL to learn
SFT_DRAWS = 16  # responses (filler draws) per SFT pair, so the lengths are learnt as a distribution
PROMPT_DRAWS = 4  # RL prompts per training pair, each with its own length class
PROMPTS = "prompts.jsonl"  # the RL prompts, beside the model folders


def model_size():
    """The tiny Llama of the arith demo with room for a 160-token response."""
    from examples.toy.tiny_llama import ModelSize

    return ModelSize(hidden_size=128, num_layers=4, num_heads=2, intermediate_size=256, max_position_embeddings=192)


def draw_classes(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` length classes (their filler characters), each by its probability."""
    chars, probs, _ = zip(*LENGTH_CLASSES)
    return [chars[i] for i in rng.choice(len(chars), size=count, p=np.asarray(probs) / sum(probs))]


def draw_filler(rng: np.random.Generator, char: str) -> str:
    """A run of ``char``: geometric with its class's mean, at most MAX_FILLER (redrawn, not clipped:
    the data has no pile-up at the cap)."""
    mean = next(m for c, _, m in LENGTH_CLASSES if c == char)
    length = MAX_FILLER + 1
    while length > MAX_FILLER:
        length = int(rng.geometric(1.0 / mean))
    return char * length


def prompt_text(char: str, pair) -> str:
    """``c3+15=``: the length class, then the sum asked for."""
    return char + pair.text


def prompt_rows(seed: int) -> list[dict]:
    """The RL prompts: every training pair ``PROMPT_DRAWS`` times, each with a class of its own."""
    from roles.tasks.arith import split_pairs

    train, _ = split_pairs(MAX_OPERAND, 0.2, seed)
    rng = np.random.default_rng([seed, 1])
    chars = iter(draw_classes(rng, len(train) * PROMPT_DRAWS))
    return [{"prompt": prompt_text(next(chars), p), "answer": p.answer} for p in train for _ in range(PROMPT_DRAWS)]


def sft_rows(tokenizer, pairs, draws: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(prompt ids, target ids) rows: each pair ``draws`` times, ``<bos>c a+b=`` -> ``sum cc...c <eos>``."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in pairs:
        for char in draw_classes(rng, draws):
            prompt = np.asarray(tokenizer(prompt_text(char, p)).input_ids, dtype=np.int32)
            target = tokenizer(p.answer + draw_filler(rng, char), add_special_tokens=False).input_ids
            rows.append((prompt, np.asarray([*target, tokenizer.eos_token_id], dtype=np.int32)))
    return rows


def sft_pairs(seed: int) -> list:
    """The training pairs the warm start sees: ``SFT_PAIR_FRACTION`` of the arith task's, by ``seed``."""
    from roles.tasks.arith import split_pairs

    train, _ = split_pairs(MAX_OPERAND, 0.2, seed)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(train), int(round(SFT_PAIR_FRACTION * len(train))), replace=False)
    return [train[i] for i in sorted(chosen)]


def prepare_model(out_dir: str | Path, seed: int = 0, sft_steps: int = 600, sft_lr: float = 1e-3) -> dict:
    """Write the RL prompts to ``out_dir/PROMPTS``, build the tiny Llama in ``out_dir/base`` and
    warm-start it into ``out_dir/sft``.

    Returns the report (SFT losses and seconds, and ``sampled``: lengths and correctness of
    the warm-started policy's samples). A finished ``sft`` folder made with the same settings
    is reused (the prompts, a pure function of the seed, are written again: it takes no time).
    """
    import torch
    from transformers import AutoTokenizer

    from examples.toy.sft import SFTConfig, sft_train
    from examples.toy.tiny_llama import build_tiny_llama

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / PROMPTS, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in prompt_rows(seed))
    stamp = out / "sft" / "mpirl-long-tail.json"
    settings = {
        "seed": seed,
        "sft_steps": sft_steps,
        "sft_lr": sft_lr,
        "classes": [list(c) for c in LENGTH_CLASSES],
        "max_filler": MAX_FILLER,
        "draws": SFT_DRAWS,
        "pair_fraction": SFT_PAIR_FRACTION,
        "prompt_draws": PROMPT_DRAWS,
        "size": str(model_size()),
    }
    if stamp.is_file():
        done = json.loads(stamp.read_text())
        if done.get("settings") == settings:
            return done["report"]
    torch.manual_seed(seed)
    base = build_tiny_llama(out / "base", ALPHABET, seed=seed, **model_size().kwargs())
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    rows = sft_rows(tokenizer, sft_pairs(seed), SFT_DRAWS, seed)
    # All rows (the pairs are already the quarter chosen above), in micro-batches by length: a
    # row is padded to rows of its own kind of length, not to the batch's longest filler (three
    # times faster, the same gradient).
    config = SFTConfig(
        fraction=1.0, steps=sft_steps, lr=sft_lr, batch=32, seed=seed, schedule="cosine", micro_batches=4
    )
    report = sft_train(base, tokenizer, rows, out / "sft", None, config)
    report["sampled"] = sample_stats(out / "sft", seed=seed)
    stamp.write_text(json.dumps({"settings": settings, "report": report}, default=float))
    return report


def sample_stats(model_dir: str | Path, seed: int = 0, prompts: int = 64, n: int = 8) -> dict:
    """Lengths and correctness of ``n`` sampled responses (temperature 1) to ``prompts`` RL prompts.

    ``tail_wait_share`` is the generator's figure for one batch of all of them.
    """
    from transformers import AutoTokenizer

    from examples.long_tail.reward import tail_answer
    from roles.engines.base import SamplingConfig
    from roles.engines.torch_engine import TorchEngine
    from roles.generator import tail_wait_share
    from roles.tasks.base import Example

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rows = prompt_rows(seed)
    rows = [rows[i] for i in np.random.default_rng(seed).choice(len(rows), prompts, replace=False)]
    encoded = [np.asarray(tokenizer(r["prompt"]).input_ids, dtype=np.int32) for r in rows]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=seed)
    groups = TorchEngine(str(model_dir)).generate(encoded, n, sampling)
    lengths, correct = [], []
    for i, (row, group) in enumerate(zip(rows, groups)):
        for s in group:
            lengths.append(len(s.response_ids))
            text = tokenizer.decode([int(t) for t in s.response_ids], skip_special_tokens=True)
            correct.append(tail_answer(text, Example(i, row["prompt"], row["answer"]))["correct"])
    return {
        **length_stats(lengths, MAX_NEW_TOKENS),
        "correct": float(np.mean(correct)),
        "tail_wait_share": tail_wait_share(lengths),
    }


def length_stats(lengths, cap: int | None = None) -> dict:
    """Mean, median, p90, p99, max of ``lengths``, the share over 100 and (with ``cap``) at the cap."""
    a = np.asarray(lengths, dtype=float)
    out = {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "over_100": float((a > 100).mean()),
    }
    if cap is not None:
        out["at_cap"] = float((a >= cap).mean())
    return out
