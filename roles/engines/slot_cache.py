"""The streaming torch engine's KV cache: per layer, ``slots`` rows over a window of columns.

Every live row writes its next key at the same column (so a decode step is one batched
forward); a row's tokens sit right-aligned before it, and the attention mask hides the columns
before a row's start. The window shifts left past columns no live row uses, right when a long
prompt joins early, and grows when neither is enough (``torch_stream.ContinuousBatcher``).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class SlotKV:
    """Per layer, keys and values of ``slots`` rows over a window of columns (lazily sized)."""

    def __init__(self, config, slots: int):
        self.slots = slots
        self.columns = 0
        n_layers = config.get_text_config(decoder=True).num_hidden_layers
        self.layers = [_SlotLayer() for _ in range(n_layers)]
        self.cache = Cache(layers=self.layers)

    def at(self, column: int, rows: int) -> None:
        for layer in self.layers:
            layer.column, layer.rows = column, rows

    def copy_in(self, tmp: Cache, src_rows: list[int], dst_rows: list[int], end: int) -> None:
        """Copy each ``src_rows`` row of a prefill cache into ``dst_rows``, right-aligned at ``end``."""
        src = torch.as_tensor(src_rows, dtype=torch.long, device=tmp.layers[0].keys.device)
        dst = torch.as_tensor(dst_rows, dtype=torch.long, device=src.device)
        for layer, t in zip(self.layers, tmp.layers):
            width = t.keys.shape[2]
            if layer.k is None:
                layer.allocate(t.keys, t.values, self.slots, max(self.columns, end))
            layer.k[dst, :, end - width : end] = t.keys[src]
            layer.v[dst, :, end - width : end] = t.values[src]
        self.columns = self.layers[0].k.shape[2]

    def shift(self, by: int, end: int, rows: int) -> None:
        """Move columns ``by`` to the left (right if negative) for the first ``rows`` rows."""
        if by == 0 or self.layers[0].k is None or rows == 0:
            return
        if by < 0 and end - by > self.columns:
            self.grow(end - by)
        for layer in self.layers:
            for buf in (layer.k, layer.v):
                if by > 0:
                    buf[:rows, :, : end - by] = buf[:rows, :, by:end].clone()
                else:
                    buf[:rows, :, -by : end - by] = buf[:rows, :, :end].clone()

    def move_row(self, src: int, dst: int, end: int) -> None:
        for layer in self.layers:
            layer.k[dst, :, :end] = layer.k[src, :, :end]
            layer.v[dst, :, :end] = layer.v[src, :, :end]

    def grow(self, columns: int) -> None:
        if self.layers[0].k is None:
            self.columns = max(self.columns, columns)
            return
        for layer in self.layers:
            layer.k, layer.v = _wider(layer.k, columns), _wider(layer.v, columns)
        self.columns = columns


def _wider(buf: torch.Tensor, columns: int) -> torch.Tensor:
    out = buf.new_zeros((*buf.shape[:2], columns, buf.shape[3]))
    out[:, :, : buf.shape[2]] = buf
    return out


class _SlotLayer(DynamicLayer):
    """A cache layer over ``_SlotKV``'s buffers: a decode step writes column ``column`` of the
    first ``rows`` rows and attends over columns ``0..column`` (the mask hides the rest)."""

    def __init__(self):
        super().__init__()
        self.k = self.v = None
        self.column = self.rows = 0

    def allocate(self, keys: torch.Tensor, values: torch.Tensor, slots: int, columns: int) -> None:
        self.k = keys.new_zeros((slots, keys.shape[1], columns, keys.shape[3]))
        self.v = values.new_zeros((slots, values.shape[1], columns, values.shape[3]))
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        c, r, q = self.column, self.rows, key_states.shape[-2]
        self.k[:r, :, c : c + q] = key_states
        self.v[:r, :, c : c + q] = value_states
        self.keys, self.values = self.k[:r, :, : c + q], self.v[:r, :, : c + q]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.column

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("the slot cache never crops")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("the slot cache moves rows itself")
