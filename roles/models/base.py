"""What the rest of mpirl needs to know about a model family, in one small record.

A :class:`ModelSpec` knows, for one family of Hugging Face causal LMs: which architecture
classes it covers, where the repeated decoder blocks are (FSDP2 shards them one by one), which
dim of each parameter Megatron-style tensor parallelism splits, whether the output head is tied
to the input embedding, and how module names map to checkpoint names. It does not know how to
build, load or run a model (Hugging Face and the engines do that), nor anything about
transports: it hands them plain data (``split_dims``).

Nothing here imports torch at module level: the role-map parser imports this package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

TPRule = Callable[[str, int], "int | None"]  # (parameter name, ndim) -> dim to split, or None


def layers_by_name(model: nn.Module) -> list[nn.Module]:
    """The first ``nn.ModuleList`` whose qualified name ends with "layers", as a list.

    That is ``model.model.layers`` for Llama, Qwen2 and most Hugging Face decoders; found by
    name rather than by attribute so that wrappers around the model (which add prefixes) still
    find it. No such list: [] (FSDP2 then shards the whole model as one group).
    """
    from torch import nn  # here, not at the top: see the module docstring

    for name, mod in model.named_modules():
        if name.endswith("layers") and isinstance(mod, nn.ModuleList):
            return list(mod)
    return []


def same_name(name: str) -> str:
    return name


@dataclass(frozen=True)
class ModelSpec:
    name: str  # the family; also the Hugging Face ``model_type`` it is looked up by
    architectures: tuple[str, ...] = ()  # Hugging Face class names it covers, "LlamaForCausalLM"
    # model -> the repeated blocks FSDP2 wraps one by one (each gathered just before it runs).
    decoder_layers: Callable[[nn.Module], list[nn.Module]] = layers_by_name
    # Megatron-style split per parameter; None: this family has no tensor-parallel rules.
    tp_rule: TPRule | None = None
    # Module name -> checkpoint name, for families whose modules are named unlike the
    # checkpoint (none so far: Hugging Face models name their parameters as they save them).
    hf_name: Callable[[str], str] = same_name

    def tp_split_dim(self, param_name: str, ndim: int) -> int | None:
        """The dim tensor parallelism splits ``param_name`` on, or None (replicated).

        ``param_name`` is a Hugging Face name. A family without rules raises ValueError: a
        silent "replicate everything" would give every tensor-parallel rank the whole model.
        """
        if self.tp_rule is None:
            raise ValueError(
                f"model family {self.name!r} has no tensor-parallel rules, so it can "
                f"only be served with tensor_parallel 1 (a family module under "
                f"roles/models/ gives it some)"
            )
        return self.tp_rule(param_name, ndim)

    def split_dims(self, params: Iterable[tuple[str, Any]]) -> tuple[tuple[str, int], ...]:
        """``(name, dim)`` for every parameter tensor parallelism splits; the others are left out.

        ``params``: ``(name, shape)`` pairs, or ``(name, tensor)`` (``named_parameters()``
        works, also of a model on the meta device). This is the data a transport's ``Need``
        takes: it never sees the family.
        """
        out = []
        for name, p in params:
            dim = self.tp_split_dim(name, len(getattr(p, "shape", p)))
            if dim is not None:
                out.append((name, dim))
        return tuple(out)

    def tied_embeddings(self, config: Any) -> bool:
        """Whether ``lm_head.weight`` is the input embedding itself (``tie_word_embeddings``).

        ``config``: a Hugging Face config or the dict of a config.json. When tied, the model
        holds (and ``named_parameters()`` lists) the matrix once, as the embedding, so a weight
        stream carries no separate ``lm_head.weight`` and a loader must not wait for one.
        Missing means untied, as Hugging Face reads it (Llama and Qwen2 default to untied;
        small Qwen2 checkpoints set it).
        """
        if isinstance(config, Mapping):
            return bool(config.get("tie_word_embeddings", False))
        return bool(getattr(config, "tie_word_embeddings", False))
