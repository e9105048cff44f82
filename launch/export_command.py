"""``mpirl export``: a checkpoint's policy (or value model) written as a Hugging Face folder, or a
LoRA run's adapters as a PEFT adapter folder (``roles.checkpoint.export`` does the writing)."""

from __future__ import annotations

import sys
from pathlib import Path

from launch import config


def cmd_export(args) -> int:
    from roles.checkpoint.export import export_critic_hf, export_hf
    from roles.checkpoint.layout import CheckpointIOError
    from roles.checkpoint.resume import resolve_checkpoint_path

    path = resolve_checkpoint_path(args.checkpoint)
    out_dir = Path(args.out)
    problem = None
    if not path.exists():
        problem = f"no checkpoint at {str(path)!r}: no such folder"
    elif out_dir.exists() and not out_dir.is_dir():
        problem = f"{args.out!r} is a file: give a folder to write the model into"
    elif out_dir.resolve() == path.resolve() or path.resolve() in out_dir.resolve().parents:
        problem = f"{args.out!r} is inside the checkpoint {str(path)!r}: write the model elsewhere"
    elif out_dir.is_dir() and not args.force and (held := sorted(p.name for p in out_dir.iterdir())):
        # Written into, it would mix this model's files with whatever is there (another model's
        # shards and index, which loaders may prefer to ours), and nothing would say so.
        shown = ", ".join(held[:3]) + (f", ... ({len(held)} in all)" if len(held) > 3 else "")
        problem = (
            f"{args.out!r} exists and is not empty ({shown}): choose a new or empty folder, "
            "or pass --force to write the model's files over those of the same names there"
        )
    if problem is not None:
        print(f"mpirl: export: {problem}", file=sys.stderr)
        return config.EXIT_CONFIG
    try:
        if args.critic and args.adapter:
            raise CheckpointIOError("--critic and --adapter: the value model is trained whole; give one of them")
        out = export_critic_hf(path, args.out) if args.critic else export_hf(path, args.out, adapter=args.adapter)
    except (FileNotFoundError, CheckpointIOError) as e:  # not a checkpoint, or a damaged one
        print(f"mpirl: export: {e}", file=sys.stderr)
        return config.EXIT_CONFIG
    print(f"{path} -> {out} (a Hugging Face model folder)")
    # --force keeps what it does not overwrite: weights a loader could take for the model's.
    stale = sorted(
        p.name
        for pattern in ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json")
        for p in out.glob(pattern)
        if p.name != "model.safetensors"
    )
    if stale:
        print(
            f"mpirl: export: warning: {str(out)!r} also holds {', '.join(stale)}, not written by this export; "
            "a loader may read them with (or instead of) model.safetensors: remove them",
            file=sys.stderr,
        )
    return 0


def add_export(sub) -> None:
    p = sub.add_parser("export", help="write a checkpoint's policy as a Hugging Face model folder")
    p.add_argument(
        "checkpoint", help="a checkpoint (step-NNNNNNNN), or a checkpoint folder or a run folder (run.out): its newest"
    )
    p.add_argument("out", help="the folder to write (safetensors, config, tokenizer): new or empty, unless --force")
    p.add_argument(
        "--force",
        action="store_true",
        help="write into OUT even if it holds files: those of the names export writes (model.safetensors, "
        "config.json, generation_config.json, the tokenizer's) are overwritten, the others kept",
    )
    p.add_argument(
        "--critic", action="store_true", help="write the value model (a run with critic ranks) instead of the policy"
    )
    p.add_argument(
        "--adapter",
        action="store_true",
        help="a LoRA run (model.lora): write its adapters as a PEFT adapter folder instead of the merged model",
    )
    p.set_defaults(fn=cmd_export)
