"""The GSM8K CPU demo up to RL: data, tokenizer, base model, warm start, held-out accuracy.

``prepare`` writes synthetic GSM8K-format files (``problems``), trains a byte-level BPE chat
tokenizer on what the model will read and write, builds a small Llama over it and warm-starts
it with SFT on part of the training split, saving ``out_dir/sft`` for the RL job. Prompts are
made exactly as the RL job makes them: the ``gsm8k`` task's examples (its instruction after
each question) rendered by ``roles.tasks.prompts`` with the chat template; targets are the
worked solution then ``<|im_end|>``. ``heldout_accuracy`` is greedy pass@1 on the test split
with the torch engine, scored by the ``gsm8k`` reward's ``correct``, as the job's eval is.

Beyond writing the synthetic files, nothing here is specific to them or to arithmetic: the
task, reward, template and engine are the library's. It knows nothing of MPI or of RL.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from examples.gsm8k import problems
from examples.toy.heldout import greedy_accuracy
from examples.toy.sft import SFTConfig, sft_train
from examples.toy.tiny_llama import ModelSize

# Sized for a whole demo in minutes on 2 cores, 1 thread per rank. Four heads of 32 learnt to
# copy the question's numbers into the solution faster than two heads of 64 at the same cost;
# a third or fourth layer cost more per SFT step than it gained within the warm start's steps,
# and would slow every RL step (generation and training) as well.
DEMO_SIZE = ModelSize(hidden_size=128, num_layers=2, num_heads=4, intermediate_size=256, max_position_embeddings=160)


@dataclass(frozen=True)
class PrepareConfig:
    problems: problems.ProblemConfig = problems.ProblemConfig()  # the data (its seed is the run's)
    vocab_size: int = 512  # BPE ids at most; whole words of the synthetic texts fit
    size: ModelSize = DEMO_SIZE  # the model's shape
    # The warm start (its seed is the run's), meant to leave held-out greedy accuracy where RL
    # can still lift it. A quarter of the training rows, as in the arith demo: RL then meets
    # mostly prompts SFT never saw. Warm-started on all of them, the model left RL only its
    # own answers to sharpen: the sampled reward rose, held-out greedy accuracy did not.
    # A tiny model takes a high rate; the cosine decay lets it settle in few steps.
    sft: SFTConfig = field(
        default_factory=lambda: SFTConfig(fraction=0.25, steps=600, lr=3e-3, batch=16, schedule="cosine")
    )
    # Tokens of a greedy held-out response at most: room above the longest (two-step) solution.
    max_new_tokens: int = 48
    # The ``task`` section's options beyond the files (instruction, system_prompt, ...), so
    # the SFT prompts are the RL job's: pass the same ones to both.
    task_options: dict = field(default_factory=dict)
    reward_options: dict = field(default_factory=dict)  # the ``reward`` section's options, likewise


def task_section(data_dir: str | Path, **options) -> dict:
    """The role map's ``task`` section for the files ``prepare`` wrote in ``data_dir``."""
    data = Path(data_dir)
    return {
        "name": "gsm8k",
        "train_files": [str(data / "train.parquet")],
        "eval_files": [str(data / "test.parquet")],
        **options,
    }


def build_task(data_dir: str | Path, seed: int = 0, **options):
    """The ``gsm8k`` task over ``data_dir``, built from its section as the RL job builds it."""
    from roles.tasks import build_task as build
    from roles.tasks import task_class

    section = task_section(data_dir, **options)
    return build(task_class(section["name"]).Config.model_validate(section), seed)


