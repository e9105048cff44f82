"""``mpirl init``: a starter role map for a task and a model, sized to this machine or a cluster.

It writes a file ``mpirl check`` accepts as it is: each line carries a comment saying why it holds
that value. The ranks follow the machine: on CPU one rank of each role (more generators on many
cores), on GPUs one model rank per GPU, generators and trainers about half and half. The file is
parsed and checked (``launch.preflight``) before it is written, so a choice here that the schema
refuses is never handed to the user. What it does not do: read the task's data (``mpirl check``
does) or find a model by its Hub name (give the folder it was downloaded to).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launch import config

# A section's line: (key, value, why). The value is written in YAML's flow style.
Line = tuple[str, Any, str]
COMMENT_COLUMN = 44  # comments line up here (or two spaces after a longer line)


@dataclass(frozen=True)
class Machine:
    gpus: int  # per node; 0: CPU only
    nodes: int
    cores: int  # per node
    found: str  # where the GPU count came from, for the header

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.nodes


@dataclass(frozen=True)
class Layout:
    """Ranks per role, and how they go onto nodes (``per_node``: ranks each node runs, or None for one node)."""

    generators: int
    trainers: int
    per_node: int | None = None


def layout(m: Machine) -> Layout:
    """CPU: one generator per 4 cores (1-4), one trainer. GPUs: a model rank per GPU. On one node the
    controller and reward ranks come on top (they use no GPU); across nodes every node runs as many
    ranks as it has GPUs, so ``--map-by ppr:GPUS:node`` places them, and the trainers fill the last
    nodes: half the GPUs train, the rest (less the controller's and reward's slots) generate."""
    if m.gpus == 0:
        return Layout(generators=min(4, max(1, m.cores // 4)), trainers=1)
    total = m.total_gpus
    if m.nodes == 1 or total < 6:  # fewer GPUs would leave no generator among the slots
        return Layout(generators=max(1, total // 2), trainers=max(1, total - total // 2))
    trainers = total // 2
    return Layout(generators=total - trainers - 2, trainers=trainers, per_node=m.gpus)


# Per task: response length (CPU, GPU) and the prompt limit on GPUs. arith's answers are 1-3
# characters and an end token; MATH's worked solutions run long, GSM8K's shorter.
RESPONSE_TOKENS = {"arith": (4, 4), "gsm8k": (256, 512), "math": (512, 2048)}
PROMPT_TOKENS = {"gsm8k": 512, "math": 1024}
TOY_PARAMS = 100_000_000  # below this a model is a toy trained from scratch: a larger lr


def _world(m: Machine, lay: Layout) -> list[Line]:
    if m.gpus == 0:
        generator: Any = lay.generators
        gen_why = "the torch engine on CPU; a rank per 4 cores (1-4)"
    else:
        shared = m.total_gpus == 1
        generator = {"ranks": lay.generators, "engine": "vllm", "tensor_parallel": 1}
        generator["gpu_memory_utilization"] = 0.3 if shared else 0.8
        gen_why = (
            "vLLM on the GPU it shares with the trainer: a third of its memory"
            if shared
            else "vLLM, a GPU each; tensor_parallel > 1 for a model too large for one GPU"
        )
    return [
        ("controller", 1, "rank 0: owns the prompts and the loop (no GPU)"),
        ("generator", generator, gen_why),
        ("reward", 1, "scores on CPU; one keeps up with rule-based rewards"),
        (
            "trainer",
            lay.trainers,
            "> 1 shards the policy with FSDP2"
            if lay.trainers > 1
            else ("on the same GPU as the generator" if m.gpus else "one: FSDP2 over gloo on CPU gains little"),
        ),
    ]


def _task(task: str, args, m: Machine, context: int | None, new_tokens: int) -> list[Line]:
    lines: list[Line] = [("name", task, "a built-in task, or package.module:Class for your own")]
    if args.train_files:
        lines.append(("train_files", args.train_files, "read in this order (.jsonl, .json, .parquet, a saved folder)"))
        if args.eval_files:
            lines.append(("eval_files", args.eval_files, "the held-out split eval: scores"))
        else:
            lines.append(("eval_files", [], "none given: no held-out split, so eval: is off"))
    limit = PROMPT_TOKENS.get(task, 512) if m.gpus else None
    if limit is not None and context is not None:
        limit = min(limit, context - new_tokens)
    if limit is not None and args.train_files:
        lines.append(("max_prompt_tokens", limit, "longer prompts are left out (counted at start), never cut"))
    return lines


def _reward(name: str, task: str, m: Machine, default: bool) -> list[Line]:
    why = f"task {task}'s own reward" if default else "given with --reward"
    workers = 4 if name == "math_verify" and m.gpus else 1
    return [
        ("components", [{"name": name}], f"{why}; add components for format bonuses"),
        ("workers", workers, "scorer processes; more if the reward rank lags (mpirl advise)"),
    ]


def _training(task: str, m: Machine, lay: Layout, params: int | None, new_tokens: Line) -> dict[str, list[Line]]:
    gpu = m.gpus > 0
    toy = params is not None and params < TOY_PARAMS
    # Each trainer takes an equal share of a step: a multiple of the trainers, at least 8 each on GPUs.
    prompts = 16 if not gpu else lay.trainers * -(-max(64, 8 * lay.trainers) // lay.trainers)
    lr, lr_why = (3.0e-5, "a small model (under 100M parameters)") if toy else (1.0e-6, "a pretrained LLM")
    micro = 128 if toy else (16 if params is None or params < 3_000_000_000 else 8)
    steps = 500 if gpu else 200
    return {
        "rollout": [
            ("prompts_per_step", prompts, f"an equal share for each of {lay.trainers} trainer(s)"),
            ("samples_per_prompt", 8, "the group each advantage is measured against"),
            new_tokens,
            ("temperature", 1.0, "sample the policy as it is: AIPO corrects the rest"),
            ("mode", "stream", "continuous batching, groups out as they end, weights loaded mid-generation")
            if gpu
            else ("mode", "batch", "repeats exactly at a seed; on shared cores the stream gains little"),
        ],
        "algorithm": [
            ("loss", "aipo", "LlamaRL's off-policy loss, made for async (max_staleness 1)"),
            ("rho", 4.0, "AIPO's clip of the importance ratio"),
            ("lr", lr, lr_why),
            ("advantage", "group_std" if task == "arith" else "group_mean", "relative to the prompt's group"),
            ("micro_batch", micro, "sequences per forward/backward; lower it if memory runs short"),
        ],
        "run": [
            ("steps", steps, "trainer steps"),
            ("max_staleness", 1, "generate one step ahead of the trainer (0: synchronous)"),
            ("seed", 0, "the data order, sampling and every rank's RNGs"),
        ],
    }


def role_map_sections(args, m: Machine, task: str, reward: tuple[str, bool]) -> dict[str, list[Line]]:
    """The role map, section by section, each value with the reason for it."""
    from launch.preflight.sizing import model_shape
    from roles.models import config_int, read_lm_config

    lay = layout(m)
    context = config_int(read_lm_config(args.model_folder), "max_position_embeddings")
    cpu_tokens, gpu_tokens = RESPONSE_TOKENS.get(task, (128, 512))
    new_tokens = gpu_tokens if m.gpus else cpu_tokens
    why_tokens = "the response length cap"
    if context is not None and new_tokens > context // 2:
        new_tokens, why_tokens = max(1, context // 2), f"half the model's context ({context} tokens)"
    params = model_shape(args.model_folder).params
    gpu = m.gpus > 0
    training = _training(task, m, lay, params, ("max_new_tokens", new_tokens, why_tokens))
    has_eval = task == "arith" or bool(args.eval_files)
    every = training["run"][0][1] // 10
    sections = {
        "world": _world(m, lay),
        "model": [
            ("path", args.model, "a Hugging Face model folder, or a Hub name in the local cache"),
            ("dtype", "bfloat16", "GPUs train and generate in bfloat16")
            if gpu
            else ("dtype", "float32", "float32 on CPU: bfloat16 is slow on most CPUs"),
        ],
        "task": _task(task, args, m, context, new_tokens),
        "reward": _reward(reward[0], task, m, reward[1]),
        "rollout": training["rollout"],
        "algorithm": training["algorithm"],
        "eval": [
            ("every_steps", every if has_eval else 0, "held-out accuracy every this many steps (0: never)"),
            ("before_training", has_eval, "and of the starting policy, to compare against"),
            ("examples", 500 if gpu else 100, "the first this many eval examples"),
            ("samples", 4 if gpu else 0, "k samples each for pass@k (greedy pass@1 always)"),
        ],
        "checkpoint": [("every_steps", every, "resumable state; a rerun continues from the newest")],
        "run": [*training["run"], ("out", f"runs/{Path(args.out).stem}", "metrics, checkpoints and the summary")],
    }
    if gpu:
        sections["weights"] = [
            ("transport", "torch", "NCCL between GPUs"),
            ("bucket_mb", 256, "the buffer each weight send fills"),
        ]
    return sections


def render(sections: dict[str, list[Line]]) -> str:
    out = []
    for name, lines in sections.items():
        out.append(f"{name}:")
        for key, value, why in lines:
            text = f"  {key}: {_flow(value)}"
            if len(text) > COMMENT_COLUMN - 2:  # a long value: its reason goes on the line above
                out += [f"  # {why}", text]
            else:
                out.append(f"{text.ljust(COMMENT_COLUMN - 2)}  # {why}")
    return "\n".join(out) + "\n"


def _flow(value: Any) -> str:
    return (
        yaml.safe_dump(value, default_flow_style=True, width=1 << 20, sort_keys=False)
        .strip()
        .removesuffix("...")
        .strip()
    )


# ------------------------------------------------------------------------------ the command


def _machine(args) -> Machine:
    """GPUs per node from --gpus, else as torch finds them here; cores from --cores, else here."""
    cores = args.cores or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    if args.gpus is not None:
        return Machine(args.gpus, args.nodes, cores or 1, "--gpus")
    import torch

    return Machine(torch.cuda.device_count(), args.nodes, cores or 1, "torch.cuda.device_count() here")


class InitRefused(ValueError):
    """Arguments that cannot make a role map; the message names the argument (exit 2)."""


def _check_arguments(args) -> None:
    """Refuse, before any work, an OUT that exists (without --force), a model path that holds no
    model, a size below 1 (or a GPU count below 0)."""
    from roles.sections.base import shortened_path

    out = Path(args.out)
    if out.is_dir():
        raise InitRefused(f"{args.out!r} is a folder: give the role-map file to write (e.g. {args.out}/run.yaml)")
    if out.exists() and not args.force:
        raise InitRefused(f"{args.out!r} exists: choose another name, or pass --force to write over it")
    from roles.hub_cache import model_folder

    try:
        args.model_folder = model_folder(args.model)  # a Hub name: its snapshot in the local cache
    except ValueError as e:
        raise InitRefused(f"--model: {e}") from None
    model = Path(args.model_folder)
    try:
        if not model.is_dir():
            raise InitRefused(
                f"--model {args.model!r}: no model folder there and no such Hub name; give the folder of "
                "a Hugging Face model, or a Hub name downloaded into the local cache (hf download NAME)"
            )
        if not (model / "config.json").is_file():
            raise InitRefused(f"--model {args.model!r}: not a Hugging Face model folder (no config.json)")
    except OSError as e:
        raise InitRefused(f"--model {shortened_path(args.model)!r}: cannot look at it: {e.strerror or e}") from None
    for flag, n, least in (("--gpus", args.gpus, 0), ("--nodes", args.nodes, 1), ("--cores", args.cores, 1)):
        if n is not None and n < least:
            raise InitRefused(f"{flag} {n}: must be at least {least}")


def _task_and_reward(args) -> tuple[str, tuple[str, bool]]:
    """The task's name, and its reward with whether that is the task's default."""
    from roles import plugins
    from roles.rewards import REWARDS
    from roles.tasks import task_class
    from roles.tasks.file_task import FileTaskConfig

    try:
        cls = task_class(args.task)
    except plugins.PluginError as e:
        hint = " (a data file? use --task dataset --train-files FILE)" if Path(args.task).is_file() else ""
        raise InitRefused(f"--task: {e}{hint}") from None
    reads_files = issubclass(cls.Config, FileTaskConfig)
    if reads_files and not args.train_files:
        raise InitRefused(f"--task {args.task} reads its examples from files: give them with --train-files FILE ...")
    if not reads_files and (args.train_files or args.eval_files):
        raise InitRefused(f"--task {args.task} makes its own examples and reads no files: leave out --train-files")
    if args.reward:
        return args.task, (args.reward, False)
    if cls.default_reward is None:
        raise InitRefused(
            f"--task {args.task} has no default reward: name one with --reward "
            f"(built-ins: {', '.join(sorted(REWARDS))}; or package.module:function)"
        )
    return args.task, (cls.default_reward, True)


def _header(args, m: Machine, cfg) -> str:
    from launch.ranks import placement, rank_ranges

    name = Path(args.out)
    gpus = f"{m.gpus} GPU{'s' if m.gpus > 1 else ''}"
    where = f"{gpus} on each of {m.nodes} nodes" if m.nodes > 1 else f"{gpus} on one node" if m.gpus else "CPU only"
    where += f", {m.cores} cores"
    lines = [
        f"Written by mpirl init: task {cfg.task.name}, model {args.model}, sized for {where} (GPUs: {m.found}).",
        "Every value may be changed here, or for one run on the command line (KEY=VALUE after the file).",
        f"  mpirl check {name}",
    ]
    size = cfg.world.size
    if m.nodes > 1:
        per_node = layout(m).per_node or -(-size // m.nodes)
        lines += [
            f"  mpirun -n {size} --hostfile HOSTS --map-by ppr:{per_node}:node python -m launch {name}",
            f"  srun --nodes {m.nodes} --ntasks-per-node {per_node} python -m launch {name}",
            "Ranks by node: " + placement(cfg, [f"node{r // per_node}" for r in range(size)]),
        ]
    else:
        lines += [f"  mpirl run {name}      (or: mpirun -n {size} python -m launch {name})"]
    lines.append(
        f"Ranks: {rank_ranges(cfg)}. Generators and trainers take a GPU each, in rank order per node."
        if m.gpus
        else f"Ranks: {rank_ranges(cfg)}."
    )
    return "".join(f"# {line}\n" for line in lines)


def cmd_init(args) -> int:
    from launch import preflight

    try:
        _check_arguments(args)
        task, reward = _task_and_reward(args)
        machine = _machine(args)
        if machine.nodes > 1 and not machine.gpus:
            raise InitRefused(
                f"--nodes {machine.nodes} with no GPUs: give each node's with --gpus N (a CPU job runs on one machine)"
            )
    except InitRefused as e:
        print(f"mpirl: init: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    body = render(role_map_sections(args, machine, task, reward))
    try:  # what mpirl check would refuse is not written (a --reward or task of the user's own, say)
        cfg = preflight.parse(yaml.safe_load(body), args.out)
    except config.ConfigError as e:
        print(f"mpirl: init: the role map it would write is refused: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(_header(args, machine, cfg) + body)
    print(f"{args.out}: {cfg.world.size} ranks ({', '.join(f'{n} {r}' for r, n in cfg.world.counts().items())})")
    return 0


def add_init(sub) -> None:
    p = sub.add_parser("init", help="write a commented starter role map for a task and a model, sized to this machine")
    p.add_argument("out", metavar="OUT.yaml", help="the role-map file to write (new, unless --force)")
    p.add_argument(
        "--task", required=True, help="a built-in task (arith, gsm8k, math, dataset) or package.module:Class"
    )
    p.add_argument("--model", required=True, metavar="PATH", help="the folder of a Hugging Face causal LM")
    p.add_argument("--train-files", nargs="+", metavar="FILE", help="the task's training data (tasks read from files)")
    p.add_argument("--eval-files", nargs="+", metavar="FILE", help="its held-out data (none: no eval)")
    p.add_argument("--reward", metavar="NAME", help="the reward (default: the task's own)")
    p.add_argument("--gpus", type=int, metavar="N", help="GPUs per node (default: those torch finds here)")
    p.add_argument("--nodes", type=int, default=1, metavar="N", help="nodes of --gpus GPUs each (default: 1)")
    p.add_argument("--cores", type=int, metavar="N", help="CPU cores per node (default: this machine's)")
    p.add_argument("--force", action="store_true", help="write over OUT if it exists")
    p.set_defaults(fn=cmd_init)
