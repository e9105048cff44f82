"""Memory a rank cannot do without, estimated from the role map before any rank loads a model.

Each role's *lower bound* is reckoned from the model's own files (tensor shapes from the
safetensors headers, the architecture from ``config.json``) and the sizes the role map sets, so
that a batch size with a zero too many is refused before the run, naming the fields to lower.
Only what is certain is counted: the weights, AdamW's state, a micro-batch's float32 logits, the
torch engine's KV cache; activations, allocator slack and other ranks on the node come on top,
so passing does not promise the run fits.

"The machine" is this host's RAM: ``mpirl check`` on a login node smaller than the compute
nodes can refuse a job that would fit there; the message says which machine it measured.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launch.config import RoleMap

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The torch engine decodes at most this many rows together (roles/engines/torch_engine.py).
TORCH_ENGINE_MAX_ROWS = 512


@dataclass(frozen=True)
class ModelShape:
    """What sizes memory in a causal LM, from its folder."""

    params: int | None  # parameters in the safetensors files (None: none to read)
    layers: int | None
    kv_width: int | None  # key/value heads x head dim: the KV cache per token and layer is 2x this
    vocab: int | None


@functools.lru_cache(maxsize=16)
def _shape_of(path: str, stamp: tuple) -> ModelShape:
    # The families' names for each size (GPT-2 ``n_layer``, MPT ``d_model``...) resolve in one
    # place, shared with the context check: roles.models.CONFIG_ALIASES.
    from roles.models import config_int, read_lm_config

    data = read_lm_config(path)
    heads, hidden = config_int(data, "num_attention_heads"), config_int(data, "hidden_size")
    head_dim = config_int(data, "head_dim") or (hidden // heads if hidden and heads else None)
    if data.get("multi_query") is True and not data.get("new_decoder_architecture"):
        kv_heads = 1  # GPT-BigCode, Falcon-7B: one key/value head shared by all
    else:
        kv_heads = config_int(data, "num_key_value_heads") or heads
    return ModelShape(
        params=_safetensors_params(Path(path)),
        layers=config_int(data, "num_hidden_layers"),
        kv_width=kv_heads * head_dim if kv_heads and head_dim else None,
        vocab=config_int(data, "vocab_size"),
    )


def _safetensors_params(folder: Path) -> int | None:
    """Parameters in the folder's ``*.safetensors`` (their headers only), None when unreadable."""
    from launch.preflight.model_files import WeightFileError, read_header, read_weight_map

    files = sorted(folder.glob("*.safetensors"))
    try:  # a sharded model loads the files its index names: a folder may also hold a consolidated copy
        named = set((read_weight_map(folder) or {}).values())
        files = [f for f in files if f.name in named] or files
    except WeightFileError:  # an unreadable index is the preflight's to name; every file counts here
        pass
    if not files:
        return None
    try:
        return sum(t.elements for f in files for t in read_header(f).values())
    except (
        WeightFileError
    ):  # a damaged file is named by the preflight (launch/preflight/model_files.py); no estimate here
        return None


def model_shape(path: str) -> ModelShape:
    folder = Path(path)
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*") if p.is_file()))
    return _shape_of(str(folder), stamp)


def machine_memory() -> int:
    """This host's physical memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass
class Need:
    """One role's certain memory: parts named as a user would look them up."""

    role: str
    parts: list[tuple[str, float]]  # (what, bytes)
    lower: str  # the fields that shrink it

    @property
    def total(self) -> float:
        return sum(b for _, b in self.parts)

    def describe(self) -> str:
        return " + ".join(f"{what} {_gib(b)}" for what, b in self.parts if b)


def rank_needs(cfg: RoleMap, longest_prompt: int = 1) -> list[Need]:
    """The lower bound of one rank of each role that loads the model. ``longest_prompt``: the
    longest prompt's tokens, once the data is read (``launch.preflight.data``); before, 1."""
    shape = model_shape(cfg.model.path)
    width = DTYPE_BYTES[cfg.model.dtype]
    weights = (shape.params or 0) * width
    gen_width = DTYPE_BYTES[cfg.world.generator.dtype or cfg.model.dtype]
    needs = []
    trainers = cfg.world.colocated.ranks or cfg.world.trainer.ranks
    per_trainer_rows = cfg.rollout.prompts_per_step // max(trainers, 1) * cfg.rollout.samples_per_prompt
    rows = min(cfg.algorithm.micro_batch, per_trainer_rows)
    # log_softmax of the float32 logits of every response position of a micro-batch: the
    # logits and their log-probabilities both live until the backward pass.
    logits = rows * cfg.rollout.max_new_tokens * (shape.vocab or 0) * 4 * 2
    # FSDP2 shards the weights, their gradients and AdamW's two moments over the trainers; a
    # KL term keeps a frozen reference copy, sharded alike.
    state = weights * (4 + (1 if cfg.algorithm.needs_reference else 0)) / max(trainers, 1)
    needs.append(
        Need(
            "trainer" if not cfg.world.colocated_mode else "colocated",
            [("weights, gradients and AdamW state (sharded)", state), ("a micro-batch's logits", logits)],
            "algorithm.micro_batch or rollout.max_new_tokens, or add trainer ranks",
        )
    )
    kv = 0
    if cfg.world.generator.engine == "torch" and shape.layers and shape.kv_width:
        batch_rows = min(TORCH_ENGINE_MAX_ROWS, cfg.generator_batch_prompts() * cfg.rollout.samples_per_prompt)
        tokens = longest_prompt + cfg.longest_response()
        if cfg.rollout.mode == "stream":  # its slots; their window spans two responses at most
            batch_rows = cfg.world.generator.max_seqs or batch_rows
            tokens += cfg.longest_response()
        kv = batch_rows * tokens * shape.layers * 2 * shape.kv_width * gen_width
    if cfg.world.colocated_mode:  # the same rank generates and trains
        needs[0].parts.append(("KV cache", kv))
        needs[0].lower += ", task.max_prompt_tokens"
    else:
        needs.append(
            Need(
                "generator",
                [("weights", (shape.params or 0) * gen_width), ("KV cache", kv)],
                "rollout.max_new_tokens or task.max_prompt_tokens (streaming: world.generator.max_seqs)",
            )
        )
    return needs


def check_memory(cfg: RoleMap, longest_prompt: int = 1, available: int | None = None) -> None:
    """ValueError naming the role and the fields to lower when one rank needs more than the machine."""
    available = machine_memory() if available is None else available
    for need in rank_needs(cfg, longest_prompt):
        if need.total > available:
            raise ValueError(
                f"one {need.role} rank needs at least {_gib(need.total)} when responses reach their "
                f"longest ({need.describe()}), more than this machine's {_gib(available)} of memory; "
                f"lower {need.lower}"
            )
