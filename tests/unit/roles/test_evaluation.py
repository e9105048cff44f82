"""Evaluation during training, without MPI: pass@k, and the controller's eval rounds.

The controller is driven by hand with the notices other ranks would send; a fake mailbox
records what it sends. The figures are checked against values computed by hand.
"""

from __future__ import annotations

import copy
import itertools
import json
import math

import numpy as np
import pytest

from launch import config
from roles.controller import ControllerActor, ControllerData
from roles.evaluation import ks_for, pass_at_k
from roles.protocol import (
    EVAL_GREEDY,
    EVAL_SAMPLED,
    TRAIN,
    BatchDone,
    EvalScored,
    FinalVersion,
    PromptBatch,
    Routes,
    Scored,
    StepDone,
)
from runtime import Envelope, Stop

# ------------------------------------------------------------------------ pass@k


def _pass_at_k_by_enumeration(n: int, c: int, k: int) -> float:
    """The definition: the share of k-subsets of the n samples holding at least one correct."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    "n,c,k",
    [(4, 0, 1), (4, 1, 1), (4, 1, 2), (4, 2, 2), (4, 3, 4), (5, 2, 3), (8, 1, 4), (8, 7, 2), (10, 3, 5), (6, 6, 1)],
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_by_enumeration(n, c, k))
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_ks_reported():
    assert ks_for(0) == [] and ks_for(1) == [1] and ks_for(4) == [1, 2, 4] and ks_for(6) == [1, 2, 4, 6]


# ------------------------------------------------------------------ the controller


class _Table:
    rank, role, index = 0, "controller", 0

    def size(self, role):
        return 1


class _Mailbox:
    def __init__(self):
        self.role_table = _Table()
        self.address = ("controller", 0)
        self.sent: list[tuple] = []

    def send(self, dest, msg):
        self.sent.append((dest, msg))

    def send_role(self, role, msg):
        self.sent.append((role, msg))

    def send_all(self, msg):
        self.sent.append(("all", msg))

    def batches(self, purpose=None):
        return [m for _, m in self.sent if isinstance(m, PromptBatch) and purpose in (None, m.purpose)]


def _controller(tmp_path, base_config, steps=4, eval_cfg=None, n_eval=3, max_staleness=1, colocated=False):
    raw = copy.deepcopy(base_config)
    raw["run"].update({"steps": steps, "out": str(tmp_path / "run"), "max_staleness": max_staleness})
    raw["eval"] = eval_cfg or {}
    cfg = config.parse(raw)
    prompts = {i: np.array([1, 2, i], dtype=np.int32) for i in range(8)}
    evals = {100 + i: np.array([1, 3, i], dtype=np.int32) for i in range(n_eval)}
    routes = cfg.routes()
    if colocated:  # the baseline's routes: the same ranks generate and train
        routes = Routes("colocated", "colocated", routes.generators, routes.rewards, routes.trainers)
    mb = _Mailbox()
    ctl = ControllerActor(
        mb,
        cfg.run,
        rollout=cfg.rollout,
        evaluation=cfg.eval,
        routes=routes,
        schedule=cfg.schedule(),
        data=ControllerData(train=prompts, eval=evals, stats={"prompts_too_long": 2}),
    )
    ctl.on_start()  # what the actor's loop does first: the first prompts go out
    return ctl, mb, cfg


def _scored_eval(ctl, batch: PromptBatch, correct_of):
    """Answer every group of an eval batch as a reward rank would; ``correct_of(eid, j)`` in {0, 1}."""
    for eid in batch.example_ids:
        correct = [float(correct_of(eid, j)) for j in range(batch.samples_per_prompt)]
        ctl.on_eval_scored(
            Envelope(
                ("reward", 0),
                EvalScored(
                    eval_round=batch.eval_round,
                    example_id=eid,
                    purpose=batch.purpose,
                    policy_version=batch.min_version,
                    scores=correct,
                    correct=correct,
                    lengths=[3] * len(correct),
                    clipped=0,
                    failures=0,
                    timeouts=0,
                    score_s=0.01,
                ),
            )
        )


def _batch_done(ctl, step, version, groups=4):
    ctl.on_batch_done(
        Envelope(
            ("generator", 0),
            BatchDone(
                batch_id=step, step=step, groups=groups, tokens=40, policy_version=version - 1,
                generate_s=0.3, wait_s=0.0, weight_load_s=0.01, weight_syncs=1,
            ),
        )
    )  # fmt: skip


def _scored(ctl, step):
    ctl.on_scored(
        Envelope(
            ("reward", 0),
            Scored(
                step=step,
                groups=4,
                score_s=0.1,
                failures=1,
                timeouts=0,
                samples=8,
                reward_sum=4.0,
                correct_sum=3.0,
                components={"arith_exact": 4.0, "correct": 3.0},
                length_sum=40,
                length_max=9,
                clipped=2,
                zero_advantage_groups=1,
            ),
        )
    )


def _step_done(ctl, step, version):
    ctl.on_step_done(
        Envelope(
            ("trainer", 0),
            StepDone(
                step=step,
                version=version,
                metrics={
                    "reward_mean": 0.5,
                    "loss": 0.1,
                    "tokens": 40.0,
                    "train_s": 0.2,
                    "pushed_version": float(version),
                },
            ),
        )
    )


def _train_step(ctl, step, version):
    """One step's notices in their usual order: the batch, its scores, then the trainer's."""
    _batch_done(ctl, step, version)
    _scored(ctl, step)
    _step_done(ctl, step, version)


def test_eval_rounds_are_sent_tagged_and_their_figures_computed(tmp_path, base_config):
    ctl, mb, cfg = _controller(
        tmp_path, base_config, steps=4, eval_cfg={"every_steps": 2, "before_training": True, "samples": 4}
    )
    # Before training: the greedy pass and the sampled pass of round 0, sent before any training batch.
    first = [m for _, m in mb.sent]
    assert first[0].purpose == EVAL_GREEDY and first[0].min_version == 0
    greedy, sampled = mb.batches(EVAL_GREEDY), mb.batches(EVAL_SAMPLED)
    assert [b.temperature for b in greedy] == [0.0] and all(b.samples_per_prompt == 1 for b in greedy)
    assert sampled[0].samples_per_prompt == 4 and sampled[0].temperature == cfg.eval.temperature
    assert sorted(e for b in greedy for e in b.example_ids) == [100, 101, 102]
    assert all(g < 0 for b in greedy + sampled for g in b.group_ids)  # never a training group's id
    # Hand-made results: greedy right on 100 and 102; sampled 100: 4/4, 101: 1/4, 102: 0/4.
    sampled_right = {100: 4, 101: 1, 102: 0}
    for b in greedy:
        _scored_eval(ctl, b, lambda eid, j: eid != 101)
    assert not ctl.evals  # still waiting for the sampled pass
    for b in sampled:
        _scored_eval(ctl, b, lambda eid, j: j < sampled_right[eid])
    (rec,) = ctl.evals
    assert rec["pass@1"] == pytest.approx(2 / 3)
    assert rec["mean@4"] == pytest.approx((4 / 4 + 1 / 4 + 0) / 3)
    assert rec["pass@2"] == pytest.approx((1 + pass_at_k(4, 1, 2) + 0) / 3)  # (1 + 0.5 + 0) / 3
    assert rec["pass@4"] == pytest.approx(2 / 3)
    assert rec["policy_version"] == 0 and rec["examples"] == 3

    # Training steps: round 1 goes out after version 2, tagged with it; training goes on meanwhile.
    _train_step(ctl, 0, 1)
    assert len(ctl.eval_rounds) == 0
    _train_step(ctl, 1, 2)
    (rnd,) = ctl.eval_rounds.values()
    assert rnd.policy_version == 2
    assert {b.min_version for b in mb.batches() if b.eval_round == rnd.round} == {2}
    # Training batches were still sent for later steps (the eval does not pause the stream).
    assert max(b.step for b in mb.batches(TRAIN)) == 3
    for b in [b for b in mb.batches() if b.eval_round == rnd.round]:
        _scored_eval(ctl, b, lambda eid, j: 1)
    assert ctl.evals[-1]["pass@1"] == 1.0 and ctl.evals[-1]["pass@4"] == 1.0

    # The last step: a final round at version 4, and only after it, FinalVersion and Stop.
    _train_step(ctl, 2, 3)
    _train_step(ctl, 3, 4)
    assert ctl.running and not any(isinstance(m, Stop) for _, m in mb.sent)
    final = [b for b in mb.batches() if b.eval_round == 2]
    assert final and {b.min_version for b in final} == {4}
    for b in final:
        _scored_eval(ctl, b, lambda eid, j: 0)
    assert not ctl.running
    kinds = [type(m) for _, m in mb.sent]
    assert kinds.index(FinalVersion) < kinds.index(Stop)
    assert [m for _, m in mb.sent if isinstance(m, FinalVersion)][0].version == 4

    lines = [json.loads(x) for x in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in lines] == [0, 2, 4]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_first"]["pass@1"] == pytest.approx(2 / 3) and summary["eval_last"]["pass@1"] == 0.0
    assert summary["steps"] == 4 and summary["prompts_too_long"] == 2


def test_step_metrics_from_the_reward_notices(tmp_path, base_config):
    ctl, mb, _ = _controller(tmp_path, base_config, steps=2)
    ctl.on_batch_done(
        Envelope(
            ("generator", 0),
            BatchDone(
                batch_id=0,
                step=0,
                groups=4,
                tokens=40,
                policy_version=0,
                generate_s=0.5,
                wait_s=0.0,
                weight_load_s=0.0,
                weight_syncs=0,
            ),
        )
    )
    # An eval batch's generation time is the eval's, not the step's.
    ctl.on_batch_done(
        Envelope(
            ("generator", 0),
            BatchDone(
                batch_id=1,
                step=0,
                groups=4,
                tokens=40,
                policy_version=0,
                generate_s=9.0,
                wait_s=0.0,
                weight_load_s=0.0,
                weight_syncs=0,
                eval_round=0,
            ),
        )
    )
    _scored(ctl, 0)
    _step_done(ctl, 0, 1)
    rec = ctl.history[0]
    assert rec["generation_s"] == 0.5
    assert rec["correct_mean"] == pytest.approx(3 / 8)
    assert rec["reward_components"] == {"arith_exact": 0.5, "correct": pytest.approx(3 / 8)}
    assert rec["response_length_mean"] == 5.0 and rec["response_length_max"] == 9
    assert rec["response_clip_ratio"] == pytest.approx(2 / 8)
    assert rec["zero_advantage_group_share"] == pytest.approx(1 / 4)
    assert rec["prompts_too_long"] == 2 and rec["verifier_failures"] == 1
    assert not (tmp_path / "run" / "eval.jsonl").exists()  # no eval configured


def test_no_eval_means_no_final_push_and_a_plain_stop(tmp_path, base_config):
    ctl, mb, cfg = _controller(tmp_path, base_config, steps=1)
    assert not mb.batches(EVAL_GREEDY)
    _train_step(ctl, 0, 1)
    assert not ctl.running
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1


def test_eval_without_eval_prompts_is_refused(tmp_path, base_config):
    with pytest.raises(ValueError, match="no eval prompts"):
        _controller(tmp_path, base_config, eval_cfg={"every_steps": 1}, n_eval=0)


def test_a_step_is_logged_once_every_notice_about_it_is_in(tmp_path, base_config):
    """The trainer's StepDone can overtake the reward rank's Scored (different senders): the
    line waits for it, so no figure is lost and the next step is not logged first."""
    ctl, mb, _ = _controller(tmp_path, base_config, steps=3)
    _batch_done(ctl, 0, 1, groups=2)  # half the step's groups so far
    _step_done(ctl, 0, 1)
    _scored(ctl, 0)
    assert ctl.history == []  # the other half of the groups is still unreported by the generator
    _batch_done(ctl, 0, 1, groups=2)
    assert [r["step"] for r in ctl.history] == [0]
    assert ctl.history[0]["reward_s"] == 0.1 and ctl.history[0]["generation_s"] == 0.6
    # Step 1: its StepDone before its Scored.
    _batch_done(ctl, 1, 2)
    _step_done(ctl, 1, 2)
    assert len(ctl.history) == 1 and ctl.trainer_version == 2  # the gate moved on at once
    _scored(ctl, 1)
    assert [r["step"] for r in ctl.history] == [0, 1] and ctl.history[1]["correct_mean"] == 3.0 / 8
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1]


@pytest.mark.parametrize("colocated", [False, True], ids=["disaggregated", "colocated"])
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_prompts_go_out_one_version_early_but_not_to_colocated_ranks(tmp_path, base_config, colocated, max_staleness):
    """A generator waits for a batch's min_version itself, so the controller sends a step's
    prompts one version before its policy exists, tagged with that policy's version; colocated
    ranks generate what they get at once, so they get a step only once its policy exists."""
    ctl, mb, _ = _controller(tmp_path, base_config, steps=6, max_staleness=max_staleness, colocated=colocated)
    ahead = 0 if colocated else 1

    def steps_sent():
        return sorted({b.step for b in mb.batches()})

    # Version 0 exists: steps 0 .. max_staleness (+ 1 ahead) are out.
    assert steps_sent() == list(range(max_staleness + ahead + 1))
    for version in (1, 2, 3):
        _train_step(ctl, version - 1, version)
        assert steps_sent() == list(range(version + max_staleness + ahead + 1))
    # Whatever went out early carries the version it must be sampled with.
    assert all(b.min_version == max(0, b.step - max_staleness) for b in mb.batches())


def test_evaluating_never_moves_a_training_batchs_seed(tmp_path, base_config):
    """Eval batches are numbered apart from training batches. When they took ids from the same
    counter, a resumed run that kept an eval round done before the stop (not sent again) gave
    the next training batches that round's ids and seeds: at max_staleness 0, not the
    bit-identical continuation checkpoints promise; and changing eval.every_steps on resume
    moved every later training seed."""

    def run(name, eval_cfg):
        ctl, mb, _ = _controller(tmp_path / name, base_config, steps=3, eval_cfg=eval_cfg, max_staleness=0)
        for step in range(3):
            for b in [b for b in mb.batches() if b.eval_round >= 0 and b.eval_round in ctl.eval_rounds]:
                _scored_eval(ctl, b, lambda eid, j: 1)
            _train_step(ctl, step, step + 1)
        return mb

    plain = run("plain", None)
    evaluated = run("evaluated", {"every_steps": 1, "before_training": True, "samples": 2})
    train = [(b.step, b.batch_id, b.seed) for b in plain.batches(TRAIN)]
    assert train == [(b.step, b.batch_id, b.seed) for b in evaluated.batches(TRAIN)]
    evals = [b for b in evaluated.batches() if b.purpose != TRAIN]
    assert {b.eval_round for b in evals} == {0, 1, 2, 3}  # before training, after each step
    ids = [b.batch_id for b in evals]
    seeds = {b.seed for b in evals}
    assert all(i < 0 for i in ids) and len(set(ids)) == len(ids)
    assert len(seeds) == len(evals) and min(seeds) >= 0 and not seeds & {s for _, _, s in train}

    # A round sent again after a resume (the controller's round counter restored) is seeded as
    # the first time.
    again, mb, _ = _controller(tmp_path / "again", base_config, steps=3, eval_cfg={"every_steps": 1, "samples": 2})
    again.next_eval_round = 2
    again._start_eval(version=2)
    assert [b.seed for b in mb.batches() if b.purpose != TRAIN] == [b.seed for b in evals if b.eval_round == 2]


def test_eval_batches_hold_about_a_training_batchs_responses():
    """Sized by responses, not prompts: a greedy pass decodes as many rows together as a training
    batch does (issue 43: by prompts, its batches had one row per prompt and ran slower per token)."""
    from roles.evaluation import EvalRound
    from roles.sections.evaluation import EvalConfig

    rnd = EvalRound(0, 0, 0, list(range(10)), samples=4)
    prompts = {i: np.array([1, 2], np.int32) for i in range(10)}
    batches = rnd.batches(prompts, batch_rows=8, ev=EvalConfig(every_steps=1, samples=4), first_group=0)
    greedy = [len(b["example_ids"]) for b in batches if b["purpose"] == EVAL_GREEDY]
    sampled = [len(b["example_ids"]) for b in batches if b["purpose"] == EVAL_SAMPLED]
    assert greedy == [8, 2] and sampled == [2] * 5  # 8 rows a batch: 8 prompts x 1, 2 prompts x 4
    assert len({b["batch_id"] for b in batches}) == len(batches)
    rows = [len(b["example_ids"]) * b["samples_per_prompt"] for b in batches]
    assert max(rows) == 8 and sum(rows) == 10 + 40
