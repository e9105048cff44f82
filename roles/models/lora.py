"""LoRA adapters (``model.lora``): their settings, put into a Hugging Face model with PEFT, and
the weights that leave a LoRA policy (the adapters alone to the generators; merged, or as a
PEFT adapter folder, for a saved policy).

PEFT's ``inject_adapter_in_model`` wraps each target ``nn.Linear`` in place (``q_proj`` becomes
``q_proj.base_layer`` plus ``q_proj.lora_A.default`` and ``lora_B.default``), keeping the
model's own class, so trainers and generators that inject the same config hold the same names
and a weight sync moves the adapter tensors by name. The base weights are frozen and never
change: a generator's LoRA forward (base + scale x B A x) reads them as loaded, so nothing
drifts however many syncs come. Nothing here knows of ranks or messages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field

from roles.sections.base import Section

ADAPTER = "default"  # PEFT's adapter name: one adapter per policy
_LORA_PART = re.compile(r"\.lora_(A|B)\." + ADAPTER + r"\.")


class LoraConfig(Section):
    """``model.lora``: train low-rank adapters on a frozen base instead of every weight."""

    rank: int = Field(16, gt=0, le=4096)  # r: the adapters' inner dimension
    alpha: float = Field(32.0, gt=0)  # the update is scaled by alpha / rank
    dropout: float = Field(0.0, ge=0, lt=1)  # on the adapters' input (the trainer's passes only)
    # "all-linear" (every linear layer but the output head) or module names / name suffixes
    target_modules: Literal["all-linear"] | list[str] = "all-linear"

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def peft_config(self, inference: bool = False):
        import peft

        return peft.LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=0.0 if inference else self.dropout,
            target_modules=self.target_modules,
            bias="none",
            inference_mode=inference,
        )


def inject_lora(model, config: LoraConfig, inference: bool = False):
    """``model`` with adapters in its target linear layers (initialised as PEFT does: B = 0, so
    the model computes what its base does), the base frozen; returns ``model``."""
    import peft

    try:
        peft.inject_adapter_in_model(config.peft_config(inference), model, adapter_name=ADAPTER)
    except ValueError as e:  # PEFT's "Target modules ... not found in the base model"
        names = ", ".join(linear_names(model))
        raise ValueError(f"lora.target_modules: {e} (the model's linear layers: {names})") from None
    for name, p in model.named_parameters():
        p.requires_grad_(is_adapter(name) and not inference)
    return model


def check_targets(path, config: LoraConfig) -> None:
    """Raises ValueError (naming the linear layers there are) when ``target_modules`` match
    nothing in the model at ``path``: its structure is built on the meta device, no weights read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)))
    if config.target_modules != "all-linear":  # every name given must match (PEFT wants only one to)
        modules = [n for n, _ in model.named_modules()]
        unmatched = [t for t in config.target_modules if not any(n == t or n.endswith("." + t) for n in modules)]
        if unmatched:
            raise ValueError(
                f"lora.target_modules: {', '.join(map(repr, unmatched))} match no module of the model "
                f"(its linear layers: {', '.join(linear_names(model))})"
            )
    inject_lora(model, config, inference=True)


def linear_names(model) -> list[str]:
    """The distinct last names of the model's linear layers (what target_modules may name)."""
    from torch import nn

    return sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear) and n})


def is_adapter(name: str) -> bool:
    return _LORA_PART.search(name) is not None


def merged_state(state: dict, config: LoraConfig) -> dict:
    """A LoRA model's state as the plain model's: each ``X.base_layer.weight`` becomes
    ``X.weight = W + scale x B @ A``, its bias ``X.bias``; the adapters themselves go."""
    out = {}
    for name, tensor in state.items():
        if is_adapter(name):
            continue
        if ".base_layer." not in name:
            out[name] = tensor
            continue
        module, _, leaf = name.rpartition(".base_layer.")
        if leaf == "weight":
            a, b = state[f"{module}.lora_A.{ADAPTER}.weight"], state[f"{module}.lora_B.{ADAPTER}.weight"]
            tensor = merged_weight(tensor, a, b, config.scale)
        out[f"{module}.{leaf}"] = tensor
    return out


def merged_weight(w, a, b, scale: float):
    """``W + scale x B @ A`` in float32, back in ``W``'s dtype: PEFT's merge of one layer."""
    return (w.float() + scale * (b.float() @ a.float())).to(w.dtype)


def adapter_state(state: dict) -> dict:
    """The adapters under the names PEFT's adapter folders use (``base_model.model.X.lora_A.weight``)."""
    return {"base_model.model." + _LORA_PART.sub(r".lora_\1.", n): t for n, t in state.items() if is_adapter(n)}


def save_adapter_folder(model, config: LoraConfig, base_path: str, out) -> Path:
    """Write ``model``'s adapters as a PEFT adapter folder (``adapter_config.json`` and
    ``adapter_model.safetensors``) that ``PeftModel.from_pretrained`` and vLLM's LoRA load."""
    return write_adapter_folder({n: p.detach() for n, p in model.named_parameters()}, config, base_path, out)


def write_adapter_folder(state: dict, config: LoraConfig, base_path: str, out) -> Path:
    """``state``'s adapters (``X.lora_A.default.weight``; other entries are left out) as a PEFT
    adapter folder in ``out``: what ``save_adapter_folder`` writes, from tensors."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    peft_config = config.peft_config(inference=True)
    peft_config.base_model_name_or_path = str(base_path)
    peft_config.task_type = "CAUSAL_LM"
    peft_config.save_pretrained(str(out))
    tensors = adapter_state(state)
    save_file({n: t.detach().cpu().contiguous() for n, t in tensors.items()}, str(out / "adapter_model.safetensors"))
    return out


class BaseView:
    """The frozen base of a LoRA model, called as a model: its adapters off for the call (the
    KL reference without a second copy of the weights; a sharded model's collectives run alike)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *args, **kwargs):
        from peft.tuners.lora import LoraLayer

        layers = [m for m in self.model.modules() if isinstance(m, LoraLayer)]
        for layer in layers:
            layer.enable_adapters(False)
        try:
            return self.model(*args, **kwargs)
        finally:
            for layer in layers:
                layer.enable_adapters(True)

    def parameters(self):
        return self.model.parameters()