def prepare(out_dir: str | Path, seed: int = 0, config: PrepareConfig = PrepareConfig()) -> dict:
    """Write ``out_dir/data``, ``out_dir/base`` and ``out_dir/sft``; return the SFT report.

    Reuses a finished ``sft`` folder made with the same settings (its stamp file), so
    repeated demos skip the work.
    """
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer
    from roles.tasks.prompts import encode_prompts

    out = Path(out_dir)
    config = replace(config, problems=replace(config.problems, seed=seed), sft=replace(config.sft, seed=seed))
    stamp = out / "sft" / "mpirl-sft.json"
    settings = json.loads(json.dumps(asdict(config), default=str))
    if stamp.is_file():
        done = json.loads(stamp.read_text())
        if done.get("settings") == settings:
            return done["report"]

    t0 = time.perf_counter()
    problems.write(out / "data", config.problems)
    task = build_task(out / "data", seed, **config.task_options)
    train = task.examples("train")
    t_data = time.perf_counter()

    # What the model reads (the prompt's text, the system prompt) and writes (the solution).
    texts = [ex.prompt for ex in train] + [ex.metadata["solution"] for ex in train]
    if task.config.system_prompt:
        texts.append(task.config.system_prompt)
    tokenizer = save_bpe_chat_tokenizer(out / "base", texts, config.vocab_size)
    base = build_tiny_llama_for_tokenizer(out / "base", tokenizer, seed=seed, **config.size.kwargs())
    t_model = time.perf_counter()

    # The RL job leaves out prompts that leave no room for the response; so does SFT.
    limit = task.config.max_prompt_tokens or config.size.max_position_embeddings - config.max_new_tokens
    prompts = encode_prompts(tokenizer, train, task.config, limit)
    eos = [int(tokenizer.eos_token_id)]
    rows = [
        (ids, np.asarray(tokenizer(ex.metadata["solution"], add_special_tokens=False).input_ids + eos, dtype=np.int32))
        for ex in train
        if (ids := prompts.ids.get(ex.id)) is not None
    ]
    eval_prompts = _eval_prompts(tokenizer, task, limit)

    def evaluate(model) -> float:
        return _accuracy(model, tokenizer, task, eval_prompts, config.max_new_tokens, config.reward_options)

    report = sft_train(base, tokenizer, rows, out / "sft", evaluate, config.sft)
    report.update(
        {
            "data_s": t_data - t0,
            "tokenizer_model_s": t_model - t_data,
            "total_s": time.perf_counter() - t0,
            "vocab": len(tokenizer),
            "train_rows": len(rows),
            "eval_rows": len(eval_prompts),
            "too_long": len(prompts.too_long),
            "prompt_tokens_mean": float(np.mean([len(p) for p, _ in rows])),
            "prompt_tokens_max": max(len(p) for p, _ in rows),
            "target_tokens_mean": float(np.mean([len(t) for _, t in rows])),
            "target_tokens_max": max(len(t) for _, t in rows),
        }
    )
    report = json.loads(json.dumps(report, default=float))  # as a reuse will read it back
    stamp.write_text(json.dumps({"settings": settings, "report": report}))
    return report


def heldout_accuracy(
    model_dir: str | Path,
    data_dir: str | Path,
    seed: int = 0,
    max_new_tokens: int = PrepareConfig.max_new_tokens,
    reward_options: dict | None = None,
    **task_options,
) -> float:
    """Greedy pass@1 of the model in ``model_dir`` on the test split in ``data_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    task = build_task(data_dir, seed, **task_options)
    limit = task.config.max_prompt_tokens or model.config.max_position_embeddings - max_new_tokens
    prompts = _eval_prompts(tokenizer, task, limit)
    return _accuracy(model, tokenizer, task, prompts, max_new_tokens, reward_options)


def _eval_prompts(tokenizer, task, limit: int) -> dict[int, np.ndarray]:
    from roles.tasks.prompts import encode_prompts

    return encode_prompts(tokenizer, task.examples("eval"), task.config, limit).ids


def _accuracy(
    model, tokenizer, task, prompts: dict[int, np.ndarray], max_new_tokens: int, reward_options: dict | None = None
) -> float:
    from roles.rewards import build_reward, score_of

    reward = build_reward(task.default_reward, reward_options)

    def correct(example_id: int, response_ids: np.ndarray) -> float:
        # Decoded as the reward role decodes responses (special tokens dropped).
        text = tokenizer.decode(response_ids.tolist(), skip_special_tokens=True)
        score, extras = score_of(reward(text, task.example(example_id)))
        return extras.get("correct", score)

    return greedy_accuracy(model, prompts, correct, max_new_tokens)
