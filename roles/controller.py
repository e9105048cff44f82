"""Controller rank: owns the prompt stream and the loop; never touches a rollout.

It hands each step's prompts to the generators one version before the policy they must be
sampled with exists: prompts for step s go out when ``trainer_version + 1 >= s -
max_staleness``, each batch tagged with its minimum version ``s - max_staleness``, which the
generator waits for (the trainer announces each version to the generators directly, so the
batch is there when the weights land; colocated ranks, which generate what they get at once,
get a step's prompts only once its policy exists). So with ``max_staleness = 0`` a step's
data is sampled by the very policy it trains (synchronous on-policy), with 1 the generators
sample step s+1 while the trainer trains step s (LlamaRL's one-step off-policy). It logs one
JSON line per step from the notices it receives (``roles.observe.step_record``) and stops
everyone after ``run.steps`` steps. Building it sends nothing: its first prompts go out from
``on_start``, as its loop starts.

With ``eval`` set it also sends evaluation rounds (``roles.evaluation``) through the same
generators, tagged so that reward ranks return them here instead of to a trainer; training
prompts keep flowing meanwhile (an eval costs generator time, not a pause). A run with eval
evaluates its final policy before it stops; ``summary.json`` holds the figures.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from roles import protocol
from roles.checkpoint.layout import remove_partials
from roles.checkpoint.plan import CheckpointPlan
from roles.checkpoint.resume import Resume
from roles.controller_checkpoints import CoordinatesCheckpoints
from roles.critic_protocol import CriticDone
from roles.dispatch import Dispatch
from roles.evaluation import EvalConfig, EvalRound
from roles.observe.run_log import RunLog
from roles.observe.step_record import StepNotices, step_record, summary
from roles.partial_rollouts import HandsOutPartialRollouts, SlotBook
from roles.prompt_stream import PromptStream, fingerprint
from roles.protocol import (
    BatchDone,
    EvalScored,
    ForwardsStopSignals,
    PromptBatch,
    RolloutConfig,
    Routes,
    Schedule,
    Scored,
    StepDone,
)
from roles.sections.controller import ControllerConfig
from roles.stream_protocol import Credit
from runtime import PREEMPTED, Actor, Envelope, handles


@dataclass
class ControllerData:
    """The prompts the controller hands out, as rank 0 prepared them."""

    train: dict[int, np.ndarray]  # training example id -> prompt token ids
    eval: dict[int, np.ndarray] = field(default_factory=dict)  # the examples an eval round sends, in order
    stats: dict = field(default_factory=dict)  # counts of the data as prepared, logged with each step
    digest: str | None = None  # ``roles.prompt_stream.fingerprint`` of ``train``, if known


@dataclass
class Observers:
    """What watches the run besides the controller's files: ``progress``, a ``Progress``
    (``roles.observe.progress``); ``backends``, the dashboards it feeds (``roles.observe.backends``,
    started before any work); ``liveness``, a ``runtime.liveness.LivenessMonitor`` (None: none)."""

    progress: object = None
    backends: tuple | list = ()
    liveness: object = None


class ControllerActor(CoordinatesCheckpoints, HandsOutPartialRollouts, ForwardsStopSignals, Actor):
    Config = ControllerConfig  # the role map's run: section
    slots: SlotBook | None = None  # rollout.oversample or dynamic_sampling: set in __init__
    cpu_clock = True  # its busy share in CPU seconds too: "controller_busy_cpu" in each step's line

    def __init__(
        self,
        mailbox,
        config: ControllerActor.Config,
        *,
        rollout: RolloutConfig,
        evaluation: EvalConfig,
        routes: Routes,
        schedule: Schedule,
        data: ControllerData,
        batch_prompts: int = 0,
        observers: Observers | None = None,
        checkpoints: CheckpointPlan | None = None,
        resume: Resume | None = None,
    ):
        """``data``: the prompts it hands out. ``batch_prompts``: prompts per generation batch (0:
        an equal share of a step per generator). ``observers``: what watches the run besides its
        files. ``checkpoints``: where checkpoints go (``schedule`` says when); ``resume``: the
        checkpoint this run continues from (its steps, data position and counters; metrics past
        it dropped). Sends nothing: the first prompts go out from ``on_start``."""
        super().__init__(mailbox)
        observers = observers or Observers()
        self.config = config
        self.rollout = rollout
        self.evaluation = evaluation
        self.routes = routes
        self.schedule = schedule
        self.prompts = data.train
        self.stream = PromptStream(data.train, config.seed, digest=data.digest or fingerprint(data.train))
        self.eval_prompts = data.eval or {}
        self.data_stats = dict(data.stats or {})
        self.trainer_version = self.next_step_to_send = self.next_batch_id = 0
        self.batch_prompts = protocol.batch_prompts(rollout, routes.generators, batch_prompts)
        self.outgoing = Dispatch(mailbox, routes, streaming=rollout.mode == "stream")
        self.slots = self._new_slot_book()  # steps given to groups as they end, or once scored
        self.notices = StepNotices()  # per step, merged into one metrics line per step
        self._steps_done: dict[int, tuple] = {}  # step -> (StepDone, when it came): waiting for notices
        self.out = Path(config.out)
        self.last_pushed = 0  # newest weight version the trainer has sent to generators
        self.eval_rounds: dict[int, EvalRound] = {}  # in flight
        self.next_eval_round = 0
        self.next_eval_group = 0
        self.finishing = False  # the last step is done; waiting for the final eval
        self.checkpoints = checkpoints
        self._positions: dict[int, dict] = {}  # step -> data position just before it was sent
        # Checkpoints being completed: steps -> ranks still to hear from. Several may be in
        # flight (checkpoint every step, trainers running ahead at max_staleness >= 2); each
        # rank answers in the order asked, so they complete in step order.
        self._saving: dict[int, int] = {}
        self._finish_after_save = False
        self._stop_reason = "finished"  # or PREEMPTED: the trainers checkpointed on a signal
        self._summary = None  # summary.json's figures, once written
        self.liveness, self._next_liveness_check = observers.liveness, 0.0
        self._resumed = resume is not None
        if evaluation.enabled and not self.eval_prompts:
            raise ValueError("eval is set but there are no eval prompts (the task's eval split is empty)")
        self._open_log(observers, resume)
        if checkpoints is not None:
            remove_partials(checkpoints.root)  # left by a save that never finished

    def _open_log(self, observers: Observers, resume: Resume | None) -> None:
        """The run's record and clocks: new, or continued from where ``resume`` stopped."""
        self.log = RunLog(
            self.out,
            evaluation=self.evaluation.enabled,
            resumed_at=resume.steps_done if resume is not None else None,
            backends=observers.backends,
            progress=observers.progress,
        )
        self.history, self.evals = self.log.history, self.log.evals  # the metrics and eval lines so far
        elapsed_before = self._resume(resume) if resume is not None else 0.0
        self.t_start = time.perf_counter() - elapsed_before  # elapsed_s continues over a resume
        self.t_last_step = time.perf_counter()
        self._busy_at_last_step, self._handled_at_last_step = 0.0, 0  # busy_s, messages_handled then
        self._busy_cpu_at_last_step = 0.0

    def on_start(self) -> None:
        """The first prompts (after an eval round before training, or the one in flight when a
        resumed run stopped); a run resumed from its last checkpoint ends at once."""
        if self.trainer_version >= self.schedule.steps:  # resumed from the run's last checkpoint
            self._finish()
            return
        if self.evaluation.before_training and self.trainer_version == 0:
            self._start_eval(version=0)  # first, so the generators sample it with version 0
        elif self._resumed and self._eval_due(self.trainer_version):
            self._start_eval(version=self.trainer_version)  # it was in flight when the run stopped
        self._fill()

    # ---------------------------------------------------------------- checkpoints

    def _position(self) -> dict:
        return {"stream": self.stream.position(), "next_batch_id": self.next_batch_id}

    def _checkpoint_position(self, steps: int) -> dict:
        """The data position a run resumed after ``steps`` steps starts from."""
        if self.slots is not None:  # now, with what was taken but not trained in those steps
            return {**self._position(), "carry": self.slots.carry_list(steps)}
        return self._positions.get(steps) or self._position()  # not yet sent: as it is now

    def _resume(self, resume: Resume) -> float:
        """Continue from ``resume``: counters and data position as of its last trained step
        (the run log dropped the lines past it). Returns the run's elapsed seconds at that step."""
        state = resume.controller_state()
        steps = resume.steps_done
        self.stream.restore(state["position"]["stream"])
        self.next_batch_id = state["position"]["next_batch_id"]
        self.next_eval_group = state["next_eval_group"]
        self.trainer_version = self.next_step_to_send = steps
        # The trainers push the checkpoint's version first (if it is pushed at all).
        self.last_pushed = min(steps, self.schedule.last_pushed_version)
        self.next_eval_round = len(self.evals)
        if self.slots is not None:
            self.slots = self._new_slot_book(start_step=steps, carry=state["position"].get("carry", []))
        return self.history[-1]["elapsed_s"] if self.history else 0.0

    def _eval_due(self, version: int) -> bool:
        every = self.evaluation.every_steps
        done = {e["policy_version"] for e in self.evals}
        return bool(every) and version % every == 0 and version not in done

    def step(self) -> bool:
        now = time.perf_counter()
        if self.liveness is not None and now >= self._next_liveness_check:
            self._next_liveness_check = now + 0.5  # a cheap probe, but not every loop turn
            self.liveness.check()  # a silent rank: TimeoutError naming it, and the job aborts
        # Watchdog: a job that makes no progress must end, not sit on the allocation.
        if now - self.t_last_step > self.config.timeout_s:
            raise TimeoutError(
                f"no trainer step finished for {self.config.timeout_s:.0f} s "
                f"(waiting for step {len(self.history)}; run.timeout_s)"
            )
        return False

    def _fill(self) -> None:
        """Send every step whose required policy version already exists (the staleness gate)."""
        ahead = 0 if self.routes.colocated else 1  # see Schedule.can_send
        if self.slots is not None:
            self._top_up(min(self.trainer_version + ahead + self.schedule.max_staleness + 1, self.schedule.steps))
            return
        while self.schedule.can_send(self.next_step_to_send, self.trainer_version, ahead):
            if self.checkpoints is not None:
                self._positions[self.next_step_to_send] = self._position()
            self._send_step(self.next_step_to_send)
            self.next_step_to_send += 1

    def _send_step(self, step: int) -> None:
        P = self.rollout.prompts_per_step
        ids = self.stream.take(P)
        for start in range(0, P, self.batch_prompts):
            chunk = ids[start : start + self.batch_prompts]
            self._send_batch(
                step=step,
                min_version=self.schedule.min_version(step),
                example_ids=chunk,
                group_ids=protocol.group_ids(step, start, len(chunk), P),
                prompts=[self.prompts[i] for i in chunk],
                samples_per_prompt=self.rollout.samples_per_prompt,
            )

    def _send_batch(self, batch_id: int | None = None, **fields) -> None:
        """Number a batch (training batches in turn; eval batches bring theirs, apart, see
        ``protocol.eval_batch_id``), seed it, and hand it to its generator."""
        if batch_id is None:
            batch_id = self.next_batch_id
            self.next_batch_id += 1
        if self.outgoing.streaming:  # each group seeded by its id, whoever samples it
            fields["group_seeds"] = [protocol.group_seed(self.config.seed, g) for g in fields["group_ids"]]
        batch = PromptBatch(batch_id=batch_id, seed=protocol.batch_seed(self.config.seed, batch_id), **fields)
        self.outgoing.send(batch)

    @handles(Credit)
    def on_credit(self, env: Envelope) -> None:
        self.outgoing.on_credit(env.sender.index, env.msg.groups)

    def _start_eval(self, version: int) -> None:
        """Send one eval round: greedy responses, and ``eval.samples`` sampled ones, per example."""
        rnd = EvalRound(
            self.next_eval_round, version, len(self.history), list(self.eval_prompts), self.evaluation.samples
        )
        self.next_eval_round += 1
        self.eval_rounds[rnd.round] = rnd
        rows = self.batch_prompts * self.rollout.samples_per_prompt  # a training batch's responses
        for fields in rnd.batches(self.eval_prompts, rows, self.evaluation, self.next_eval_group):
            self.next_eval_group += len(fields["example_ids"])
            self._send_batch(**fields)

    @handles(EvalScored)
    def on_eval_scored(self, env: Envelope) -> None:
        m: EvalScored = env.msg
        rnd = self.eval_rounds.get(m.eval_round)
        if rnd is None:
            raise RuntimeError(f"an eval result for round {m.eval_round}, which is not in flight")
        rnd.add(m)
        if not rnd.done:
            return
        del self.eval_rounds[m.eval_round]
        self.log.eval({**rnd.metrics(), "elapsed_s": time.perf_counter() - self.t_start})
        if self.finishing and not self.eval_rounds:
            self._finish()

    # -------------------------------------------------------------------- notices

    @handles(BatchDone)
    def on_batch_done(self, env: Envelope) -> None:
        m: BatchDone = env.msg
        if m.eval_round >= 0:
            if m.eval_round in self.eval_rounds:
                self.eval_rounds[m.eval_round].generate_s += m.generate_s
            return
        self.notices.add_batch(m)
        self._log_finished_steps()

    @handles(Scored)
    def on_scored(self, env: Envelope) -> None:
        m: Scored = env.msg
        self.notices.add_scored(m)
        self._log_finished_steps()

    @handles(CriticDone)
    def on_critic_done(self, env: Envelope) -> None:  # its line waits for the critic's figures too
        self.notices.add_critic(env.msg.step, env.msg.metrics)
        self._log_finished_steps()

    @handles(StepDone)
    def on_step_done(self, env: Envelope) -> None:
        m: StepDone = env.msg
        self.trainer_version = m.version
        self.last_pushed = max(self.last_pushed, int(m.metrics.get("pushed_version", 0)))
        self._steps_done[m.step] = (m, time.perf_counter())
        self._log_finished_steps()

    def _log_finished_steps(self) -> None:
        """Act on each finished step, in order, once every notice about it is in.

        A step's notices come from three ranks: the generators' BatchDone, the reward ranks'
        Scored, the trainer's StepDone. Nothing orders messages from different senders, so the
        trainer's StepDone may overtake the last Scored of its own groups; the step is logged
        (and acted on) only when all its groups have been reported by both, so its line is
        complete and no late notice is left over.
        """
        P = self.rollout.prompts_per_step
        while (step := len(self.history)) in self._steps_done and self.running:
            # Dynamic sampling: generators sample groups before they have a step (not counted per step).
            generated = self.slots is None or self.slots.dynamic is None
            if not self.notices.complete(step, P, critic=self.routes.critics > 0, generated=generated):
                return
            self._step_finished(*self._steps_done.pop(step))

    def _step_finished(self, m: StepDone, now: float) -> None:
        """Step ``m.step``'s line; then its checkpoint, eval, the run's end, or the next prompts."""
        gen, scored, components, shown = self.notices.pop(m.step)
        gen = self._with_slot_figures(m.step, gen)  # carried over, dropped, filtered
        step_s = now - self.t_last_step
        controller = {
            "busy": round((self.busy_s - self._busy_at_last_step) / max(step_s, 1e-9), 4),
            "busy_cpu": round((self.busy_cpu_s - self._busy_cpu_at_last_step) / max(step_s, 1e-9), 4),
            "messages": self.messages_handled - self._handled_at_last_step,
            "elapsed_s": now - self.t_start,
        }
        record = step_record(
            m,
            gen,
            scored,
            components,
            routes=self.routes,
            data_stats=self.data_stats,
            step_s=step_s,
            controller=controller,
        )
        if (critic := self.notices.pop_critic(m.step)) is not None:  # algorithm.advantage: gae
            record["critic"] = critic
        self.t_last_step = now
        self._busy_at_last_step, self._handled_at_last_step = self.busy_s, self.messages_handled
        self._busy_cpu_at_last_step = self.busy_cpu_s
        self.log.step(record, shown)
        preempted = bool(m.metrics.get("preempted"))
        if self.checkpoints is not None and (preempted or self.schedule.checkpoint_due(m.step + 1)):
            self._begin_checkpoint(m.step + 1)
        if self.slots is not None:
            self.slots.forget_before(m.step + 1)
        if preempted and m.step + 1 < self.schedule.steps:
            self.log.write(f"preempted: stopping after step {m.step} with a checkpoint")
            self._stop_reason = PREEMPTED
            self._finish()
            return
        if m.step + 1 >= self.schedule.steps:
            self.work_done_at = time.time()
            if self.evaluation.enabled:
                self._start_eval(version=m.version)  # the final policy (trainers pushed it)
                self.finishing = True
            else:
                self._finish()
            return
        if self._eval_due(m.version):
            self._start_eval(version=m.version)
        self._fill()

    def _finish(self) -> None:
        if self._saving:  # a checkpoint is still being completed: stop after it
            self._finish_after_save = True
            return
        self.write_summary()
        # Generators must take in every version the trainer pushed before they leave, or the
        # trainer's last sends would never complete: the protocol's stop sequence.
        protocol.stop_everyone(self.mailbox, self.routes, final_version=self.last_pushed, reason=self._stop_reason)
        self.stop(self._stop_reason)

    def write_summary(self) -> None:
        """``summary.json``: what a user looks at first (training reward, eval figures, data)."""
        self._summary = summary(self.history, self.evals, self.data_stats, time.perf_counter() - self.t_start)
        (self.out / "summary.json").write_text(json.dumps(self._summary, indent=2))

    def on_stop(self, reason: str) -> None:
        # The summary line only for a run that finished (not one preempted or stopped by a failure).
        self.log.close(self._summary if reason == "finished" else None)
