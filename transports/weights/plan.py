"""The transfer plan: which rows of which parameter go from which trainer to which generator.

Inputs are two layouts. Trainers hold dim-0 row ranges of each parameter (FSDP2 shards; one
unsharded trainer holds every row). Generators need a box of each parameter: all of it, or a
tensor-parallel slice. Every rank computes the plan from the same metadata with the same pure
function, so trainers and generators agree on it without exchanging it.

A piece is the intersection of a trainer's rows with a generator's box. Pieces travel in
buckets: flat buffers of at most ``bucket_bytes``, each sent point-to-point from one trainer
to a set of generators. A piece of ``pack_below`` bytes or more gets buckets of its own (split
by rows), which the generator receives straight into its staging tensor because a piece is
always whole rows of the box it lands in; smaller pieces bound for the same generators share a
bucket and are unpacked on arrival. A bucket bound for several generators (every full-weight
generator wants the same bytes) is packed once and sent to each: one message per generator.

The plan knows no model family: which dims tensor parallelism splits comes in as data
(``Need.split_dims``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

Box = tuple[tuple[int, int], ...]  # (start, stop) per dim, in global coordinates

ALIGN = 64  # byte alignment of pieces inside flat buffers, so dtype views of them are legal
DEFAULT_BUCKET_BYTES = 64 << 20
# Pieces below this many bytes are packed together; larger ones travel alone, without a copy
# on the generator. Packing trades copies for messages: on CPU a copy costs about as much as
# sending the bytes (gloo over loopback), on GPU a copy is nearly free next to a message.
DEFAULT_PACK_BELOW = {"cpu": 64 << 10, "cuda": 4 << 20}


def default_pack_below(device: torch.device | str) -> int:
    return DEFAULT_PACK_BELOW.get(torch.device(device).type, 1 << 20)


class LocalShard(NamedTuple):
    """The dim-0 rows a trainer rank holds of one parameter."""

    name: str  # Hugging Face parameter name
    tensor: torch.Tensor  # the local rows, shape (stop - offset, *global_shape[1:])
    global_shape: tuple[int, ...]  # shape of the whole parameter
    offset: int  # first global row held


@dataclass(frozen=True)
class ShardMeta:
    """What other ranks need to know about a LocalShard: no data."""

    name: str
    shape: tuple[int, ...]  # global shape
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "bfloat16"
    start: int  # first row held
    stop: int  # one past the last row held

    @staticmethod
    def of(shard: LocalShard) -> ShardMeta:
        name, t, shape, offset = shard
        shape = tuple(int(s) for s in shape)
        if len(shape) == 0:
            raise ValueError(f"{name}: 0-d parameters cannot be sharded by rows")
        if tuple(t.shape[1:]) != shape[1:] or offset < 0 or offset + t.shape[0] > shape[0]:
            raise ValueError(f"{name}: local rows {tuple(t.shape)} at row {offset} do not fit {shape}")
        return ShardMeta(name, shape, dtype_name(t.dtype), int(offset), int(offset + t.shape[0]))


@dataclass(frozen=True)
class Need:
    """What one generator wants: full weights (tp_size 1) or its tensor-parallel slice.

    ``split_dims`` holds the split as data: ``(parameter name, dim)`` for each parameter that
    tensor parallelism cuts (the roles side derives it from the model family); a parameter not
    listed is replicated. A tuple, so a Need stays hashable; it travels by pickle through the
    plan exchange's allgather.
    """

    tp_rank: int = 0
    tp_size: int = 1
    split_dims: tuple[tuple[str, int], ...] = ()
    # The dtype the generator holds its weights in ("bfloat16"); None: the trainers'. When it
    # is narrower than a parameter's, the trainers cast as they pack and send the narrower
    # bytes: the generator receives exactly ``weights.to(dtype)`` in half the bytes (fp32->bf16).
    dtype: str | None = None
    _dims: dict[str, int] = field(init=False, repr=False, compare=False)  # split_dims by name

    def __post_init__(self):
        if not 0 <= self.tp_rank < self.tp_size:
            raise ValueError(f"tp_rank {self.tp_rank} is not a rank of tp_size {self.tp_size}")
        # Without split dims every tensor-parallel rank would silently get the whole model.
        if self.tp_size > 1 and not self.split_dims:
            raise ValueError(f"tp_size {self.tp_size} needs split_dims: which dim of which parameter is split")
        object.__setattr__(self, "split_dims", tuple((str(n), int(d)) for n, d in self.split_dims))
        object.__setattr__(self, "_dims", dict(self.split_dims))
        if self.dtype is not None:
            to_dtype(self.dtype)  # an unknown name fails here, on the generator, not in the plan

    def __reduce__(self):  # the lookup table is rebuilt on arrival, not sent
        return Need, (self.tp_rank, self.tp_size, self.split_dims, self.dtype)

    def box(self, name: str, shape: tuple[int, ...]) -> Box:
        full = tuple((0, s) for s in shape)
        if self.tp_size == 1:
            return full
        dim = self._dims.get(name)
        if dim is None:
            return full
        if not 0 <= dim < len(shape):
            raise ValueError(f"{name}: split dim {dim} of a {len(shape)}-d parameter")
        a, b = chunk_range(shape[dim], self.tp_size, self.tp_rank)
        return full[:dim] + ((a, b),) + full[dim + 1 :]


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # the trainers' dtype
    wire: str | None = None  # the dtype it travels and is staged in (None: ``dtype``)

    @property
    def wire_dtype(self) -> str:
        return self.wire or self.dtype

    @property
    def itemsize(self) -> int:
        """Bytes per element on the wire and in the generator's staging memory."""
        return torch.empty((), dtype=to_dtype(self.wire_dtype)).element_size()


