"""The generator's side of the weight hand-off, without MPI: when it posts receives, and what it refuses.

The generator posts the receives for the next version as soon as it holds the current one, so
the trainer's sends find them waiting; it must never post past the last version the trainers
push (a posted gloo receive cannot be taken back when the job ends).
"""

from __future__ import annotations

import collections
import copy

import pytest
import torch

from launch import config
from roles.generator import GeneratorActor
from roles.protocol import Schedule, WeightsPushed
from runtime import Envelope


class _Table:
    rank, role, index = 1, "generator", 0

    def size(self, role):
        return 1


class _Mailbox:
    def __init__(self):
        self.role_table = _Table()
        self.inbox: collections.deque = collections.deque()

    def poll(self):
        return self.inbox.popleft() if self.inbox else None


class _Receiver:
    """Records the protocol: start(v) posts, finish() hands over; one version at a time."""

    def __init__(self):
        self.version = None
        self.started: list[int] = []
        self.finished: list[int] = []

    def start(self, version):
        assert self.version is None, f"start({version}) while {self.version} is posted"
        self.version = version
        self.started.append(version)

    def ready(self):
        return self.version is not None

    def finish(self):
        self.finished.append(self.version)
        self.version = None
        return [("w", torch.zeros(1))]


class _Engine:
    def __init__(self):
        self.loads = 0

    def load_weights(self, named, version=None):
        list(named)
        self.loads += 1


def _generator(base_config, steps: int):
    raw = copy.deepcopy(base_config)
    raw["run"]["steps"] = steps
    receiver, engine = _Receiver(), _Engine()
    cfg = config.parse(raw)
    gen = GeneratorActor(
        _Mailbox(), cfg.rollout, schedule=cfg.schedule(), routes=cfg.routes(), engine=engine, receiver=receiver
    )
    return gen, receiver, engine


def _announce(gen, version):
    gen.on_weights(Envelope(("trainer", 0), WeightsPushed(version=version)))


def test_last_pushed_version_is_one_per_step_but_the_last():
    assert [Schedule(s, 0).last_pushed_version for s in (0, 1, 2, 5)] == [0, 0, 1, 4]


def test_receives_are_posted_ahead_and_never_past_the_last_version(base_config):
    gen, receiver, engine = _generator(base_config, steps=3)  # trainers push versions 1 and 2
    assert receiver.started == [1]  # posted at construction, before any announcement
    _announce(gen, 1)
    gen._sync_weights(min_version=1)
    assert (gen.version, receiver.started, engine.loads) == (1, [1, 2], 1)
    _announce(gen, 2)
    gen._sync_weights(min_version=2)
    assert (gen.version, receiver.started, receiver.finished) == (2, [1, 2], [1, 2])
    assert receiver.version is None  # nothing left posted for a version that never comes


def test_one_step_posts_nothing(base_config):
    _, receiver, _ = _generator(base_config, steps=1)
    assert receiver.started == []


def test_stop_takes_in_every_pushed_version_without_loading(base_config):
    gen, receiver, engine = _generator(base_config, steps=3)
    gen.mailbox.inbox.extend([Envelope(("trainer", 0), WeightsPushed(version=v)) for v in (1, 2)])
    gen.final_version = 2
    gen.on_stop("finished")
    assert (gen.version, receiver.finished, engine.loads) == (2, [1, 2], 0)
    assert receiver.version is None


@pytest.mark.parametrize(
    "versions, error",
    [
        ((2,), "announced weights version 2, expected 1"),
        ((1, 1), "announced weights version 1, expected 2"),
        ((1, 2, 3), "announced weights version 3, but a run of 3 steps pushes versions up to 2"),
    ],
)
def test_an_announcement_out_of_order_or_past_the_last_version_is_refused(base_config, versions, error):
    gen, _, _ = _generator(base_config, steps=3)
    with pytest.raises(RuntimeError, match=error):
        for v in versions:
            _announce(gen, v)


def test_tail_wait_share_is_the_rows_idle_share_of_the_batch():
    from roles.generator import tail_wait_share

    assert tail_wait_share([4, 4, 4]) == 0.0
    assert tail_wait_share([1, 3]) == pytest.approx((2 + 0) / (2 * 3))
    assert tail_wait_share([10] + [1] * 9) == pytest.approx(9 * 9 / (10 * 10))
    assert tail_wait_share([]) == 0.0 and tail_wait_share([0, 0]) == 0.0


def test_waiting_for_the_trainers_announcement_ticks_the_loop_clock(base_config, monkeypatch):
    """Prompts come one version early, so a generator waits a whole training step inside
    _sync_weights: that wait must tick like the actor loop's idle turns, or a training step
    over run.stall_timeout_s would read as a stalled generator."""
    from runtime.loop_clock import LOOP

    gen, _, _ = _generator(base_config, steps=3)
    ticks = []

    def nothing_yet():
        ticks.append(LOOP.last)
        if len(ticks) == 3:
            gen.running = False  # as a Stop would
        return 0

    monkeypatch.setattr(gen, "handle_pending", nothing_yet)
    monkeypatch.setattr(LOOP, "last", None)
    gen._sync_weights(min_version=1)
    assert len(ticks) == 3 and None not in ticks and ticks == sorted(ticks)
