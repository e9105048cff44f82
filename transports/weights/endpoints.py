"""The two ends of a weight sync, over any point-to-point channel (torch.distributed or MPI).

Trainer: ``WeightSender.push(shards, version)`` copies the local shards into flat send buffers
(so training may change the parameters as soon as it returns; ``copy=False`` skips the copy
for whole-row pieces), posts every send and returns; the next ``push`` (or ``wait``) first
waits for those sends. Generator: ``WeightReceiver.start``
posts every receive into staging buffers and returns; the engine keeps generating; ``ready()``
says, without blocking, whether everything is in; ``finish()`` waits for the rest and returns
``[(name, tensor)]`` for the engine's ``load_weights``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .plan import (
    Bucket,
    LocalShard,
    TransferPlan,
    box_shape,
    byte_view,
    dest_index,
    layout,
    pack,
    shard_slice,
    to_dtype,
    typed_view,
    unpack,
)


class Channel(Protocol):
    """Point-to-point transport of flat uint8 tensors. Ranks are the plan's ranks."""

    rank: int

    def isend(self, buf: torch.Tensor, dst: int, tag: int) -> Any: ...
    def irecv(self, buf: torch.Tensor, src: int, tag: int) -> Any: ...
    def wait(self, handle: Any) -> None: ...
    def test(self, handle: Any) -> bool: ...
    def pollable(self, device: torch.device) -> bool:
        """False when ``test`` cannot see completion (gloo): the receiver then waits in a thread."""
        ...

    def posts_block(self, device: torch.device) -> bool:
        """True when posting a send moves its bytes before it returns (gloo on CPU writes to
        the socket as the send is posted): the sender then posts from a thread of its own."""
        ...

    def check_device(self, device: torch.device) -> None:
        """Raise a clear error when this channel cannot move buffers on ``device``."""
        ...


@dataclass
class SyncStats:
    version: int = -1
    nbytes: int = 0  # payload bytes this rank sent (each destination counted) or received
    messages: int = 0  # point-to-point operations posted
    post_s: float = 0.0  # time inside push()/start(): packing and posting
    transfer_s: float = 0.0  # push()/start() until the last operation was seen complete
    stall_s: float = 0.0  # time the caller was blocked: in finish() (receiver), in wait() (sender)


def wait_for_last_of_each(channel: Channel, handles: list[Any], peers: list[int]) -> set[int]:
    """Wait on each peer's last operation; returns the indices waited on.

    Operations between two ranks complete in the order they were posted, so once a peer's last
    one is done the earlier ones are too and waiting on them returns at once: the caller wakes
    about once per peer instead of once per message (on a busy CPU each wake-up is a context
    switch, which shows at ~150 messages a sync). A gloo work may be waited on only once (a
    second wait blocks for good), hence the returned set.
    """
    last = sorted({p: i for i, p in enumerate(peers)}.values(), reverse=True)
    for i in last:
        channel.wait(handles[i])
    return set(last)


def wait_in_arrival_order(channel: Channel, handles: list[Any], peers: list[int]) -> None:
    """Wait on every operation, each once, each peer's last first."""
    waited = wait_for_last_of_each(channel, handles, peers)
    for i, h in enumerate(handles):
        if i not in waited:
            channel.wait(h)


# A push of at least this many bytes (to all its generators together) is posted from a thread
# where posting blocks; below it, inline (see WeightSender.__init__).
THREADED_POST_BYTES = 32 << 20


