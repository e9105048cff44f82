"""The generator's streaming loop without MPI: groups out as they end, credit, versions in flight.

A scripted engine (the request-level contract, each sample's length fixed by its request's
tag) stands in for a real one, so what is tested is the generator's bookkeeping alone.
"""

from __future__ import annotations

import collections
import copy

import numpy as np
import torch

from launch import config
from roles.engines.base import Sample
from roles.engines.requests import Finished, expand_segments
from roles.generator import GeneratorActor
from roles.protocol import EVAL_GREEDY, BatchDone, PromptBatch, Rollout, WeightsPushed
from roles.stream_protocol import Credit
from runtime import Envelope


class _Table:
    rank, role, index = 1, "generator", 0

    def size(self, role):
        return 1


class _Mailbox:
    def __init__(self):
        self.role_table = _Table()
        self.inbox: collections.deque = collections.deque()
        self.sent: list = []

    def poll(self):
        return self.inbox.popleft() if self.inbox else None

    def send(self, to, msg):
        self.sent.append((to, msg))

    def of(self, kind):
        return [m for _, m in self.sent if isinstance(m, kind)]


class _Receiver:
    def __init__(self):
        self.posted = None
        self.arrived = False

    def start(self, version):
        self.posted = version

    def ready(self):
        return self.posted is not None and self.arrived

    def finish(self):
        self.posted, self.arrived = None, False
        return [("w", torch.zeros(1))]


class _ScriptedEngine:
    """Sample j of request ``tag`` is ``lengths[tag][j]`` tokens long; one token per step."""

    def __init__(self, lengths: dict[int, list[int]], capacity: int = 4):
        self.lengths, self.capacity, self.version = lengths, capacity, 0
        self.waiting: list = []
        self.running: list = []
        self.loads: list[int] = []

    def add(self, request):
        self.waiting += [[request.tag, j, self.lengths[request.tag][j], []] for j in range(request.n)]

    def step(self):
        room = self.capacity - len(self.running)
        self.running += self.waiting[:room]
        self.waiting = self.waiting[room:]
        done = []
        for r in self.running:
            r[3].append(self.version)
        for r in [r for r in self.running if len(r[3]) == r[2]]:
            self.running.remove(r)
            ids = np.arange(r[2], dtype=np.int32)
            done.append(Finished(r[0], r[1], Sample(ids, np.zeros(r[2], np.float32), "stop", np.array(r[3], np.int32))))
        return done

    def unfinished(self):
        return len(self.waiting) + len(self.running)

    def abort(self, tag):
        return 0

    def load_weights(self, named, version=None):
        list(named)
        self.version = version
        self.loads.append(version)


def _generator(base_config, lengths, steps=4, capacity=4, inflight=True):
    raw = copy.deepcopy(base_config)
    raw["run"]["steps"] = steps
    raw["rollout"] = {**raw.get("rollout", {}), "mode": "stream", "samples_per_prompt": 2, "inflight_updates": inflight}
    cfg = config.parse(raw)
    engine, receiver = _ScriptedEngine(lengths, capacity), _Receiver()
    gen = GeneratorActor(
        _Mailbox(), cfg.rollout, schedule=cfg.schedule(), routes=cfg.routes(), engine=engine, receiver=receiver
    )
    return gen, engine, receiver


def _batch(group_ids, step=0, min_version=0, purpose="train", eval_round=-1):
    return PromptBatch(
        batch_id=0,
        step=step,
        min_version=min_version,
        example_ids=list(group_ids),
        group_ids=list(group_ids),
        prompts=[np.array([1, 2], np.int32)] * len(group_ids),
        samples_per_prompt=2,
        seed=0,
        group_seeds=[7 + g for g in group_ids],
        purpose=purpose,
        eval_round=eval_round,
        temperature=0.0 if purpose != "train" else None,
    )


def _run(gen, turns):
    for _ in range(turns):
        gen.step()


def test_credit_is_granted_for_twice_the_groups_the_engine_holds_and_returned_as_groups_end(base_config):
    gen, _, _ = _generator(base_config, {0: [1, 1]}, capacity=4)
    gen.on_start()
    assert [c.groups for c in gen.mailbox.of(Credit)] == [4]  # 2 x (4 slots / 2 samples)
    gen.on_batch(Envelope(("controller", 0), _batch([0])))
    _run(gen, 2)
    assert [c.groups for c in gen.mailbox.of(Credit)] == [4, 1]


def test_a_group_is_released_before_a_longer_group_of_the_same_batch_ends(base_config):
    gen, _, _ = _generator(base_config, {0: [9, 2], 1: [3, 1]})
    gen.on_batch(Envelope(("controller", 0), _batch([0, 1])))
    _run(gen, 3)
    assert [r.group_id for r in gen.mailbox.of(Rollout)] == [1]
    _run(gen, 6)
    assert [r.group_id for r in gen.mailbox.of(Rollout)] == [1, 0]
    done = gen.mailbox.of(BatchDone)
    assert sum(d.groups for d in done) == 2 and sum(d.tokens for d in done) == 15


def test_groups_wait_for_their_min_version_and_tokens_record_an_update_in_flight(base_config):
    gen, engine, receiver = _generator(base_config, {0: [6, 6], 1: [2, 2]})
    gen.on_batch(Envelope(("controller", 0), _batch([0])))
    gen.on_batch(Envelope(("controller", 0), _batch([1], step=1, min_version=1)))
    _run(gen, 2)
    assert engine.unfinished() == 2  # group 1 needs version 1: not admitted yet
    gen.on_weights(Envelope(("trainer", 0), WeightsPushed(version=1)))
    receiver.arrived = True
    _run(gen, 4)
    out = {r.group_id: r for r in gen.mailbox.of(Rollout)}
    assert sorted(out) == [0, 1] and engine.loads == [1]
    assert out[0].policy_version == 0  # its oldest token's
    versions = expand_segments(out[0].version_segments[0], 6)
    assert versions.tolist() == [0, 0, 1, 1, 1, 1]  # loaded between decode steps, mid-sequence
    assert out[1].policy_version == 1 and out[1].version_segments is None


def test_without_inflight_updates_new_weights_wait_for_the_engine_to_empty(base_config):
    gen, engine, receiver = _generator(base_config, {0: [5, 5], 1: [2, 2]}, inflight=False)
    gen.on_batch(Envelope(("controller", 0), _batch([0])))
    gen.step()
    gen.on_weights(Envelope(("trainer", 0), WeightsPushed(version=1)))
    receiver.arrived = True
    gen.on_batch(Envelope(("controller", 0), _batch([1], step=1)))  # admissible, but held back
    _run(gen, 6)
    first = gen.mailbox.of(Rollout)[0]
    assert first.version_segments is None and first.policy_version == 0 and engine.loads == [1]
    _run(gen, 3)
    assert gen.mailbox.of(Rollout)[1].policy_version == 1


def test_an_evaluation_group_in_flight_holds_the_update_until_it_ends(base_config):
    gen, engine, receiver = _generator(base_config, {-1: [4, 4]})
    gen.on_batch(Envelope(("controller", 0), _batch([-1], purpose=EVAL_GREEDY, eval_round=0)))
    gen.step()
    gen.on_weights(Envelope(("trainer", 0), WeightsPushed(version=1)))
    receiver.arrived = True
    _run(gen, 4)
    ev = gen.mailbox.of(Rollout)[0]
    assert ev.version_segments is None and ev.policy_version == 0
    gen.step()
    assert engine.loads == [1]
