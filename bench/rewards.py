"""Reward throughput of one reward rank: the sandbox against calling the rewards in-process.

    python bench/rewards.py [--reps 5] [--gsm8k 2000] [--math 256] [--call-size 8]
                            [--gen-responses-per-s 50]

For ``gsm8k`` and ``math_verify``, the same synthetic batch is scored two ways, in
alternating repetitions (so drift on a noisy machine hits both alike), reported as medians:

- in-process: ``CombinedReward`` called in a loop (no time limit: the baseline);
- sandbox: ``RewardSandbox`` with one worker, in calls of ``--call-size`` items (one rollout
  group: the reward role scores a group per message).

The batches are realistic in length and mix: GSM8K-style reasoning of 100-300 characters
with several numbers, most ending ``#### N`` (right or wrong, some with ``1,234`` or ``$``),
some with no marker (the last-number fallback); MATH-style reasoning with LaTeX and a
``\\boxed{}`` answer (fractions, roots, intervals, sets, polynomials, pi), right in a
different form (``0.5`` for ``\\frac{1}{2}``) or wrong, eight responses per problem like a
rollout group. ``overhead_us`` is the sandbox's extra wall time per item; ``restart_ms``
what replacing a worker (after a timeout or a crash) adds to a call.

``generators_per_reward_rank`` = sandbox rate / ``--gen-responses-per-s``: how many
generators one reward rank (one worker) keeps up with. The default of 50 responses/s per
generator is an estimate, not a measurement here: one GPU running vLLM on a ~1.5B model
(the usual size for GSM8K RL) decodes of the order of 10^4 tokens/s over a large batch, and
a GSM8K response is 200-300 tokens. Measure yours (``bench/generation.py`` on your model and
GPU, tokens/s divided by response length) and pass it. Prints one JSON line, then one per
reward-model row (``bench/reward_model_rows.py``: a reward model's samples/s against a plain
Hugging Face batched forward, and the async demo's step time with it; ``--no-reward-model``
leaves them out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from roles.rewards.combine import CombinedReward, ComponentSpec  # noqa: E402
from roles.rewards.sandbox import RewardSandbox  # noqa: E402
from roles.tasks.base import Example  # noqa: E402

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis"]
ITEMS = ["clips", "apples", "tickets", "pages", "marbles", "cupcakes", "stamps"]

# (reference, renderings a right response may box, wrong answers a response may box)
MATH_POOL = [
    ("\\frac{1}{2}", ["\\frac{1}{2}", "0.5", "\\dfrac{1}{2}"], ["\\frac{1}{3}", "2"]),
    ("\\frac{\\sqrt{2}}{2}", ["\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}"], ["\\sqrt{2}"]),
    ("[1,2)", ["[1,2)"], ["(1,2)", "[1,2]"]),
    ("\\{1,2,3\\}", ["\\{1,2,3\\}", "\\{3,2,1\\}"], ["\\{1,2\\}"]),
    ("2\\pi", ["2\\pi", "\\pi \\cdot 2"], ["\\pi", "4\\pi"]),
    ("x^2+2x+1", ["(x+1)^2", "x^2+2x+1"], ["x^2+1"]),
    ("(-\\infty, 3]", ["(-\\infty,3]"], ["(-\\infty,3)"]),
    ("\\frac{7}{4}", ["\\frac{7}{4}", "1.75", "1\\frac{3}{4}"], ["\\frac{4}{7}"]),
    ("3\\sqrt{5}", ["3\\sqrt{5}", "\\sqrt{45}"], ["5\\sqrt{3}"]),
    ("120", ["120", "120^\\circ"], ["60"]),
]


def gsm8k_batch(n: int, rng: random.Random) -> list[tuple[str, Example]]:
    items = []
    for i in range(n):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        a, b, c = rng.randint(2, 90), rng.randint(2, 40), rng.randint(2, 9)
        total = (a + b) * c
        text = (
            f"{name} has {a} {item} and buys {b} more, so {name} has {a} + {b} = {a + b} {item}. "
            f"Each of {c} friends gets the same number, so that is {a + b} * {c} = {total} {item} "
            f"in all."
        )
        kind = rng.random()
        if kind < 0.5:
            text += f"\n#### {total:,}" if total >= 1000 else f"\n#### {total}"
        elif kind < 0.75:
            text += f"\n#### {total + rng.randint(1, 9)}"
        elif kind < 0.9:
            text += f" The answer is ${total}."  # no marker: the last-number fallback
        else:
            text += f" Then {c} more are lost, leaving {total - c}.\n#### {total - c}"
        items.append((text, Example(i, f"question {i}", str(total))))
    return items


def math_batch(n: int, rng: random.Random, group: int = 8) -> list[tuple[str, Example]]:
    items = []
    for i in range(n):
        gold, right, wrong = MATH_POOL[(i // group) % len(MATH_POOL)]
        answer = rng.choice(right) if rng.random() < 0.6 else rng.choice(wrong)
        k, m = rng.randint(2, 30), rng.randint(2, 30)
        text = (
            f"Let $a = {k}$ and $b = {m}$. We have $a + b = {k + m}$ and "
            f"$\\frac{{a}}{{b}} = \\frac{{{k}}}{{{m}}}$. Substituting into the expression and "
            f"simplifying, $$ (a-b)^2 = {(k - m) ** 2}, $$ which we do not need further. "
            f"Hence the answer is $\\boxed{{{answer}}}$."
        )
        items.append((text, Example(i // group, f"problem {i // group}", gold)))
    return items


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def restart_cost(sandbox: RewardSandbox, one: list, reps: int = 5) -> float:
    """Seconds a call takes more when its worker has to be replaced first (median)."""
    plain, after_kill = [], []
    for _ in range(reps):
        plain.append(timed(lambda: sandbox.score(one)))
        pid = sandbox.worker_pids[0]
        os.kill(pid, signal.SIGKILL)
        while True:  # until its server has reaped it
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.001)
        after_kill.append(timed(lambda: sandbox.score(one)))
    return statistics.median(after_kill) - statistics.median(plain)


def measure(name: str, items, reps: int, call_size: int) -> dict:
    spec = [ComponentSpec(name, name, 1.0, {})]
    inproc = CombinedReward(spec)
    t0 = time.perf_counter()
    sandbox = RewardSandbox(spec, timeout_s=30.0, workers=1)
    start_s = time.perf_counter() - t0
    calls = [items[i : i + call_size] for i in range(0, len(items), call_size)]

    def run_inproc():
        return [inproc(text, ex).score for text, ex in items]

    def run_sandbox():
        return [r.score for call in calls for r in sandbox.score(call)]

    if run_inproc() != run_sandbox():  # also the warm-up: caches filled on both sides
        raise SystemExit(f"{name}: the sandbox and the in-process reward disagree")
    a, b = [], []
    for _ in range(reps):
        a.append(timed(run_inproc))
        b.append(timed(run_sandbox))
    restart_ms = restart_cost(sandbox, items[:1]) * 1e3
    sandbox.close()
    inproc_s, sandbox_s = statistics.median(a), statistics.median(b)
    ratio = statistics.median(x / y for x, y in zip(a, b))  # sandbox rate / in-process rate
    n = len(items)
    return {
        "items": n,
        "right_share": round(sum(run_inproc()) / n, 3),
        "inproc_per_s": round(n / inproc_s),
        "sandbox_per_s": round(n / sandbox_s),
        "ratio": round(ratio, 3),
        "overhead_us": round((sandbox_s - inproc_s) / n * 1e6, 1),
        "first_start_s": round(start_s, 3),  # fork server (interpreter, preloads) + worker
        "restart_ms": round(restart_ms, 1),  # what a timeout or crash adds: fork + build
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--gsm8k", type=int, default=2000, help="GSM8K-style responses in the batch")
    p.add_argument("--math", type=int, default=256, help="MATH-style responses in the batch")
    p.add_argument("--call-size", type=int, default=8, help="items per sandbox call (a rollout group)")
    p.add_argument(
        "--gen-responses-per-s",
        type=float,
        default=50.0,
        help="responses one generator produces per second (see the docstring)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-reward-model", action="store_true", help="leave out the reward-model rows")
    p.add_argument("--rm-items", type=int, default=512, help="conversations the reward model scores")
    p.add_argument("--rm-batch", type=int, default=32, help="rows per batch of the Hugging Face baseline")
    p.add_argument("--rm-hidden", type=int, default=256)
    p.add_argument("--rm-layers", type=int, default=4)
    p.add_argument("--async-steps", type=int, default=30, help="steps of each async demo run")
    p.add_argument("--async-repeats", type=int, default=3)
    p.add_argument("--out", default="runs/bench_rewards")
    args = p.parse_args()
    rng = random.Random(args.seed)
    out = {
        "bench": "rewards",
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),  # a busy machine makes every figure noisy
        "reps": args.reps,
        "call_size": args.call_size,
        "gsm8k": measure("gsm8k", gsm8k_batch(args.gsm8k, rng), args.reps, args.call_size),
        "math_verify": measure("math_verify", math_batch(args.math, rng), args.reps, args.call_size),
        "gen_responses_per_s": args.gen_responses_per_s,
    }
    out["generators_per_reward_rank"] = {
        name: round(out[name]["sandbox_per_s"] / args.gen_responses_per_s, 1) for name in ("gsm8k", "math_verify")
    }
    print(json.dumps(out), flush=True)
    if args.no_reward_model:
        return
    from reward_model_rows import reward_model_async, reward_model_throughput

    for row in (
        reward_model_throughput(args.reps, args.rm_items, args.rm_batch, args.rm_hidden, args.rm_layers, args.seed),
        # A reward model the size of the demo's policy (bench/reward_model_rows.py).
        reward_model_async(args.async_steps, 5, args.async_repeats, 128, 4, Path(args.out)),
    ):
        print(json.dumps({"bench": "rewards", "load_avg_1m": round(os.getloadavg()[0], 2), **row}), flush=True)


if __name__ == "__main__":
    main()