class WeightSender:
    """Trainer end: one push in flight at a time.

    ``copy=True``: ``push`` copies every piece into flat send buffers first (one copy of the
    local shards), so training may change the parameters as soon as it returns. ``copy=False``:
    pieces that are whole rows of a local shard are sent straight from the parameter's memory
    and only small pieces are packed; the caller must ``wait()`` before changing the parameters
    (``guard(optimizer)`` makes ``optimizer.step()`` do it), so the transfer overlaps the next
    forward and backward and no copy of the shards is kept. On CPU, where a memory copy costs
    about as much as a loopback transfer, this is the fast mode.
    """

    def __init__(self, plan: TransferPlan, channel: Channel, *, copy: bool = True):
        self.plan, self.channel, self.copy = plan, channel, copy
        self.rank = channel.rank
        if self.rank not in plan.trainers:
            raise ValueError(f"rank {self.rank} is not a trainer of this plan {plan.trainers}")
        self._buckets = plan.sends(self.rank)
        # Each trainer walks the generators from a different starting point, so that at any
        # moment the trainers feed different generators instead of queueing on the same one.
        turn = plan.trainers.index(self.rank)
        self._dsts = [bk.dsts[turn % len(bk.dsts) :] + bk.dsts[: turn % len(bk.dsts)] for bk in self._buckets]
        # The dtype each parameter is packed as (a narrower generator's: cast while packing).
        self._wire = {p.name: to_dtype(p.wire_dtype) for p in plan.params}
        self._inplace = [not copy and self._whole_rows(bk) for bk in self._buckets]
        self._offs, self._total = layout(0 if inp else bk.nbytes for bk, inp in zip(self._buckets, self._inplace))
        self._arena: torch.Tensor | None = None  # allocated at the first push, on the shards' device
        self._handles: list[Any] = []
        self._handle_dsts = [d for dsts in self._dsts for d in dsts]  # each send's peer, in order
        # Where posting blocks (gloo on CPU) and a push is large, it posts from a thread of its
        # own, so the trainer goes on at once: with 32 generators (84 MB a push) the posting
        # alone took 0.19 s of a 1.0 s step (bench/scale.py). A small push is posted inline:
        # for the demo's 2.6 MB the thread cost more than it saved (async step 0.154 -> 0.176 s
        # on 2 cores, bench/async_vs_sync.py). Its error is raised by wait() on the caller's thread.
        self._threaded_posts = plan.nbytes_from(self.rank) >= THREADED_POST_BYTES
        self._poster: threading.Thread | None = None
        self._post_error: BaseException | None = None
        self._t0 = 0.0
        self.stats = SyncStats()

    def push(self, shards: Iterable[LocalShard], version: int) -> None:
        self.wait()
        by_name = {s[0]: LocalShard(*s) for s in shards}
        device = self._check(by_name)
        if self._arena is None or self._arena.device != device:
            self.channel.check_device(device)
            self._arena = torch.empty(self._total, dtype=torch.uint8, device=device)
        self._t0 = time.perf_counter()
        self.stats = SyncStats(version, self.plan.nbytes_from(self.rank), len(self._handle_dsts))
        threaded = self._threaded_posts and self.channel.posts_block(device)
        packed = []  # (bucket index, its flat bytes), for the posting thread
        for i, (bucket, off, inplace) in enumerate(zip(self._buckets, self._offs, self._inplace)):
            if inplace:
                pc = bucket.pieces[0]
                s = by_name[pc.name]
                flat = byte_view(shard_slice(s.tensor, s.offset, pc.box).contiguous())
            else:  # packed on the caller's thread: once push() returns, its copies are taken
                flat = self._arena[off : off + bucket.nbytes]
                pack(bucket, flat, by_name, self._wire)
            if threaded:
                packed.append((i, flat))
            else:  # pipelined: this bucket is on the wire while the next one is packed
                self._post_one(i, flat)
        if threaded:
            self._post_error = None
            self._poster = threading.Thread(target=self._post_all, args=(packed,), name="weight-send", daemon=True)
            self._poster.start()
        else:
            self.stats.post_s = time.perf_counter() - self._t0

    def _post_one(self, index: int, flat: torch.Tensor) -> None:
        bucket = self._buckets[index]
        self._handles += [self.channel.isend(flat, dst, bucket.tag) for dst in self._dsts[index]]

    def _post_all(self, packed: list[tuple[int, torch.Tensor]]) -> None:
        try:
            for index, flat in packed:
                self._post_one(index, flat)
            self.stats.post_s = time.perf_counter() - self._t0
        except BaseException as e:  # re-raised by wait() on the caller's thread
            self._post_error = e

    def progress(self) -> bool:
        """Poll the sends without blocking (drives MPI progress); True when all are done.

        gloo reports a send complete only from inside ``wait()``: there it stays False.
        """
        if self._poster is not None and self._poster.is_alive():
            return False
        return all(self.channel.test(h) for h in self._handles)

    def wait(self) -> float:
        """Block until the last push is on its way out; returns the seconds blocked."""
        t = time.perf_counter()
        if self._poster is not None:
            self._poster.join()
            self._poster = None
            if self._post_error is not None:
                error, self._post_error = self._post_error, None
                raise RuntimeError(
                    f"posting the weight sends of version {self.stats.version} failed: {error}"
                ) from error
        if not self._handles:
            return 0.0
        wait_in_arrival_order(self.channel, self._handles, self._handle_dsts)
        self._handles = []
        now = time.perf_counter()
        self.stats.transfer_s, self.stats.stall_s = now - self._t0, now - t
        return self.stats.stall_s

    def guard(self, optimizer: torch.optim.Optimizer):
        """Make ``optimizer.step()`` first wait for the sends in flight (what ``copy=False`` needs).

        Returns the hook handle (``.remove()`` undoes it).
        """

        def wait_for_sends(*_):
            self.wait()

        return optimizer.register_step_pre_hook(wait_for_sends)

    def _whole_rows(self, bucket: Bucket) -> bool:
        """One piece covering whole rows of the parameter, sent in its own dtype: its bytes are
        contiguous in the local shard (a cast one must be packed)."""
        if len(bucket.pieces) != 1:
            return False
        spec = self.plan.spec(bucket.pieces[0].name)
        return box_shape(bucket.pieces[0].box)[1:] == spec.shape[1:] and spec.wire_dtype == spec.dtype

    def _check(self, by_name: dict[str, LocalShard]) -> torch.device:
        devices = set()
        for p in self.plan.params:
            s = by_name.get(p.name)
            if s is None:
                raise KeyError(f"push: no local shard for parameter {p.name}")
            want = self.plan.held[self.rank][p.name]
            got = (s.offset, s.offset + s.tensor.shape[0])
            if tuple(s.global_shape) != p.shape or s.tensor.dtype != to_dtype(p.dtype) or got != want:
                raise ValueError(
                    f"push: {p.name} is rows {got} of {tuple(s.global_shape)} {s.tensor.dtype}, "
                    f"the plan expects rows {want} of {p.shape} {p.dtype}"
                )
            devices.add(s.tensor.device)
        if len(devices) > 1:
            raise ValueError(f"push: local shards live on several devices {devices}")
        return devices.pop() if devices else torch.device("cpu")


