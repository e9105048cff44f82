"""Continuous batching for the torch engine: sequences join and leave between decode steps.

Each sequence holds a slot: a row of the KV cache (``roles.engines.slot_cache``) and of the
per-slot state below. A sequence joining with ``p`` tokens of prompt is prefilled on its own
(all of a request's samples share that one prefill) and copied into its row, right-aligned at
the column every live row writes next; a decode step is then one batched forward over the
rows up to the highest live one. Rows that freed their slots are moved down when half the
decoded rows are free.

The per-slot state lives in arrays, and the tokens and log-probs a slot samples in buffers, so
that a decode step costs a few vector operations besides the forward, whatever the number of
rows (a Python loop per row per token was a fifth of a small model's step). Sampling draws
each token by inverse CDF from a uniform that is a hash of (the sample's seed, the token's
index) (``roles.engines.sampling``): what a sample draws does not depend on its slot, its
neighbours or when it joined.
"""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers.cache_utils import Cache

from roles.engines.base import Sample
from roles.engines.requests import Finished, Request, check_request, sample_seed
from roles.engines.sampling import pick_rows
from roles.engines.slot_cache import SlotKV
from runtime.loop_clock import LOOP


@dataclass
class _Seq:
    """What a slot's sample is, beside its arrays: its request and its version segments."""

    tag: int
    index: int
    request: Request
    prompt: np.ndarray
    versions: list[tuple[int, int]] = field(default_factory=list)  # (first token, version)


class _SlotState:
    """Per slot: where its row starts, what it has fed and sampled, how it samples."""

    def __init__(self, capacity: int):
        self.alive = np.zeros(capacity, bool)
        self.start = np.zeros(capacity, np.int64)  # its first column in the window
        self.fed = np.zeros(capacity, np.int64)  # tokens in its KV (prompt + fed-back samples)
        self.sampled = np.zeros(capacity, np.int64)  # tokens sampled
        self.pending = np.zeros(capacity, np.int64)  # the sampled token not yet fed
        self.max_new = np.zeros(capacity, np.int64)
        self.seed = np.zeros(capacity, np.uint64)
        self.temperature = np.zeros(capacity, np.float32)
        self.top_p = np.ones(capacity, np.float32)
        self.tokens = torch.zeros((capacity, 0), dtype=torch.int32)  # what each slot sampled
        self.logprobs = torch.zeros((capacity, 0), dtype=torch.float32)

    ARRAYS = ("alive", "start", "fed", "sampled", "pending", "max_new", "seed", "temperature", "top_p")

    def widen(self, columns: int) -> None:
        """Room for ``columns`` sampled tokens a slot."""
        if columns > self.tokens.shape[1]:
            grow = columns - self.tokens.shape[1]
            self.tokens = torch.cat([self.tokens, self.tokens.new_zeros((len(self.alive), grow))], 1)
            self.logprobs = torch.cat([self.logprobs, self.logprobs.new_zeros((len(self.alive), grow))], 1)

    def move(self, src: int, dst: int) -> None:
        for name in self.ARRAYS:
            getattr(self, name)[dst] = getattr(self, name)[src]
        self.tokens[dst], self.logprobs[dst] = self.tokens[src], self.logprobs[src]
        self.alive[src] = False


