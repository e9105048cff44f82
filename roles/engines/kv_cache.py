"""The torch engine's KV cache for one batch: preallocated for the whole call, filled in place."""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


def preallocated_cache(config, capacity: int) -> Cache:
    n_layers = config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[_PreallocatedLayer(capacity) for _ in range(n_layers)])


class _PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in one buffer sized for the whole call.

    HF's ``DynamicLayer`` grows by ``torch.cat`` every step, copying the whole cache each time
    (on CPU, much of ``generate``'s time). Here each step writes one slot and hands attention a
    view of the filled prefix, so attention still sees exactly the real length and HF builds
    the same masks as for a dynamic cache. Of ``DynamicLayer``'s other methods that touch ``keys``/``values``, those
    the engine never calls (crop, repeat, beam reorder) refuse rather than silently misbehave.
    """

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states, value_states) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, dk = key_states.shape
        self._k = key_states.new_empty((b, h, self.capacity, dk))
        self._v = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV cache full: {end} > {self.capacity} positions")
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if not self.is_initialized:
            return
        # Copy only the filled prefix of the kept rows into fresh, smaller buffers.
        k, v, n = self._k, self._v, self.length
        self._k = k.new_empty((len(indices), *k.shape[1:]))
        self._v = v.new_empty((len(indices), *v.shape[1:]))
        self._k[:, :, :n] = k[indices, :, :n]
        self._v[:, :, :n] = v[indices, :, :n]
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]

    def reset(self) -> None:
        super().reset()
        self.length = 0

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the torch engine never crops its cache")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("the torch engine never repeats cache rows")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("the torch engine does no beam search")
