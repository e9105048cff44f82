"""Continuous batching for the torch engine: sequences join and leave between decode steps.

The KV cache is one buffer per layer of ``slots`` rows and a window of columns. Every live
row writes its next key at the same column ``T`` (so a decode step is one batched forward,
as in the batch loop), and a row's tokens sit right-aligned before it: a sequence joining
with ``p`` tokens of prompt is prefilled on its own (all of a request's samples share that one
prefill) and copied into columns ``T - p .. T``. The attention mask hides each row's columns
before its start. When the window is full it is shifted left past the columns no live row
uses; rows that freed their slots are moved down so a step decodes only ``rows`` rows.

Sampling draws each token by inverse CDF from a uniform that is a hash of (the sample's seed,
the token's index) (:func:`counter_uniform`): what a sample draws does not depend on its
slot, its neighbours or when it joined.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer

from roles.engines.base import Sample
from roles.engines.kv_cache import preallocated_cache
from roles.engines.requests import Finished, Request, check_request, sample_seed
from runtime.loop_clock import LOOP


@dataclass
class _Seq:
    """One sample being generated: where it sits and what it has sampled."""

    tag: int
    index: int
    request: Request
    seed: int
    prompt: np.ndarray
    start: int = 0  # its first column in the window
    fed: int = 0  # tokens in its KV (prompt + generated ones fed back)
    pending: int = -1  # the sampled token not yet fed (its KV is computed by the next step)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def sample(self, reason: str) -> Sample:
        return Sample(
            response_ids=np.asarray(self.tokens, np.int32),
            logprobs=np.asarray(self.logprobs, np.float32),
            finish_reason=reason,
            versions=np.asarray(self.versions, np.int32),
        )


class ContinuousBatcher:
    """The streaming half of ``TorchEngine`` (``roles.engines.requests.StreamingEngine``)."""

    def __init__(self, engine, capacity: int, inflight_kv: str = "keep", seed: int = 0):
        self.engine = engine  # model, device, eos_ids, pad_id
        self.capacity = capacity
        self.inflight_kv = inflight_kv
        self.waiting: collections.deque[tuple[Request, int]] = collections.deque()  # (request, sample index)
        self.slots: list[_Seq | None] = [None] * capacity
        self.kv: _SlotKV | None = None
        self.T = 0  # the column every live row writes next
        self._rng = np.random.default_rng(seed)  # seeds of unseeded requests

    # -------------------------------------------------------------- requests

    def add(self, request: Request) -> None:
        check_request(request)
        for j in range(request.n):
            self.waiting.append((request, j))

    def abort(self, tag: int) -> int:
        dropped = sum(1 for r, _ in self.waiting if r.tag == tag)
        self.waiting = collections.deque((r, j) for r, j in self.waiting if r.tag != tag)
        for i, seq in enumerate(self.slots):
            if seq is not None and seq.tag == tag:
                self.slots[i] = None
                dropped += 1
        return dropped

    def unfinished(self) -> int:
        return len(self.waiting) + self.live()

    def live(self) -> int:
        return sum(s is not None for s in self.slots)

    @torch.inference_mode()
    def step(self) -> list[Finished]:
        LOOP.tick()
        done = self._admit()
        if self.live():
            done += self._decode()
        return done

    @torch.inference_mode()
    def weights_changed(self) -> None:
        """New weights are in the model: with ``recompute``, rebuild the live rows' KV from them."""
        if self.inflight_kv == "recompute" and self.live():
            rows = [i for i, s in enumerate(self.slots) if s is not None]
            seqs = [self.slots[i] for i in rows]
            tmp = self._prefill(
                [np.concatenate([s.prompt, np.asarray(s.tokens[: s.fed - len(s.prompt)], np.int32)]) for s in seqs]
            )[1]
            self.kv.copy_in(tmp, list(range(len(rows))), rows, self.T)

    # -------------------------------------------------------------- admission

    def _admit(self) -> list[Finished]:
        free = [i for i, s in enumerate(self.slots) if s is None]
        batch: list[tuple[Request, int]] = []
        while self.waiting and len(batch) < len(free):
            batch.append(self.waiting.popleft())
        if not batch:
            return []
        # One prefill per distinct request: its samples share the prompt's KV.
        requests = list({id(r): r for r, _ in batch}.values())
        which = {id(r): i for i, r in enumerate(requests)}
        prompts = [np.asarray(r.prompt_ids, np.int32) for r in requests]
        logits, tmp = self._prefill(prompts)
        width = max(len(p) for p in prompts)
        longest_left = max(r.sampling.max_new_tokens for r in requests)
        self._make_room(width, longest_left)
        rows, src = free[: len(batch)], [which[id(r)] for r, _ in batch]
        self.kv.copy_in(tmp, src, rows, self.T)
        seqs = []
        for row, (r, j) in zip(rows, batch):
            seed = sample_seed(r.sampling.seed, j) if r.sampling.seed is not None else int(self._rng.integers(2**62))
            p = len(r.prompt_ids)
            seq = _Seq(r.tag, j, r, seed, np.asarray(r.prompt_ids, np.int32), start=self.T - p, fed=p)
            self.slots[row] = seq
            seqs.append(seq)
        return self._sample_into(rows, seqs, logits[src])

    def _prefill(self, sequences: list[np.ndarray]) -> tuple[torch.Tensor, Cache]:
        """The sequences' last logits and their KV, left-padded in a cache of their own."""
        eng = self.engine
        ids, mask, _ = eng._left_padded(sequences)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = preallocated_cache(eng.model.config, ids.shape[1])
        out = eng.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1], cache

    # -------------------------------------------------------------- decoding

    def _decode(self) -> list[Finished]:
        self._compact_rows()
        rows = self._rows()
        if self.T + 1 > self.kv.columns:
            self._make_room(0, 1)
        seqs = self.slots[:rows]
        dev = self.engine.device
        starts = torch.tensor([s.start if s else self.T for s in seqs], device=dev)
        mask = (torch.arange(self.T + 1, device=dev)[None, :] >= starts[:, None]).long()
        tok = torch.tensor([s.pending if s else self.engine.pad_id for s in seqs], device=dev)
        pos = torch.tensor([s.fed if s else 0 for s in seqs], device=dev)
        self.kv.at(self.T, rows)
        logits = self.engine.model(
            input_ids=tok[:, None],
            attention_mask=mask,
            position_ids=pos[:, None],
            past_key_values=self.kv.cache,
            use_cache=True,
        ).logits[:, -1]
        self.T += 1
        live = [i for i in range(rows) if seqs[i] is not None]
        for i in live:
            seqs[i].fed += 1
        return self._sample_into(live, [seqs[i] for i in live], logits[live])

    def _sample_into(self, rows: list[int], seqs: list[_Seq], logits: torch.Tensor) -> list[Finished]:
        """Sample each row's next token; record it; free and return the rows that ended."""
        from roles.engines.sampling import pick_rows

        tok, lp = pick_rows(
            logits, [s.request.sampling for s in seqs], [s.seed for s in seqs], [len(s.tokens) for s in seqs]
        )
        eos = set(self.engine.eos_ids.tolist())
        version = self.engine.version
        finished = []
        for row, seq, t, logp in zip(rows, seqs, tok.tolist(), lp.tolist()):
            seq.tokens.append(t)
            seq.logprobs.append(logp)
            seq.versions.append(version)
            seq.pending = t
            reason = (
                "stop" if t in eos else "length" if len(seq.tokens) >= seq.request.sampling.max_new_tokens else None
            )
            if reason is not None:
                self.slots[row] = None
                finished.append(Finished(seq.tag, seq.index, seq.sample(reason)))
        return finished

    # -------------------------------------------------------------- the KV window

    def _rows(self) -> int:
        """Rows a decode step runs: up to the highest live slot."""
        return max((i for i, s in enumerate(self.slots) if s is not None), default=-1) + 1

    def _compact_rows(self) -> None:
        """Move live rows into the lowest slots when half the decoded rows are free."""
        rows, live = self._rows(), self.live()
        if live == 0 or rows <= max(8, 2 * live):
            return
        for dst in range(live):
            if self.slots[dst] is not None:
                continue
            src = self._rows() - 1
            self.kv.move_row(src, dst, self.T)
            self.slots[dst], self.slots[src] = self.slots[src], None

    def _make_room(self, left: int, right: int) -> None:
        """Columns so that ``left`` fit before ``T`` and every live row, and ``right`` more
        after it, can still be written: shift the window left past unused columns, or right,
        and grow it when that is not enough."""
        live = [s for s in self.slots if s is not None]
        need_right = max([right] + [s.request.sampling.max_new_tokens - len(s.tokens) + 1 for s in live])
        shift = min([self.T - left] + [s.start for s in live])  # the leftmost column still needed
        if self.kv is None:
            self.kv = _SlotKV(self.engine.model.config, self.capacity)
        self.kv.shift(shift, self.T, self._rows())
        for s in live:
            s.start -= shift
        self.T -= shift
        if self.T + need_right > self.kv.columns:
            self.kv.grow(max(self.T + need_right, int(self.kv.columns * 1.5)))


class _SlotKV:
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