class ContinuousBatcher:
    """The streaming half of ``TorchEngine`` (``roles.engines.requests.StreamingEngine``)."""

    def __init__(self, engine, capacity: int, inflight_kv: str = "keep", seed: int = 0):
        self.engine = engine  # model, device, eos_ids, pad_id, version
        self.capacity = capacity
        self.inflight_kv = inflight_kv
        self.waiting: collections.deque[tuple[Request, int]] = collections.deque()  # (request, sample index)
        self.seqs: list[_Seq | None] = [None] * capacity
        self.state = _SlotState(capacity)
        self.kv: SlotKV | None = None
        self.T = 0  # the column every live row writes next
        self._rng = np.random.default_rng(seed)  # seeds of unseeded requests
        self._eos = None

    # -------------------------------------------------------------- requests

    def add(self, request: Request) -> None:
        check_request(request)
        self.waiting.extend((request, j) for j in range(request.n))

    def abort(self, tag: int) -> int:
        dropped = sum(1 for r, _ in self.waiting if r.tag == tag)
        self.waiting = collections.deque((r, j) for r, j in self.waiting if r.tag != tag)
        for row, seq in enumerate(self.seqs):
            if seq is not None and seq.tag == tag:
                self._free(row)
                dropped += 1
        return dropped

    def unfinished(self) -> int:
        return len(self.waiting) + self.live()

    def live(self) -> int:
        return int(self.state.alive.sum())

    @torch.inference_mode()
    def step(self) -> list[Finished]:
        LOOP.tick()
        done = self._admit()
        if self.live():
            done += self._decode()
        return done

    @torch.inference_mode()
    def weights_changed(self) -> None:
        """New weights (``engine.version``) are in the model: later tokens record the version;
        with ``recompute``, the live rows' KV is rebuilt from the new weights."""
        rows = np.flatnonzero(self.state.alive)
        for row in rows:
            self.seqs[row].versions.append((int(self.state.sampled[row]), self.engine.version))
        if self.inflight_kv == "recompute" and len(rows):
            st = self.state
            fed_samples = [int(st.fed[r]) - len(self.seqs[r].prompt) for r in rows]
            sequences = [
                np.concatenate([self.seqs[r].prompt, st.tokens[r, :n].numpy()]) for r, n in zip(rows, fed_samples)
            ]
            self.kv.copy_in(self._prefill(sequences)[1], list(range(len(rows))), rows.tolist(), self.T)

    # -------------------------------------------------------------- admission

    def _take_waiting(self, room: int) -> list[tuple[Request, int]]:
        """Waiting samples to admit into ``room`` free slots, in order, a request's together:
        one prefill serves them all and the group ends (and is released) sooner. A request
        that does not fit waits for room, unless nothing runs (then it is split)."""
        batch: list[tuple[Request, int]] = []
        while self.waiting and len(batch) < room:
            request = self.waiting[0][0]
            left = sum(1 for r, _ in itertools.islice(self.waiting, 0, request.n) if r is request)
            if left > room - len(batch) and (batch or self.live()):
                break
            batch += [self.waiting.popleft() for _ in range(min(left, room - len(batch)))]
        return batch

    def _admit(self) -> list[Finished]:
        free = np.flatnonzero(~self.state.alive)
        batch = self._take_waiting(len(free))
        if not batch:
            return []
        # One prefill per distinct request: its samples share the prompt's KV.
        requests = list({id(r): r for r, _ in batch}.values())
        which = {id(r): i for i, r in enumerate(requests)}
        prompts = [np.asarray(r.prompt_ids, np.int32) for r in requests]
        logits, tmp = self._prefill(prompts)
        self._make_room(max(len(p) for p in prompts), max(r.sampling.max_new_tokens for r in requests))
        rows, src = free[: len(batch)], [which[id(r)] for r, _ in batch]
        self.kv.copy_in(tmp, src, rows.tolist(), self.T)
        st = self.state
        st.widen(max(r.sampling.max_new_tokens for r in requests))
        for row, (r, j) in zip(rows, batch):
            s = r.sampling
            p = len(r.prompt_ids)
            self.seqs[row] = _Seq(r.tag, j, r, prompts[which[id(r)]], [(0, self.engine.version)])
            st.alive[row], st.start[row], st.fed[row], st.sampled[row] = True, self.T - p, p, 0
            st.max_new[row], st.temperature[row], st.top_p[row] = s.max_new_tokens, s.temperature, s.top_p
            st.seed[row] = sample_seed(s.seed, j) if s.seed is not None else int(self._rng.integers(2**62))
        return self._sample_into(rows, logits[src])

    def _prefill(self, sequences: list[np.ndarray]) -> tuple[torch.Tensor, Cache]:
        """The sequences' last logits and their KV, left-padded in a cache of their own."""
        logits, cache, _, _ = self.engine._prefill(sequences)
        return logits, cache

    # -------------------------------------------------------------- decoding

    def _decode(self) -> list[Finished]:
        self._compact_rows()
        rows = self._rows()
        if self.T + 1 > self.kv.columns:
            self._make_room(0, 1)
        st, dev = self.state, self.engine.device
        alive = st.alive[:rows]
        # Free rows below the highest live one attend to their own column only (no NaN rows).
        starts = torch.from_numpy(np.where(alive, st.start[:rows], self.T)).to(dev)
        mask = (torch.arange(self.T + 1, device=dev)[None, :] >= starts[:, None]).long()
        tok = torch.from_numpy(np.where(alive, st.pending[:rows], self.engine.pad_id)).to(dev)
        pos = torch.from_numpy(np.where(alive, st.fed[:rows], 0)).to(dev)
        self.kv.at(self.T, rows)
        logits = self.engine.model(
            input_ids=tok[:, None],
            attention_mask=mask,
            position_ids=pos[:, None],
            past_key_values=self.kv.cache,
            use_cache=True,
        ).logits[:, -1]
        self.T += 1
        live = np.flatnonzero(alive)
        st.fed[live] += 1
        return self._sample_into(live, logits[torch.from_numpy(live).to(dev)])

    def _sample_into(self, rows: np.ndarray, logits: torch.Tensor) -> list[Finished]:
        """Sample each row's next token; record it; free and return the rows that ended."""
        st = self.state
        tok, lp = pick_rows(logits, st.temperature[rows], st.top_p[rows], st.seed[rows], st.sampled[rows])
        tok, lp = tok.cpu(), lp.cpu()
        index = torch.from_numpy(rows)
        st.tokens[index, torch.from_numpy(st.sampled[rows])] = tok.to(torch.int32)
        st.logprobs[index, torch.from_numpy(st.sampled[rows])] = lp
        tok_np = tok.numpy()
        st.pending[rows] = tok_np
        st.sampled[rows] += 1
        if self._eos is None:
            self._eos = self.engine.eos_ids.cpu().numpy()
        stopped = np.isin(tok_np, self._eos)
        ended = stopped | (st.sampled[rows] >= st.max_new[rows])
        finished = []
        for row, stop in zip(rows[ended], stopped[ended]):
            seq, n = self.seqs[row], int(st.sampled[row])
            versions = np.empty(n, np.int32)
            for first, version in seq.versions:
                versions[first:] = version
            sample = Sample(
                st.tokens[row, :n].numpy().copy(),
                st.logprobs[row, :n].numpy().copy(),
                "stop" if stop else "length",
                versions,
            )
            finished.append(Finished(seq.tag, seq.index, sample))
            self._free(row)
        return finished

    def _free(self, row: int) -> None:
        self.seqs[row] = None
        self.state.alive[row] = False

    # -------------------------------------------------------------- the KV window

    def _rows(self) -> int:
        """Rows a decode step runs: up to the highest live slot."""
        live = np.flatnonzero(self.state.alive)
        return int(live[-1]) + 1 if len(live) else 0

    def _compact_rows(self) -> None:
        """Move live rows into the lowest slots when half the decoded rows are free."""
        rows, live = self._rows(), self.live()
        if live == 0 or rows <= max(8, 2 * live):
            return
        for dst in np.flatnonzero(~self.state.alive[:live]):
            src = self._rows() - 1
            self.kv.move_row(src, int(dst), self.T)
            self.state.move(src, int(dst))
            self.seqs[dst], self.seqs[src] = self.seqs[src], None

    def _make_room(self, left: int, right: int) -> None:
        """Columns so that ``left`` fit before ``T`` and every live row, and ``right`` more
        after it, can still be written: shift the window left past unused columns, or right,
        and grow it when that is not enough."""
        st = self.state
        live = np.flatnonzero(st.alive)
        need_right = max([right] + (st.max_new[live] - st.sampled[live] + 1).tolist())
        shift = min([self.T - left] + st.start[live].tolist())  # the leftmost column still needed
        if self.kv is None:
            self.kv = SlotKV(self.engine.model.config, self.capacity)
        self.kv.shift(shift, self.T, self._rows())
        st.start[live] -= shift
        self.T -= shift
        if self.T + need_right > self.kv.columns:
            self.kv.grow(max(self.T + need_right, int(self.kv.columns * 1.5)))
