"""The control plane as generator ranks grow: one JSON line per layout (generators x mode).

    python bench/scale.py [--generators 1,2,4,8,16,32] [--modes sync,async] [--rollouts batch,stream] [--steps 12]
                          [--max-staleness 1] [--oversample 0.5] [--train-token-s 5e-5]

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
  (the target at 32 generators: <= 1.10). With drawn lengths ``t_gen`` is the generators' mean
  modelled time, so in sync mode the ratio also holds the wait for the slowest generator;
- ``controller_busy``: the share of the measured steps' time the controller's loop spent
  working (target < 0.10), ``controller_busy_cpu`` the same in the CPU seconds of that work
  (with more ranks than cores, wall seconds in a turn include the time the OS ran other
  ranks), ``controller_msgs_per_step`` and ``controller_msgs_per_s``;
- ``tail_wait_share``: of the generators' time inside the engine, the share their rows spent
  finished, waiting for their batch's longest sample (``generator_tail_wait_s``: the gap that
  partial rollouts and continuous batching close; large with ``--lengths lognormal``; with
  ``--rollouts stream``, slot time empty while nothing waited for a slot);
- ``startup_s``: from starting mpirun until the last rank entered its loop, and ``shutdown_s``:
  from the controller's last step until mpirun exited; ``startup_by_role``: each phase's
  longest time among a role's ranks (the ``start.*`` spans of ``launch/main.py`` and
  ``launch/job.py``, which ``mpirl trace`` draws too);
- ``peak_rss_mib``: each role's largest peak resident memory among its ranks;
- ``advise_step_s``: the step time ``mpirl advise`` predicts for this layout from the
  measurements of the mode's first two layouts (``advise_from``, e.g. "1, 2 generators": a
  generator's fixed cost per step fitted from both, as ``mpirl advise RUN1 RUN2`` does; the
  second layout is predicted from the first alone), and ``advise_error``: its relative error
  against ``step_s`` (target <= 0.10).

Before the layouts, a ``"job": "demo"`` line measures the same start-up and shutdown figures
for the demo's own 4-rank job (``examples/arith/async.yaml``, real model, ``--demo-steps``
steps); ``--generators ''`` with ``--demo-steps 0`` skips either.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.arith import prepare as arith  # noqa: E402
from launch import recipe  # noqa: E402
from launch.tools import advise  # noqa: E402
from launch.tools.trace import read_spans  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "examples/arith/async.yaml"


def layout(args, generators: int, mode: str, model_dir: Path, out: Path, rollout: str = "batch") -> dict:
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
            "mode": rollout,
            **({"oversample": args.oversample} if rollout == "stream" else {}),
        },
        "algorithm": {"sim": {"per_token_s": args.train_token_s, "per_step_s": 0.0}},
        **({} if args.weight_transport is None else {"weights": {"transport": args.weight_transport}}),
        "run": {
            "steps": args.steps,
            "max_staleness": 0 if mode == "sync" else args.max_staleness,
            "seed": 0,
            "out": str(out),
            "progress": False,
        },
    }
    cfg = recipe.write_config(CONFIG, out, overrides)
    launched = time.time()
    wall = recipe.run_job(cfg, timeout_s=1800, quiet=True)
    lifetime = job_lifetime(out, launched, time.time())
    metrics = recipe.read_metrics(out)
    warm = metrics[args.warmup :]
    step_s = statistics.median(m["step_s"] for m in warm)
    tokens_per_step = statistics.median(m["tokens"] for m in warm)
    # The modelled work: a generator's batch is its share of the rows; fixed lengths: each row
    # decodes --length tokens, so the longest is --length.
    rows_per_gen = rows / generators
    if args.lengths == "fixed":
        t_gen = (args.gen_token_s + rows_per_gen * per_row) * args.length
    else:
        # Drawn lengths: each generator's batch has its own longest sample, which only the
        # engine saw; its modelled time is what it slept, summed over the generators.
        t_gen = statistics.median(m["generation_s"] for m in warm) / generators
    t_train = args.train_token_s * tokens_per_step
    ideal = t_gen + t_train if mode == "sync" else max(t_gen, t_train)
    # Over the measured steps as a whole: a step's line may be written in a burst with the next
    # one's, so per-step counts move between neighbours while their sums do not.
    warm_s = sum(m["step_s"] for m in warm)
    busy = sum(m["busy"].get("controller", 0.0) * m["step_s"] for m in warm) / warm_s
    busy_cpu = sum((m.get("controller_busy_cpu") or 0.0) * m["step_s"] for m in warm) / warm_s
    msgs_per_step = sum(m.get("controller_messages", 0) for m in warm) / len(warm)
    return {
        "bench": "scale",
        "generators": generators,
        "mode": mode,
        "rollout": rollout,
        "oversample": args.oversample if rollout == "stream" else 0.0,
        "max_staleness": 0 if mode == "sync" else args.max_staleness,
        "ranks": generators + 3,
        "steps": args.steps,
        "lengths": args.lengths,
        "step_s": round(step_s, 4),
        "ideal_step_s": round(ideal, 4),
        "step_over_ideal": round(step_s / ideal, 3),
        "t_gen_model_s": round(t_gen, 4),
        "t_train_model_s": round(t_train, 4),
        "controller_busy": round(busy, 4),
        "controller_busy_cpu": round(busy_cpu, 4),
        "controller_msgs_per_step": round(msgs_per_step, 1),
        "controller_msgs_per_s": round(msgs_per_step * len(warm) / warm_s, 1),
        "tail_wait_share": round(
            sum(m.get("generator_tail_wait_s", 0.0) for m in warm) / max(sum(m["generation_s"] for m in warm), 1e-9), 4
        ),
        **lifetime,
        "wall_s": round(wall, 2),  # the whole job, mpiexec to exit
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def job_lifetime(out: Path, launched: float, exited: float) -> dict:
    """Start-up, shutdown and memory of a finished job, from its ranks' spans (runtime/spans.py).

    ``launched``/``exited``: time.time() when mpirun was started and when it had exited."""
    ranks = read_spans(out)
    ready = max(s["end"] for r in ranks for s in r["spans"] if s["name"] == "start.build")
    last_step = next(
        s["start"] for r in ranks if r["role"] == "controller" for s in r["spans"] if s["name"] == "stop.finish"
    )
    phases: dict[str, dict[str, float]] = {}
    peak: dict[str, float] = {}
    for r in ranks:
        role = phases.setdefault(r["role"], {})
        for s in r["spans"]:
            if s["name"].startswith("start."):
                name = s["name"].removeprefix("start.")
                role[name] = round(max(role.get(name, 0.0), s["end"] - s["start"]), 2)
        peak[r["role"]] = max(peak.get(r["role"], 0), round(r["peak_rss_bytes"] / 2**20))
    return {
        "startup_s": round(ready - launched, 2),
        "shutdown_s": round(exited - last_step, 2),
        "startup_by_role": phases,
        "peak_rss_mib": peak,
    }


def demo_job(args, model_dir: Path, out: Path) -> dict:
    """The demo's role map (4 ranks, its real model and engine) for a few steps: its start-up."""
    overrides = {
        "model": {"path": str(model_dir)},
        "run": {"steps": args.demo_steps, "out": str(out), "progress": False},
    }
    cfg = recipe.write_config(CONFIG, out, overrides)
    launched = time.time()
    wall = recipe.run_job(cfg, timeout_s=600, quiet=True)
    return {
        "bench": "scale",
        "job": "demo",
        "ranks": 4,
        "steps": args.demo_steps,
        **job_lifetime(out, launched, time.time()),
        "wall_s": round(wall, 2),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generators", default="1,2,4,8,16,32")
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--rollouts", default="batch", help="rollout.mode of each layout: batch, stream or both")
    ap.add_argument("--oversample", type=float, default=0.0, help="rollout.oversample of the stream layouts")
    ap.add_argument("--max-staleness", type=int, default=1, help="run.max_staleness of the async layouts")
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
    ap.add_argument("--weight-transport", choices=["torch", "mpi"], help="weights.transport (default: the role map's)")
    ap.add_argument("--demo-steps", type=int, default=3, help="steps of the demo job's start-up line (0: none)")
    ap.add_argument("--out", default="runs/bench_scale")
    args = ap.parse_args()
    out = Path(args.out)
    arith.prepare_model(out / "model", seed=0)
    model_dir = out / "model" / "sft"
    if args.demo_steps > 0:
        print(json.dumps(demo_job(args, model_dir, out / "demo")), flush=True)
    sim_dir = out / "model" / "sim"  # a copy: the demo line needs the model as it was built
    shutil.copytree(model_dir, sim_dir, dirs_exist_ok=True)
    model_dir = sim_dir
    # Neither sim runs the model (its weights are only pushed, for real), so its context may
    # exceed what it was built for: room for the simulated lengths in the role map's checks.
    config_json = model_dir / "config.json"
    model_config = json.loads(config_json.read_text())
    model_config["max_position_embeddings"] = max(model_config.get("max_position_embeddings", 0), 1 << 16)
    config_json.write_text(json.dumps(model_config, indent=2))
    # mode -> its first two layouts: what advise predicts from (the first alone for the second,
    # both, fitted, for the others: launch/tools/advise.py's fit_work)
    reference: dict[str, list[tuple[int, Path]]] = {}
    for g in (int(x) for x in args.generators.split(",") if x):
        for mode, rollout in ((m, r) for m in args.modes.split(",") for r in args.rollouts.split(",")):
            run_dir = out / f"g{g}-{mode}-{rollout}"
            line = layout(args, g, mode, model_dir, run_dir, rollout)
            refs = reference.setdefault((mode, rollout), [])
            if len(refs) < 2:
                refs.append((g, run_dir))
            used = [r for r in refs if r[1] != run_dir] or refs  # those before it; the first: itself
            measured = [advise.work_from_run(d) for _, d in used]
            work = advise.fit_work([(w, counts) for w, counts, _ in measured])
            predicted = advise.predict(work, generator=g, reward=1, trainer=1, overlapped=measured[0][2])
            line["advise_from"] = f"{', '.join(str(n) for n, _ in used)} generator{'s' if used[-1][0] > 1 else ''}"
            line["advise_step_s"] = round(predicted, 4)
            line["advise_error"] = round(abs(predicted - line["step_s"]) / line["step_s"], 3)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
