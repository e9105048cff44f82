"""LoRA adapters for an engine that is given plain weights (vLLM here): each sync's adapters
merged into a pristine copy of the base, and the whole model reloaded.

mpirl's vLLM engine reloads weights in place, and that reload needs every parameter at once
(vLLM fuses q/k/v and gate/up per layer). So the generator keeps the base as loaded (CPU
memory: one copy of the model) and, on each sync, hands the engine ``W + (alpha/r) B A`` for
the adapted layers and the base for the rest: always from the base, never onto the last
merge, so nothing drifts. The trainers still send the adapters only. vLLM's own LoRA
(``lora_mode: native``, ``vllm_lora``) avoids the reload but, on CPU, generates more slowly:
this merged path stays the default (docs/lora.md has both measured).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from roles.models.lora import ADAPTER, LoraConfig, merged_weight


class MergedAdapters:
    def __init__(self, model_path: str, config: LoraConfig, dtype: torch.dtype):
        from roles.models.loading import load_complete

        model = load_complete(model_path, dtype)
        self.config = config
        self.base = {n: p.detach() for n, p in model.named_parameters()}  # the checkpoint's names

    def merged(self, adapters: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        """Every parameter of the model: the adapted layers' weights merged with ``adapters``
        (``X.lora_A.default.weight``, ``X.lora_B.default.weight``), the others the base's."""
        pairs: dict[str, dict[str, torch.Tensor]] = {}
        for name, tensor in adapters:
            module, _, rest = name.partition(".lora_")
            part = rest.split(".", 1)[0]  # "A" or "B"
            if rest != f"{part}.{ADAPTER}.weight" or f"{module}.weight" not in self.base:
                raise KeyError(f"not an adapter of this model: {name!r}")
            pairs.setdefault(module, {})[part] = tensor
        out = dict(self.base)
        for module, ab in pairs.items():
            if set(ab) != {"A", "B"}:
                raise KeyError(f"{module}: lora_A and lora_B come together, got only lora_{''.join(ab)}")
            out[f"{module}.weight"] = merged_weight(self.base[f"{module}.weight"], ab["A"], ab["B"], self.config.scale)
        return list(out.items())