def wire_dtype(trainer: str, generator: str | None) -> str:
    """What a parameter travels as: the generator's dtype when narrower, else the trainers'
    (a wider generator casts up on its own side; the bytes are the same either way)."""
    if generator is None or generator == trainer:
        return trainer
    size = {name: torch.empty((), dtype=to_dtype(name)).element_size() for name in (trainer, generator)}
    return generator if size[generator] < size[trainer] else trainer


@dataclass(frozen=True)
class Piece:
    name: str
    box: Box  # global coordinates; dims >= 1 always equal the generator's need box
    offset: int  # byte offset inside its bucket
    nbytes: int


@dataclass(frozen=True)
class Bucket:
    """One flat buffer of pieces, sent point-to-point from one trainer to a set of generators."""

    src: int  # trainer rank (in the transport's rank space)
    dsts: tuple[int, ...]  # generator ranks that receive the same bytes
    tag: int  # index in src's send order; also the point-to-point tag
    pieces: tuple[Piece, ...]
    nbytes: int  # size of the flat buffer (pieces plus alignment padding)


@dataclass(frozen=True)
class TransferPlan:
    params: tuple[ParamSpec, ...]  # every parameter, in the trainers' order
    trainers: tuple[int, ...]  # sorted ranks
    generators: tuple[int, ...]  # sorted ranks
    held: dict[int, dict[str, tuple[int, int]]]  # trainer rank -> name -> rows it holds
    needs: dict[int, dict[str, Box]]  # generator rank -> parameter name -> box it wants
    buckets: tuple[Bucket, ...]  # sorted by (tag, src)
    bucket_bytes: int
    pack_below: int
    _by_name: dict[str, ParamSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        self._by_name.update({p.name: p for p in self.params})

    def spec(self, name: str) -> ParamSpec:
        return self._by_name[name]

    def sends(self, rank: int) -> list[Bucket]:
        """Buckets ``rank`` sends, in send order."""
        return [bk for bk in self.buckets if bk.src == rank]

    def recvs(self, rank: int) -> list[Bucket]:
        """Buckets ``rank`` receives, in (tag, src) order: the trainers interleave."""
        return [bk for bk in self.buckets if rank in bk.dsts]

    def nbytes_to(self, rank: int) -> int:
        return sum(p.nbytes for bk in self.recvs(rank) for p in bk.pieces)

    def nbytes_from(self, rank: int) -> int:
        """Payload bytes ``rank`` puts on the wire (a bucket to k generators counts k times)."""
        return sum(p.nbytes * len(bk.dsts) for bk in self.sends(rank) for p in bk.pieces)


def build_plan(
    shards: dict[int, list[ShardMeta]],
    needs: dict[int, Need],
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    pack_below: int = DEFAULT_PACK_BELOW["cpu"],
    pack_below_per_peer: bool = False,
) -> TransferPlan:
    """The plan for trainers ``shards`` (rank -> rows held) and generators ``needs`` (rank -> Need).

    Rows held by several trainers (replicated parameters) are split evenly between them, so the
    plan works for one unsharded trainer, FSDP2 shards, and anything in between.

    ``pack_below_per_peer``: a piece is packed below ``pack_below`` times the number of
    generators it goes to (the transport's defaults are set so; a ``pack_below`` the caller
    gives is taken as it is). A piece sent alone costs its trainer one message per generator,
    packed it costs one copy, so the more generators, the larger the piece worth packing: at
    32 generators on 2 cores, the demo model's 29 messages of 64-128 KiB per generator
    against one made the last generator's weights land 0.09 s against 0.06 s after the push
    (bench/scale.py, sync mode); at 2 generators a flat 1 MiB against 64 KiB cost 0.80
    against 0.85 of raw bandwidth (bench/weight_sync.py, 25M and 100M, 2 runs each: medians).
    """
    if not shards or not needs:
        raise ValueError("a transfer plan needs at least one trainer and one generator")
    if set(shards) & set(needs):
        raise ValueError(f"ranks {sorted(set(shards) & set(needs))} are both trainer and generator")
    if bucket_bytes < ALIGN:
        raise ValueError(f"bucket_bytes must be at least {ALIGN}, got {bucket_bytes}")
    pack_below = min(pack_below, bucket_bytes)
    trainers, generators = tuple(sorted(shards)), tuple(sorted(needs))
    wanted = {needs[g].dtype for g in generators}
    if len(wanted) > 1:  # one bucket goes to several generators: they must want the same bytes
        raise ValueError(f"the generators want their weights in different dtypes: {sorted(map(str, wanted))}")
    (want,) = wanted
    params = tuple(dataclasses.replace(p, wire=wire_dtype(p.dtype, want)) for p in _params(shards))

    held = {t: {m.name: (m.start, m.stop) for m in shards[t]} for t in trainers}
    need_boxes = {g: {p.name: needs[g].box(p.name, p.shape) for p in params} for g in generators}
    owned = {p.name: _owners(p, {t: held[t][p.name] for t in trainers}) for p in params}

    buckets: list[Bucket] = []
    for t in trainers:
        items = []  # (name, box, dsts) in parameter order
        for p in params:
            for a, b in owned[p.name].get(t, ()):
                by_box: dict[Box, list[int]] = {}
                for g in generators:
                    nb = need_boxes[g][p.name]
                    lo, hi = max(a, nb[0][0]), min(b, nb[0][1])
                    if lo < hi and all(x < y for x, y in nb[1:]):
                        by_box.setdefault(((lo, hi),) + nb[1:], []).append(g)
                items += [(p, box, tuple(ds)) for box, ds in by_box.items()]
        buckets += _fill_buckets(t, items, bucket_bytes, pack_below, pack_below_per_peer)
    buckets.sort(key=lambda bk: (bk.tag, bk.src))
    return TransferPlan(params, trainers, generators, held, need_boxes, tuple(buckets), bucket_bytes, pack_below)


def _params(shards: dict[int, list[ShardMeta]]) -> tuple[ParamSpec, ...]:
    """The parameter list every trainer agrees on (same names, shapes, dtypes, order)."""
    ref_rank = min(shards)
    ref = [ParamSpec(m.name, tuple(m.shape), m.dtype) for m in shards[ref_rank]]
    for t, metas in shards.items():
        mine = [ParamSpec(m.name, tuple(m.shape), m.dtype) for m in metas]
        if mine != ref:
            diff = next((f"{a} vs {b}" for a, b in zip(ref, mine) if a != b), f"{len(ref)} vs {len(mine)} parameters")
            raise ValueError(f"trainer {t} disagrees with trainer {ref_rank} on the parameters: {diff}")
    if len({p.name for p in ref}) != len(ref):
        raise ValueError("duplicate parameter names in the trainer layout")
    return tuple(ref)


def _owners(p: ParamSpec, held: dict[int, tuple[int, int]]) -> dict[int, list[tuple[int, int]]]:
    """Disjoint row ranges each trainer sends for parameter ``p`` (``held``: trainer -> rows)."""
    cuts = sorted({0, p.shape[0], *(x for ab in held.values() for x in ab)})
    out: dict[int, list[tuple[int, int]]] = {}
    for a, b in zip(cuts, cuts[1:]):
        if a >= b:
            continue
        holders = [t for t in sorted(held) if held[t][0] <= a and b <= held[t][1]]
        if not holders:
            raise ValueError(f"{p.name}: rows [{a}, {b}) are held by no trainer")
        for i, t in enumerate(holders):  # replicated rows: split them evenly
            lo, hi = chunk_range(b - a, len(holders), i)
            if lo < hi:
                rs = out.setdefault(t, [])
                if rs and rs[-1][1] == a + lo:
                    rs[-1] = (rs[-1][0], a + hi)
                else:
                    rs.append((a + lo, a + hi))
    return out


def _fill_buckets(src: int, items, bucket_bytes: int, pack_below: int, per_peer: bool) -> list[Bucket]:
    out: list[Bucket] = []
    open_: dict[tuple[int, ...], list[Piece]] = {}  # dsts -> pieces of the bucket being filled
    size: dict[tuple[int, ...], int] = {}

    def emit(dsts, pieces, nbytes):
        out.append(Bucket(src, dsts, len(out), tuple(pieces), nbytes))

    for p, box, dsts in items:
        row_bytes = p.itemsize * math.prod(b - a for a, b in box[1:])
        rows = box[0][1] - box[0][0]
        nbytes = rows * row_bytes
        if nbytes == 0:
            continue
        threshold = min(pack_below * len(dsts), bucket_bytes) if per_peer else pack_below
        if nbytes >= threshold:  # own buckets, split by rows; one row may exceed bucket_bytes
            step = max(1, bucket_bytes // row_bytes)
            for a in range(box[0][0], box[0][1], step):
                b = min(a + step, box[0][1])
                emit(dsts, [Piece(p.name, ((a, b),) + box[1:], 0, (b - a) * row_bytes)], (b - a) * row_bytes)
            continue
        off = _align(size.get(dsts, 0))
        if dsts in open_ and off + nbytes > bucket_bytes:
            emit(dsts, open_.pop(dsts), size.pop(dsts))
            off = 0
        open_.setdefault(dsts, []).append(Piece(p.name, box, off, nbytes))
        size[dsts] = off + nbytes
    for dsts, pieces in open_.items():
        emit(dsts, pieces, size[dsts])
    return out


# ---- helpers shared by both transports and the tests ------------------------------------


def chunk_range(n: int, parts: int, i: int) -> tuple[int, int]:
    """Rows [start, stop) of chunk ``i`` when ``n`` rows are cut like ``torch.chunk`` (FSDP2's rule)."""
    per = -(-n // parts) if n else 0
    return min(i * per, n), min((i + 1) * per, n)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def box_shape(box: Box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def layout(buf_nbytes: Iterable[int]) -> tuple[list[int], int]:
    """Aligned offsets of consecutive regions inside one flat buffer, and its total size."""
    offs, total = [], 0
    for n in buf_nbytes:
        total = _align(total)
        offs.append(total)
        total += n
    return offs, total


def typed_view(flat: torch.Tensor, offset: int, dtype: torch.dtype, shape) -> torch.Tensor:
    """A ``dtype`` tensor of ``shape`` over bytes ``flat[offset:]`` (flat is uint8, 1-d)."""
    n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return flat[offset : offset + n].view(dtype).view(shape)


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous tensor as a 1-d uint8 tensor (shares memory)."""
    return t.reshape(-1).view(torch.uint8)


def shard_slice(tensor: torch.Tensor, row0: int, box: Box) -> torch.Tensor:
    """The part of ``tensor`` (whose first row is global row ``row0``) covered by ``box``."""
    (a, b), rest = box[0], box[1:]
    return tensor[(slice(a - row0, b - row0),) + tuple(slice(x, y) for x, y in rest)]


def pack(
    bucket: Bucket, flat: torch.Tensor, shards: dict[str, LocalShard], wire: dict[str, torch.dtype] | None = None
) -> None:
    """Copy the pieces of ``bucket`` from the trainer's local shards into ``flat`` (uint8), cast
    to their ``wire`` dtype (name -> dtype; None or a missing name: the shard's own)."""
    for pc in bucket.pieces:
        s = shards[pc.name]
        dtype = (wire or {}).get(pc.name, s.tensor.dtype)
        typed_view(flat, pc.offset, dtype, box_shape(pc.box)).copy_(shard_slice(s.tensor, s.offset, pc.box))


def unpack(bucket: Bucket, flat: torch.Tensor, staging: dict[str, torch.Tensor], need: dict[str, Box]) -> None:
    """Copy the pieces of ``bucket`` from ``flat`` into the generator's staging tensors."""
    for pc in bucket.pieces:
        dst = staging[pc.name]
        dst[dest_index(pc, need[pc.name])].copy_(typed_view(flat, pc.offset, dst.dtype, box_shape(pc.box)))


def dest_index(pc: Piece, need_box: Box) -> tuple[slice, ...]:
    """Where piece ``pc`` lands inside the staging tensor of shape ``box_shape(need_box)``."""
    return tuple(slice(a - n0, b - n0) for (a, b), (n0, _) in zip(pc.box, need_box))
