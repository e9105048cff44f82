"""The reward-model rows of ``bench/rewards.py``: how fast a reward rank scores with a learned
reward model, and whether that time hides behind generation in the asynchronous demo.

``reward_model_throughput``: the same conversations scored two ways, in alternating
repetitions, medians with (min, max):
- ``hf_batched``: the plain Hugging Face way: the tokenizer pads a fixed batch of rows
  (``--rm-batch``) in the order given, ``AutoModelForSequenceClassification`` returns the
  pooled logit (the baseline);
- ``mpirl``: ``roles.rewards.learned.reward_model.RewardModel.score_raw`` (rendering,
  tokenizing, longest-first micro-batches by token budget, the score at each row's last token).
``ratio`` = mpirl / hf_batched samples per second (the issue asks >= 0.9).

``reward_model_async``: the arith demo's asynchronous job (1 generator, 1 trainer, 1 reward
rank) with a reward model as its reward against the demo's verifier, interleaved rounds:
seconds per step after a warm-up, and the step time over the slower of the run's own median
generation and training times (<= 1.1 when scoring overlaps generation). On a machine with
fewer cores than computing ranks the phases also share cores: ``step_over_cores_bound``
divides by the larger of that and their summed work over the cores.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from roles.rewards.learned.base import ScoreItem, ScorerContext

CHARS = "0123456789+="


def _conversations(n: int, rng: random.Random) -> list[ScoreItem]:
    """Arith-alphabet exchanges of 20-400 characters (one token each), a long-tailed mix."""
    out = []
    for _ in range(n):
        length = min(400, int(rng.lognormvariate(4.3, 0.7)) + 20)
        prompt = "".join(rng.choice(CHARS) for _ in range(length // 3))
        response = "".join(rng.choice(CHARS) for _ in range(length - len(prompt)))
        out.append(ScoreItem([{"role": "user", "content": prompt}], prompt, response, None))
    return out


def _build(root: Path, hidden: int, layers: int) -> Path:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from examples.toy.tiny_llama import save_char_tokenizer

    tok = save_char_tokenizer(root, CHARS)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        num_labels=1,
    )
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(str(root))
    return root


def reward_model_throughput(reps: int, n: int, batch: int, hidden: int, layers: int, seed: int) -> dict:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from roles.rewards.learned.reward_model import RewardModel

    folder = _build(Path(tempfile.mkdtemp(prefix="bench-rm-")), hidden, layers)
    items = _conversations(n, random.Random(seed))
    texts = ["\n".join(m["content"] for m in i.messages) + i.response for i in items]
    ours = RewardModel(RewardModel.Config(path=str(folder), chat_template=False), ScorerContext())
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.padding_side = "right"
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()

    @torch.no_grad()
    def hf_batched():
        for k in range(0, len(texts), batch):
            enc = tok(texts[k : k + batch], padding=True, return_tensors="pt")
            model(**enc).logits[:, 0].tolist()

    rates: dict[str, list[float]] = {"hf_batched": [], "mpirl": []}
    for _ in range(reps):
        for name, fn in (("hf_batched", hf_batched), ("mpirl", lambda: ours.score_raw(items))):
            t0 = time.perf_counter()
            fn()
            rates[name].append(len(items) / (time.perf_counter() - t0))
    row = {name: _summary(r) for name, r in rates.items()}
    return {
        "row": "reward_model_throughput",
        "items": n,
        "mean_tokens": round(statistics.fmean(len(t) + 1 for t in texts), 1),
        "hf_batch": batch,
        "model": {"hidden": hidden, "layers": layers},
        "samples_per_s": row,
        "ratio": round(statistics.median(rates["mpirl"]) / statistics.median(rates["hf_batched"]), 3),
    }


def _summary(xs: list[float]) -> dict:
    return {"median": _round(statistics.median(xs)), "min": _round(min(xs)), "max": _round(max(xs))}


def _round(x: float) -> float:
    return float(f"{x:.4g}")


# bench/async_vs_sync.py's: generating a step and training on it take about as long. Groups
# whose samples all scored the same are trained on too: a reward model's scores are never all
# equal, the verifier's often are, and skipping those would give the two runs different work.
WORKLOAD = {
    "rollout": {"prompts_per_step": 32, "samples_per_prompt": 8, "max_new_tokens": 6},
    "algorithm": {"micro_batch": 256, "skip_zero_advantage": False},
}


def reward_model_async(steps: int, warmup: int, repeats: int, hidden: int, layers: int, out: Path) -> dict:
    """``hidden``/``layers``: the reward model's size (the demo's policy is 128 wide, 4 deep)."""
    import json

    from examples.arith import prepare as arith
    from launch import recipe

    config = Path(__file__).resolve().parents[1] / "examples/arith/async.yaml"
    rm = _build(Path(tempfile.mkdtemp(prefix="bench-rm-async-")), hidden, layers)
    arith.prepare_model(out / "model", seed=0)
    rewards = {"verifier": [{"name": "arith_exact"}], "reward_model": [{"name": "model", "path": str(rm)}]}
    rounds: dict[str, list[dict]] = {name: [] for name in rewards}
    for r in range(repeats):
        for name, reward in rewards.items():
            run_dir = out / f"{name}-{r}"
            overrides = {
                **json.loads(json.dumps(WORKLOAD)),
                "model": {"path": str(out / "model" / "sft")},
                "run": {"steps": steps, "out": str(run_dir), "progress": False},
                "reward": reward,
            }
            recipe.run_job(recipe.write_config(config, run_dir, overrides), timeout_s=1800, quiet=True)
            rounds[name].append(_async_figures(recipe.read_metrics(run_dir), warmup))
    row = {"row": "reward_model_async", "steps": steps, "warmup": warmup, "repeats": repeats}
    for name, figs in rounds.items():
        row[name] = {k: _summary([f[k] for f in figs]) for k in figs[0]}
    row["rm_model"] = {"hidden": hidden, "layers": layers}
    row["step_over_max_phase"] = row["reward_model"]["step_over_max_phase"]["median"]
    row["step_over_cores_bound"] = row["reward_model"]["step_over_cores_bound"]["median"]
    row["reward_model_over_verifier_step"] = _round(
        row["reward_model"]["step_s"]["median"] / row["verifier"]["step_s"]["median"]
    )
    return row


def _async_figures(metrics: list[dict], warmup: int) -> dict:
    done = metrics[max(warmup, 1) - 1 :]
    step_s = (done[-1]["elapsed_s"] - done[0]["elapsed_s"]) / (len(done) - 1)
    gen = statistics.median(m["generation_s"] for m in metrics[warmup:])
    train = statistics.median(m["training_s"] for m in metrics[warmup:])
    score = statistics.median(m["reward_s"] for m in metrics[warmup:])
    cores = min(os.cpu_count() or 1, 3)  # the generator, reward and trainer ranks compute
    return {
        "step_s": step_s,
        "generation_s": gen,
        "training_s": train,
        "reward_s": score,
        "step_over_max_phase": step_s / max(gen, train),
        # the step can be no shorter than the three phases' work spread over the cores
        "step_over_cores_bound": step_s / max(gen, train, (gen + train + score) / cores),
    }
