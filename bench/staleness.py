"""Staleness against quality: final held-out pass@1 and training reward at each ``max_staleness``.

Runs the GSM8K-format CPU demo's RL job (``make demo-gsm8k``: examples/gsm8k/async.yaml over the
data, tokenizer and warm-started model that ``examples.gsm8k.prepare`` writes, reused if present)
at ``run.max_staleness`` in --staleness, for each configuration in --configs and each seed in
--seeds, with a bfloat16 generator under a float32 trainer (``world.generator.dtype``; the
generator's log-probs mu then differ from the trainer's pi for the same weights, as well as by
staleness). The configurations (docs/algorithms.md has each formula):

- ``aipo``: the default loss, ``min(sg(pi/mu), rho) A log pi`` (rho 4);
- ``ppo``: PPO-clip against mu with DAPO's clip-higher (``loss: grpo``, eps 0.2 / 0.28);
- ``decoupled``, ``decoupled_loglinear``: AReaL's decoupled PPO, proximal policy recomputed
  (free here: AIPO's gradient with an untruncated weight) or A-3PO's log-linear approximation;
- ``tis``: token-level truncated IS on PPO-clip (refused on AIPO, which carries its own);
- ``icepop``, ``seq_mask``: token and sequence masking on AIPO.

Prints one JSON line per (configuration, staleness): the median and (min, max) over seeds of the
final greedy pass@1 (the controller's final eval round, the generator's own greedy decoding,
on --eval-examples held-out problems), of the training reward (mean of the last 10 steps), of
the wall time, plus the steps. ``--dynamic CONFIG`` adds, for that configuration, runs with
``rollout.dynamic_sampling.enabled`` and a line per staleness with the steps each arm takes to
reach the plain run's final figure (the rolling 10-step training reward, and eval pass@1 when
--eval-every gives intermediate rounds).

    python bench/staleness.py [--staleness 0,1,2,4,8] [--configs aipo,ppo,...] [--seeds 0,1,2]
                              [--steps 250] [--dynamic aipo] [--out runs/bench_staleness] [--fresh]

A grid point already finished in --out with the same overrides is read back, not run again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.gsm8k import prepare as gsm8k  # noqa: E402
from launch import recipe  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "examples/gsm8k/async.yaml"

PPO_CLIP = {"loss": "grpo", "clip_eps": 0.2, "clip_eps_high": 0.28}
DECOUPLED = {"loss": "decoupled", "clip_eps": 0.2, "clip_eps_high": 0.28}

# Each configuration's `algorithm:` overrides on top of the demo's (AIPO, rho 4, lr 1e-4).
CONFIGS = {
    "aipo": {"loss": "aipo"},
    "ppo": PPO_CLIP,
    "decoupled": {**DECOUPLED, "proximal": "recompute"},
    "decoupled_loglinear": {**DECOUPLED, "proximal": "loglinear"},
    "tis": {**PPO_CLIP, "correction": "tis"},
    "icepop": {"loss": "aipo", "correction": "icepop"},
    "seq_mask": {"loss": "aipo", "correction": "seq_mask"},
}
STALENESS = (0, 1, 2, 4, 8)
SEEDS = (0, 1, 2)
DYNAMIC = {"rollout": {"dynamic_sampling": {"enabled": True}}}
FINISHED = "bench_run.json"  # written in a run's folder when it ends: its overrides and wall time
WINDOW = 10  # steps in the training reward's final mean and in the rolling mean of "steps to reach"
# Per-step trainer metrics averaged over the run, where the configuration reports them.
DIAGNOSTICS = (
    "logp_mismatch_mean",
    "clip_frac",
    "behave_truncated_frac",
    "correction_truncated_frac",
    "correction_masked_frac",
)


@dataclass(frozen=True)
class Run:
    config: str
    staleness: int
    seed: int
    dynamic: bool = False

    @property
    def name(self) -> str:
        arm = "-dynamic" if self.dynamic else ""
        return f"{self.config}{arm}-s{self.staleness}-seed{self.seed}"


def build_grid(configs, staleness, seeds, dynamic: str | None = None) -> list[Run]:
    """Every run, configuration-major; with ``dynamic``, that configuration's dynamic-sampling
    runs follow its plain ones at each staleness (unknown names raise, naming them)."""
    unknown = [c for c in [*configs, *([dynamic] if dynamic else [])] if c not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    if dynamic and dynamic not in configs:
        raise ValueError(f"--dynamic {dynamic}: the configuration must also be in --configs (its plain arm)")
    if any(s < 0 for s in staleness):
        raise ValueError(f"--staleness must be >= 0, got {list(staleness)}")
    runs = []
    for config in configs:
        for s in staleness:
            runs += [Run(config, s, seed) for seed in seeds]
            if config == dynamic:
                runs += [Run(config, s, seed, dynamic=True) for seed in seeds]
    return runs


def overrides_for(run: Run, root: Path, out: Path, steps: int, dtype: str, eval_examples: int, eval_every: int) -> dict:
    """The role-map overrides of one run: the prepared files, the grid point, a cheap eval."""
    data = root / "data"
    task = gsm8k.task_section(data)
    extra = {
        "world": {"generator": {"ranks": 1, "dtype": dtype}},
        "model": {"path": str(root / "sft"), "dtype": "float32"},
        "task": {"train_files": task["train_files"], "eval_files": [str(data / "test.jsonl")]},
        "algorithm": dict(CONFIGS[run.config]),
        # Greedy pass@1 only; every_steps = steps: the final round (a run with eval always has it).
        "eval": {"every_steps": eval_every or steps, "before_training": False, "examples": eval_examples, "samples": 0},
        "run": {"steps": steps, "seed": run.seed, "max_staleness": run.staleness, "out": str(out), "progress": False},
    }
    if run.dynamic:
        recipe.merge_overrides(extra, json.loads(json.dumps(DYNAMIC)))
    return extra


def rolling(values: list[float], window: int = WINDOW) -> list[float]:
    """The mean of each value with up to ``window - 1`` before it."""
    return [statistics.fmean(values[max(0, i + 1 - window) : i + 1]) for i in range(len(values))]


def steps_to_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    """The first step count (steps trained) at which ``curve`` (step count, figure) reaches ``target``."""
    return next((step for step, value in curve if value >= target - 1e-12), None)


def run_figures(run_dir: Path, wall_s: float, root: Path) -> dict:
    """One finished run's figures from its summary.json and metrics.jsonl."""
    metrics = recipe.read_metrics(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = summary.get("eval") or []
    if evals:
        pass1, source = evals[-1]["pass@1"], "controller_eval"
    else:  # no eval round: greedy on the saved policy, offline (the trainer's float32 decoding)
        pass1, source = gsm8k.heldout_accuracy(run_dir / "policy", root / "data"), "offline_heldout"
    # With dynamic sampling reward_mean covers the kept groups only; every scored group's mean
    # is the figure a plain run's reward_mean is (the two arms compare on it).
    rewards = [m.get("dynamic_sampling", {}).get("reward_mean_all", m["reward_mean"]) for m in metrics]
    trainer = [m.get("trainer", {}) for m in metrics]
    diagnostics = {k: statistics.fmean(t[k] for t in trainer) for k in DIAGNOSTICS if all(k in t for t in trainer)}
    return {
        "pass1": pass1,
        "pass1_source": source,
        "train_reward": statistics.fmean(rewards[-WINDOW:]),
        "wall_s": wall_s,
        "steps": len(metrics),
        "staleness_mean": statistics.fmean(m["staleness_mean"] for m in metrics),
        "diagnostics": diagnostics,
        # Full windows only: a first step alone is one batch's noise, not "reached".
        "reward_curve": [[i + 1, r] for i, r in enumerate(rolling(rewards)) if i + 1 >= WINDOW],
        "eval_curve": [[e["step"], e["pass@1"]] for e in evals],
    }


def run_one(run: Run, root: Path, out: Path, args) -> dict:
    """Run one grid point, or reuse its finished run in ``out`` when it was made with the same
    overrides (a grid of hours can then stop and go on; --fresh runs everything again)."""
    run_dir = out / run.name
    extra = overrides_for(run, root, run_dir, args.steps, args.generator_dtype, args.eval_examples, args.eval_every)
    finished = run_dir / FINISHED
    if not args.fresh and finished.exists():
        record = json.loads(finished.read_text())
        if record.get("overrides") == extra:
            return run_figures(run_dir, record["wall_s"], root)
    finished.unlink(missing_ok=True)
    cfg = recipe.write_config(CONFIG, run_dir, extra)
    wall_s = recipe.run_job(cfg, timeout_s=args.timeout_s, quiet=True)
    finished.write_text(json.dumps({"overrides": extra, "wall_s": wall_s}))
    return run_figures(run_dir, wall_s, root)


def median_spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


def summarise(config: str, staleness: int, results: list[tuple[int, dict]], args) -> dict:
    """One configuration's JSON line from its runs' figures, ``results`` = [(seed, figures)]."""
    figures = [f for _, f in results]
    diag_keys = sorted(set.intersection(*(set(f["diagnostics"]) for f in figures)))
    diagnostics = {k: round(statistics.median(f["diagnostics"][k] for f in figures), 4) for k in diag_keys}
    return {
        "bench": "staleness",
        "config": config,
        "algorithm": CONFIGS[config],
        "max_staleness": staleness,
        "generator_dtype": args.generator_dtype,
        "seeds": [seed for seed, _ in results],
        "steps": statistics.median(f["steps"] for f in figures),
        "pass1": median_spread([f["pass1"] for f in figures]),
        "pass1_source": sorted({f["pass1_source"] for f in figures}),
        "eval_examples": args.eval_examples,
        "train_reward_last10": median_spread([f["train_reward"] for f in figures]),
        "wall_s": median_spread([f["wall_s"] for f in figures]),
        "staleness_mean": round(statistics.median(f["staleness_mean"] for f in figures), 3),
        "diagnostics": diagnostics,
    }


def _reach(curve_key: str, final_key: str, plain: dict, dynamic: dict) -> dict | None:
    """Steps to reach the plain run's final figure, for both arms of one seed (None: no curve)."""
    if not plain[curve_key] or not dynamic[curve_key]:
        return None
    target = plain[final_key]
    return {
        "target": round(target, 4),
        "plain": steps_to_reach(plain[curve_key], target),
        "dynamic": steps_to_reach(dynamic[curve_key], target),
    }


def summarise_dynamic(config: str, staleness: int, plain: dict[int, dict], dynamic: dict[int, dict], args) -> dict:
    """The dynamic-sampling line of one (configuration, staleness): per seed, the steps each arm
    takes to reach the plain run's final training reward (rolling mean) and eval pass@1 (only
    from intermediate eval rounds, --eval-every); medians over the seeds where both arms reach it."""
    line = {"bench": "staleness", "config": config, "dynamic_sampling": True, "max_staleness": staleness}
    line["seeds"] = sorted(set(plain) & set(dynamic))
    for what, curve, final in (("reward", "reward_curve", "train_reward"), ("pass1", "eval_curve", "pass1")):
        per_seed = {s: _reach(curve, final, plain[s], dynamic[s]) for s in line["seeds"]}
        per_seed = {s: r for s, r in per_seed.items() if r is not None}
        if what == "pass1" and (args.eval_every == 0 or not per_seed):
            continue
        both = [r for r in per_seed.values() if r["plain"] is not None and r["dynamic"] is not None]
        line[f"steps_to_{what}"] = {
            "per_seed": {str(s): r for s, r in per_seed.items()},
            "plain_median": statistics.median(r["plain"] for r in both) if both else None,
            "dynamic_median": statistics.median(r["dynamic"] for r in both) if both else None,
            "dynamic_not_reached": sum(r["dynamic"] is None for r in per_seed.values()),
        }
    line["dynamic_pass1"] = median_spread([f["pass1"] for f in dynamic.values()])
    line["dynamic_train_reward_last10"] = median_spread([f["train_reward"] for f in dynamic.values()])
    line["dynamic_wall_s"] = median_spread([f["wall_s"] for f in dynamic.values()])
    return line


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--staleness", type=int_list, default=list(STALENESS), help="max_staleness values")
    parser.add_argument("--configs", type=name_list, default=list(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--seeds", type=int_list, default=list(SEEDS), help="run.seed values (medians over them)")
    parser.add_argument("--steps", type=int, default=250, help="trainer steps per run (the demo's 250)")
    parser.add_argument("--dynamic", default=None, help="a configuration to also run with dynamic sampling")
    parser.add_argument("--generator-dtype", default="bfloat16", help="world.generator.dtype (trainer: float32)")
    parser.add_argument("--eval-examples", type=int, default=500, help="held-out problems in the eval (500: all)")
    parser.add_argument("--eval-every", type=int, default=0, help="eval every N steps (0: the final policy only)")
    parser.add_argument("--root", default="runs/gsm8k", help="the prepared data, tokenizer and SFT model")
    parser.add_argument("--prepare-seed", type=int, default=0, help="the seed of the data and warm start")
    parser.add_argument("--timeout-s", type=float, default=3600, help="per run")
    parser.add_argument("--out", default="runs/bench_staleness")
    parser.add_argument("--fresh", action="store_true", help="rerun grid points already finished in --out")
    args = parser.parse_args(argv)
    if args.steps < WINDOW:
        parser.error(f"--steps must be at least {WINDOW} (the training reward is a {WINDOW}-step mean)")
    if args.eval_every < 0:
        parser.error(f"--eval-every must be >= 0 (0: the final policy only), got {args.eval_every}")
    if args.eval_examples < 1:
        parser.error(f"--eval-examples must be >= 1, got {args.eval_examples}")
    try:
        args.grid = build_grid(args.configs, args.staleness, args.seeds, args.dynamic)
    except ValueError as e:
        parser.error(str(e))
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    root, out = Path(args.root), Path(args.out)
    gsm8k.prepare(root, seed=args.prepare_seed)  # reuses a finished one
    figures: dict[Run, dict] = {}
    for config in args.configs:
        for s in args.staleness:
            point = [r for r in args.grid if r.config == config and r.staleness == s]
            for run in point:
                figures[run] = run_one(run, root, out, args)
            plain = {r.seed: figures[r] for r in point if not r.dynamic}
            print(json.dumps(summarise(config, s, sorted(plain.items()), args)), flush=True)
            if config == args.dynamic:
                dynamic = {r.seed: figures[r] for r in point if r.dynamic}
                print(json.dumps(summarise_dynamic(config, s, plain, dynamic, args)), flush=True)


if __name__ == "__main__":
    main()