class WeightReceiver:
    """Generator end. Staging memory (one copy of the weights it needs) is allocated once.

    The tensors ``finish()`` returns are views of that staging memory: the engine must copy them
    (``load_weights`` does) before the next ``start()``.
    """

    def __init__(self, plan: TransferPlan, channel: Channel, device: str | torch.device = "cpu"):
        self.plan, self.channel = plan, channel
        self.rank = channel.rank
        if self.rank not in plan.generators:
            raise ValueError(f"rank {self.rank} is not a generator of this plan {plan.generators}")
        self.device = torch.device(device)
        channel.check_device(self.device)
        self._need = plan.needs[self.rank]
        specs = plan.params
        shapes = [box_shape(self._need[p.name]) for p in specs]
        sizes = [torch.Size(s).numel() * p.itemsize for p, s in zip(specs, shapes)]
        offs, total = layout(sizes)
        self._arena = torch.empty(total, dtype=torch.uint8, device=self.device)
        self._staging = {
            p.name: typed_view(self._arena, o, to_dtype(p.wire_dtype), s) for p, o, s in zip(specs, offs, shapes)
        }
        # Single-piece buckets land in place (a piece is whole rows of the staging tensor);
        # multi-piece ones go through a flat buffer and are unpacked on arrival.
        buckets = plan.recvs(self.rank)
        packed = [bk for bk in buckets if len(bk.pieces) > 1]
        poffs, ptotal = layout(bk.nbytes for bk in packed)
        self._pack_arena = torch.empty(ptotal, dtype=torch.uint8, device=self.device)
        pbuf = {id(bk): self._pack_arena[o : o + bk.nbytes] for bk, o in zip(packed, poffs)}
        self._targets: list[tuple[Bucket, torch.Tensor, bool]] = []
        for bk in buckets:
            if id(bk) in pbuf:
                self._targets.append((bk, pbuf[id(bk)], True))
            else:
                pc = bk.pieces[0]
                view = self._staging[pc.name][dest_index(pc, self._need[pc.name])]
                self._targets.append((bk, byte_view(view), False))
        self._srcs = [bk.src for bk, _, _ in self._targets]  # each receive's peer, in order
        self._nbytes = plan.nbytes_to(self.rank)
        self._pollable = channel.pollable(self.device)
        self._handles: list[Any] = []
        self._done = 0  # targets complete and unpacked, in order
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._all_in = threading.Event()
        self._t0 = 0.0
        self._t_in = 0.0
        self.version: int | None = None  # the version being received, None when idle
        self.stats = SyncStats()

    @property
    def staging_bytes(self) -> int:
        return self._arena.numel() + self._pack_arena.numel()

    def start(self, version: int) -> None:
        """Post every receive for ``version`` and return at once.

        Best called before the trainers push (as soon as the previous version is loaded): a
        send that finds its receive posted goes straight onto the wire, where gloo would
        otherwise add a round trip per message.
        """
        if self.version is not None:
            raise RuntimeError(
                f"start({version}) while version {self.version} is still being received: call finish() first"
            )
        t0 = time.perf_counter()
        self.version, self._t0, self._t_in, self._done, self._error = version, t0, 0.0, 0, None
        self._all_in.clear()
        self._handles = [self.channel.irecv(buf, bk.src, bk.tag) for bk, buf, _ in self._targets]
        if not self._pollable:  # gloo: completion is only visible through a blocking wait
            self._thread = threading.Thread(target=self._wait_all, name="weight-recv", daemon=True)
            self._thread.start()
        self.stats = SyncStats(version, self._nbytes, len(self._handles), post_s=time.perf_counter() - t0)

    def ready(self) -> bool:
        """True when every byte is in and unpacked; never blocks (MPI: also drives progress)."""
        if self.version is None:
            return False
        if self._thread is not None:
            return self._all_in.is_set()
        while self._done < len(self._handles) and self.channel.test(self._handles[self._done]):
            self._unpack_next()
        return self._done == len(self._handles)

    def finish(self) -> list[tuple[str, torch.Tensor]]:
        """Wait for the rest of ``version``; returns (name, tensor) in the trainers' order."""
        if self.version is None:
            raise RuntimeError("finish() without start()")
        t = time.perf_counter()
        try:
            if self._thread is not None:
                self._thread.join()
                self._thread = None
                if self._error is not None:
                    raise RuntimeError(
                        f"weight receive of version {self.version} failed: {self._error}"
                    ) from self._error
            else:
                while self._done < len(self._handles):
                    self.channel.wait(self._handles[self._done])
                    self._unpack_next()
        finally:
            self._handles, self.version = [], None
        now = time.perf_counter()
        self.stats.stall_s = now - t
        self.stats.transfer_s = (self._t_in or now) - self._t0
        return [(p.name, self._staging[p.name]) for p in self.plan.params]

    def _unpack_next(self) -> None:
        bucket, buf, packed = self._targets[self._done]
        if packed:
            unpack(bucket, buf, self._staging, self._need)
        self._done += 1
        if self._done == len(self._handles):
            self._t_in = time.perf_counter()

    def _wait_all(self) -> None:
        try:
            waited = wait_for_last_of_each(self.channel, self._handles, self._srcs)
            while self._done < len(self._handles):
                if self._done not in waited:
                    self.channel.wait(self._handles[self._done])
                self._unpack_next()
        except BaseException as e:  # re-raised by finish() on the caller's thread
            self._error = e
        finally:
            self._all_in.set()
