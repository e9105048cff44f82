"""The control plane as generator ranks grow: one JSON line per layout (generators x mode).

    python bench/scale.py [--generators 1,2,4,8,16,32] [--modes sync,async] [--steps 12]

Real generation on 32 ranks cannot run on 2 cores, but the control plane can when the work is
modelled: the generators run the ``sim`` engine (``roles/engines/sim_engine.py``: it sleeps for
a batch's modelled decode time and returns random tokens of the modelled lengths) and the
trainer the ``sim`` step (``algorithm.sim``: it sleeps for the step's modelled time). Both
sleep, so oversubscribed ranks do not compete for cores. Everything else is the real code:
the controller, the mailboxes, the reward rank scoring every sample, the staleness gate, the
weight-version handshake and the weight push (the demo's tiny model's weights, really sent).

The same total work for every layout: ``--prompts`` x ``--samples`` rows of ``--length``
tokens a step, split over the generators, so a generator's batch shrinks as they grow. A
batch of r rows takes ``(per_token_s + r x per_row_token_s) x longest`` (fixed lengths by
default; ``--lengths lognormal`` draws a long tail). Per layout:

- ``step_s``: the median wall-clock step after ``--warmup`` steps (the controller's clock);
- ``ideal_step_s``: the modelled work alone, ``t_gen + t_train`` in sync mode and
  ``max(t_gen, t_train)`` in async, with ``t_gen`` one generator's share (the generators run
  in parallel) and ``t_train`` the trainer's modelled step; ``step_over_ideal`` their ratio
  (the target at 32 generators: <= 1.10);
- ``controller_busy``: the share of the measured steps' time the controller's loop spent
  working (target < 0.10), ``controller_msgs_per_step`` and ``controller_msgs_per_s``;
Not yet reported (issue 19 asks for them): the share of generator time spent waiting for a
batch's longest sample, start-up and shutdown times, and each role's peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.arith import prepare as arith  # noqa: E402
from launch import recipe  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "examples/arith/async.yaml"


def layout(args, generators: int, mode: str, model_dir: Path, out: Path) -> dict:
    rows = args.prompts * args.samples
    per_row = args.gen_row_token_s
    sim = {
        "per_token_s": args.gen_token_s,
        "per_row_token_s": per_row,
        "lengths": {"kind": args.lengths, "mean": args.length, "sigma": args.sigma},
    }
    overrides = {
        "model": {"path": str(model_dir)},
        "world": {"generator": {"ranks": generators, "engine": "sim", "sim": sim}, "reward": 1, "trainer": 1},
        "rollout": {
            "prompts_per_step": args.prompts,
            "samples_per_prompt": args.samples,
            "max_new_tokens": args.length * 8,
        },
        "algorithm": {"sim": {"per_token_s": args.train_token_s, "per_step_s": 0.0}},
        "run": {
            "steps": args.steps,
            "max_staleness": 0 if mode == "sync" else 1,
            "seed": 0,
            "out": str(out),
            "progress": False,
        },
    }
    cfg = recipe.write_config(CONFIG, out, overrides)
    wall = recipe.run_job(cfg, timeout_s=1800, quiet=True)
    metrics = recipe.read_metrics(out)
    warm = metrics[args.warmup :]
    step_s = statistics.median(m["step_s"] for m in warm)
    tokens_per_step = statistics.median(m["tokens"] for m in warm)
    # The modelled work: a generator's batch is its share of the rows; fixed lengths: each row
    # decodes --length tokens, so the longest is --length (lognormal: measured from the run).
    rows_per_gen = rows / generators
    longest = args.length if args.lengths == "fixed" else statistics.median(m["response_length_max"] for m in warm)
    t_gen = (args.gen_token_s + rows_per_gen * per_row) * longest
    t_train = args.train_token_s * tokens_per_step
    ideal = t_gen + t_train if mode == "sync" else max(t_gen, t_train)
    # Over the measured steps as a whole: a step's line may be written in a burst with the next
    # one's, so per-step counts move between neighbours while their sums do not.
    warm_s = sum(m["step_s"] for m in warm)
    busy = sum(m["busy"].get("controller", 0.0) * m["step_s"] for m in warm) / warm_s
    msgs_per_step = sum(m.get("controller_messages", 0) for m in warm) / len(warm)
    return {
        "bench": "scale",
        "generators": generators,
        "mode": mode,
        "ranks": generators + 3,
        "steps": args.steps,
        "lengths": args.lengths,
        "step_s": round(step_s, 4),
        "ideal_step_s": round(ideal, 4),
        "step_over_ideal": round(step_s / ideal, 3),
        "t_gen_model_s": round(t_gen, 4),
        "t_train_model_s": round(t_train, 4),
        "controller_busy": round(busy, 4),
        "controller_msgs_per_step": round(msgs_per_step, 1),
        "controller_msgs_per_s": round(msgs_per_step * len(warm) / warm_s, 1),
        "wall_s": round(wall, 2),  # the whole job, mpiexec to exit
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generators", default="1,2,4,8,16,32")
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=64, help="prompts a step (divisible by every generator count)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--length", type=int, default=64, help="response tokens (the lognormal's mean)")
    ap.add_argument("--lengths", default="fixed", choices=["fixed", "uniform", "lognormal"])
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--gen-token-s", type=float, default=0.0005, help="a decode step's fixed cost")
    ap.add_argument("--gen-row-token-s", type=float, default=0.0001, help="a decode step's cost per row")
    ap.add_argument("--train-token-s", type=float, default=0.00005, help="the sim trainer's cost per token")
    ap.add_argument("--out", default="runs/bench_scale")
    args = ap.parse_args()
    out = Path(args.out)
    arith.prepare_model(out / "model", seed=0)
    model_dir = out / "model" / "sft"
    # Neither sim runs the model (its weights are only pushed, for real), so its context may
    # exceed what it was built for: room for the simulated lengths in the role map's checks.
    config_json = model_dir / "config.json"
    model_config = json.loads(config_json.read_text())
    model_config["max_position_embeddings"] = max(model_config.get("max_position_embeddings", 0), 1 << 16)
    config_json.write_text(json.dumps(model_config, indent=2))
    for g in (int(x) for x in args.generators.split(",")):
        for mode in args.modes.split(","):
            line = layout(args, g, mode, model_dir, out / f"g{g}-{mode}")
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
