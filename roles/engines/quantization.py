"""Int8 weight-only quantization of the torch engine's linear layers (torchao), redone per sync.

The trainers never quantize: they send their weights (cast to the generator's dtype, if
narrower) and the generator quantizes what it received. Each ``nn.Linear`` weight becomes
torchao's ``Int8Tensor`` (per-row scales, int8 values; matmuls dequantize on the fly), which
halves a bf16 generator's weight memory and quarters a float32 one's. torchao's tensors cannot
be overwritten in place, so a sync puts the received weight back as a plain parameter of the
layer and quantizes that layer again: the engine is not rebuilt, and its other parameters
(embeddings, norms) are copied in place as before.

Only the linear layers are quantized; an output layer tied to the input embedding stays in
full precision (quantizing it would untie the two).
"""

from __future__ import annotations

import warnings

import torch

SCHEMES = ("int8",)


def _torchao():
    """torchao's quantize_ and its int8 weight-only config, imported only when asked for (its
    import logs a line per GPU kernel library a CPU build lacks)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

    return quantize_, Int8WeightOnlyConfig


class Int8WeightOnly:
    """The quantized layers of one model: quantize them, and requantize the ones a sync rewrote."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        # A weight held by two modules is tied (GPT-2's lm_head is its ``transformer.wte``,
        # Llama's its ``embed_tokens``): whatever the names, it stays in full precision.
        seen, tied = set(), set()
        for _, p in model.named_parameters(remove_duplicate=False):
            (tied if id(p) in seen else seen).add(id(p))
        self.layers = {
            f"{name}.weight": module
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and id(module.weight) not in tied
        }
        self._dirty = set(self.layers.values())
        self.requantize()

    def owns(self, name: str) -> bool:
        """Whether parameter ``name`` is a quantized weight (loaded by :meth:`load`, not copied)."""
        return name in self.layers

    def load(self, name: str, tensor: torch.Tensor, dtype: torch.dtype) -> None:
        """Put a received weight back as the layer's plain parameter (quantized by ``requantize``)."""
        module = self.layers[name]
        if tuple(module.weight.shape) != tuple(tensor.shape):
            raise ValueError(
                f"load_weights: {name!r} has shape {tuple(tensor.shape)}, the model's is {tuple(module.weight.shape)}"
            )
        device = module.weight.device
        module.weight = torch.nn.Parameter(tensor.to(device=device, dtype=dtype, copy=True), requires_grad=False)
        self._dirty.add(module)

    def requantize(self) -> None:
        """Quantize every layer loaded since the last call."""
        if not self._dirty:
            return
        quantize_, config = _torchao()
        dirty = self._dirty
        quantize_(self.model, config(), filter_fn=lambda module, fqn: module in dirty)
        self._dirty = set()


def check_scheme(name: str | None) -> None:
    if name is not None and name not in SCHEMES:
        raise ValueError(f"unknown quantization {name!r} for the torch engine (known: {', '.join(SCHEMES)})")
