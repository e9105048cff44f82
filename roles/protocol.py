"""The protocol of one RL step: its messages, who sends them to whom, and the version rules.

Read this module top to bottom to know how a step flows; the roles (``controller``,
``generator``, ``reward``, ``trainer``, ``colocated``) call it instead of re-deriving any rule.

1. **Prompt batches and the staleness gate.** The controller sends the prompts of step ``s``
   once the trainers have reached version ``s - max_staleness`` (:meth:`Schedule.can_send`),
   as :class:`PromptBatch` messages tagged with that minimum version
   (:meth:`Schedule.min_version`); batches go round-robin over the generators
   (:meth:`Routes.generator_for`). ``max_staleness`` 0 is synchronous on-policy; 1 is
   LlamaRL's one-step off-policy. Group ``i`` of step ``s`` has id ``s * prompts_per_step + i``
   (:func:`group_ids`); evaluation groups have negative ids (:func:`eval_group_ids`).
2. **Rollout routing.** A generator samples a batch with weights at least ``min_version`` new
   and sends each group as a :class:`Rollout` to reward rank ``group_id % rewards``
   (:meth:`Routes.reward_for`), then a :class:`BatchDone` notice to the controller. The reward
   rank scores it and forwards a training group to training rank ``group_id % trainers``
   (:meth:`Routes.trainer_for`) with a :class:`Scored` notice to the controller; an evaluation
   group goes back to the controller only, as :class:`EvalScored`.
3. **The weight-version handshake.** Version ``v`` is the policy after ``v`` optimizer steps.
   A generator holding version ``v`` has its receives for ``v + 1`` posted already (never past
   :attr:`Schedule.last_pushed_version`: a posted gloo receive cannot be taken back). After
   each step but the last (:meth:`Schedule.pushes`), training rank 0 announces
   :class:`WeightsPushed` to every generator, then every training rank pushes its shards.
   Announcements come one by one (:meth:`Schedule.check_announcement`); a generator swaps a
   finished transfer in at a batch boundary and blocks only when a batch demands a version it
   lacks. Training rank 0 then sends :class:`StepDone` to the controller.
4. **The stop sequence.** After the last step (and the final evaluation, if any) the controller
   sends :class:`FinalVersion` to the generators — each takes in every version up to it, so
   no trainer send is left hanging — writes the summary, and sends ``Stop`` to every rank
   (:func:`stop_everyone`).
5. **Checkpoints and resume.** After step ``s`` when ``s + 1`` steps make a checkpoint
   (:meth:`Schedule.checkpoint_due`), every training rank writes its random states and its
   shards of the policy and optimizer (collective over the trainers) into the partial
   checkpoint, after pushing the new weights so generators are not held up, and only then does
   training rank 0 send ``StepDone``. On that notice the controller writes its own part (the
   data position as of what was trained, not what was sent), asks every other rank for its
   random states (:class:`SaveState` / :class:`StateSaved`) and makes the checkpoint visible
   when all are in (``roles.checkpoint.layout.finalize``). A resumed run starts at ``resumed_at`` =
   the checkpoint's steps: the trainers push that version first, and no batch is sampled with
   an older one (:meth:`Schedule.min_version`); the steps in flight at the checkpoint are sent
   again, with the same prompts and seeds.
6. **Preemption.** A rank that gets SIGTERM, SIGUSR1 or SIGINT sends :class:`Preempt` to the
   training ranks (:func:`request_preemption`); at the end of the step in progress they agree
   (all-reduce) to checkpoint it whatever the schedule says, and report ``preempted`` in
   ``StepDone``. The controller completes that checkpoint and stops everyone with the reason
   ``preempted``; every rank then exits with ``runtime.EXIT_RESUMABLE``.

Rollouts go from role to role; the controller sees only small notices, never a rollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from roles.checkpoint.rng import save_rng
from roles.sections.rollout import RolloutConfig
from roles.seeds import batch_seed, group_seed  # noqa: F401  (the protocol's seeding rules)
from runtime import Address, Stop, handles
from transports.codec import message

# --------------------------------------------------------------------------- purposes
# What a batch (and the rollouts sampled from it) is for. Training groups go on to a trainer;
# evaluation groups come back to the controller as EvalScored and no trainer ever sees them.
TRAIN, EVAL_GREEDY, EVAL_SAMPLED = "train", "eval_greedy", "eval_sampled"
PURPOSES = (TRAIN, EVAL_GREEDY, EVAL_SAMPLED)


# ------------------------------------------------------------------------------ messages


@message
class PromptBatch:
    """Controller -> generator: prompts to sample, all for one trainer step (or one eval round)."""

    batch_id: int
    step: int  # the trainer step that will consume these groups (an eval: the steps done)
    min_version: int  # generate only with weights at least this new (the staleness bound)
    example_ids: list[int]  # task example ids, so the reward rank can find the answers
    group_ids: list[int]  # step * prompts_per_step + position: fixes each group's trainer
    prompts: list[np.ndarray]  # int32 token ids, one array per prompt
    samples_per_prompt: int
    seed: int
    purpose: str = TRAIN  # one of PURPOSES
    eval_round: int = -1  # which evaluation this batch belongs to (-1: training)
    temperature: float | None = None  # overrides rollout.temperature (0 = greedy, for eval)
    max_new_tokens: int | None = None  # overrides rollout.max_new_tokens
    # Streaming (rollout.mode: stream): each group's own sampling seed (:func:`group_seed`), so
    # what a group samples does not depend on the batch or the generator it went to.
    group_seeds: list[int] | None = None


@message
class Rollout:
    """One group: the n samples of one prompt, as generated and (after the reward rank) scored."""

    example_id: int  # the task example the prompt came from
    group_id: int  # step * prompts_per_step + position in the step; unique per run
    step: int  # the trainer step this group is for
    prompt_ids: np.ndarray  # int32 prompt token ids
    response_ids: list[np.ndarray]  # int32, one array per sample (EOS included if sampled)
    logprobs: list[np.ndarray]  # float32 behaviour log-probs mu, one per response token
    finish_reasons: list[str]  # "stop" or "length" per sample
    policy_version: int  # version of the weights that sampled it (streamed: its oldest token's)
    rewards: list[float] | None = None  # set by the reward rank
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    purpose: str = TRAIN  # copied from the PromptBatch: train, or an evaluation pass
    eval_round: int = -1
    # Streamed with in-flight updates: per sample, its (first token, version) pairs flattened
    # (roles.engines.requests.version_segments); None: ``policy_version`` sampled every token.
    version_segments: list[np.ndarray] | None = None
    # Set by the critic (algorithm.advantage: gae): per sample, float32 GAE advantages, one per
    # response token, which the trainer uses instead of group baselines.
    token_advantages: list[np.ndarray] | None = None
    # Multi-turn episodes (roles.episodes): per sample, uint8 per token, 1 where the model
    # sampled it, 0 on observations (never trained); and its record (Episode.info).
    loss_masks: list[np.ndarray] | None = None
    episodes: list[dict] | None = None


@message
class WeightsPushed:
    """Training rank 0 -> every generator: the weights of ``version`` are on their way."""

    version: int


@message
class BatchDone:
    """Generator -> controller: a batch went out to the reward ranks."""

    batch_id: int
    step: int
    groups: int
    tokens: int  # response tokens generated
    policy_version: int
    generate_s: float  # seconds inside the engine
    wait_s: float  # seconds idle waiting for required weights
    weight_load_s: float  # seconds to apply received weights (the generator's stall per sync)
    weight_syncs: int  # weight versions applied since the last BatchDone
    eval_round: int = -1  # an evaluation batch: its round (its time is the eval's, not the step's)
    # Of generate_s, the share its rows spent finished, waiting for the batch's longest sample
    # (generator.tail_wait_s), in seconds: the gap continuous batching would close.
    tail_wait_s: float = 0.0
    window_s: float = 0.0  # wall seconds since this rank's previous notice: its busy time fell inside


@message
class Scored:
    """Reward -> controller: what it saw in the training groups it scored and forwarded.

    Sums, not means, so the controller can add up the notices of a step from several ranks.
    """

    step: int
    groups: int
    score_s: float
    failures: int  # reward components that raised: scored 0
    timeouts: int  # responses whose scoring ran past reward.timeout_s: scored 0
    samples: int = 0
    reward_sum: float = 0.0
    correct_sum: float = 0.0  # the reward's "correct" component (see roles.rewards.base)
    components: dict[str, float] = field(default_factory=dict)  # per component: sum of scores
    length_sum: int = 0  # response tokens
    length_max: int = 0
    clipped: int = 0  # responses cut at max_new_tokens (finish reason "length")
    zero_advantage_groups: int = 0  # groups whose samples all scored the same
    window_s: float = 0.0  # wall seconds on its rank since its previous Scored (score_s fell inside)
    episodes: dict[str, float] = field(default_factory=dict)  # sums (roles.episodes.metrics)
    # The generations shown from these groups (logging.samples_per_step; roles.observe.samples):
    # samples.jsonl lines, decoded here because the reward rank has the text.
    shown: list[dict] = field(default_factory=list)


@message
class EvalScored:
    """Reward -> controller: one scored evaluation group (never forwarded to a trainer)."""

    eval_round: int
    example_id: int
    purpose: str  # EVAL_GREEDY or EVAL_SAMPLED
    policy_version: int
    scores: list[float]
    correct: list[float]
    lengths: list[int]
    clipped: int
    failures: int
    timeouts: int
    score_s: float


@message
class StepDone:
    """Training rank 0 -> controller: one optimizer step finished; version is the new policy."""

    step: int
    version: int
    metrics: dict[str, float]


@message
class Preempt:
    """Any rank that got a stop signal -> every training rank: checkpoint after the step in progress."""

    signal: str = ""  # the signal's name, for the log


@message
class SaveState:
    """Controller -> generators and reward ranks: write your random states into checkpoint ``path``."""

    steps_done: int
    path: str


@message
class StateSaved:
    """Generator or reward rank -> controller: its part of checkpoint ``steps_done`` is written."""

    steps_done: int


@message
class FinalVersion:
    """Controller -> generators, just before Stop: receive every version up to this one first."""

    version: int


# -------------------------------------------------------------------------------- routing


CONTROLLER = Address("controller", 0)


@dataclass(frozen=True)
class Routes:
    """Who an actor talks to: how many ranks play each part, and which one gets what.

    ``generate_role`` and ``train_role`` are ``generator`` and ``trainer``, or both
    ``colocated`` in the baseline layout where the same ranks generate and train.
    """

    generate_role: str
    train_role: str
    generators: int  # ranks of generate_role
    rewards: int
    trainers: int  # ranks of train_role
    critics: int = 0  # ranks of the value model (algorithm.advantage: gae)

    @classmethod
    def of(cls, counts: dict[str, int]) -> Routes:
        """From the role map's ranks per role (``World.counts()``)."""
        colocated = counts.get("colocated", 0) > 0
        gen, train = ("colocated", "colocated") if colocated else ("generator", "trainer")
        ranks = (counts.get(gen, 0), counts.get("reward", 0), counts.get(train, 0), counts.get("critic", 0))
        return cls(gen, train, *ranks)

    @property
    def colocated(self) -> bool:
        return self.generate_role == self.train_role

    def generator_for(self, batch_id: int) -> Address:
        # Round-robin keeps the generators equally loaded for equal batches.
        return Address(self.generate_role, batch_id % self.generators)

    def reward_for(self, group_id: int) -> Address:
        return Address("reward", group_id % self.rewards)

    def trainer_for(self, group_id: int) -> Address:
        # Each data-parallel training rank takes a fixed share of every step's groups.
        return Address(self.train_role, group_id % self.trainers)

    def critic_for(self, group_id: int) -> Address:
        # As for the trainers: each critic rank a fixed share of every step's groups.
        return Address("critic", group_id % self.critics)

    def scored_for(self, group_id: int) -> Address:
        """Where a scored training group goes: its critic (for its advantages), else its trainer."""
        return self.critic_for(group_id) if self.critics else self.trainer_for(group_id)


def group_ids(step: int, start: int, n: int, prompts_per_step: int) -> list[int]:
    """Ids of the ``n`` groups at positions ``start..`` of training step ``step``."""
    return [step * prompts_per_step + start + i for i in range(n)]


def eval_group_ids(groups_sent: int, n: int) -> list[int]:
    """Ids of the next ``n`` evaluation groups: negative, so never a training group's, and
    still spread over the reward ranks by :meth:`Routes.reward_for`."""
    return [-(groups_sent + i + 1) for i in range(n)]


def eval_batch_id(eval_round: int, index: int, per_round: int) -> int:
    """The id of batch ``index`` of the ``per_round`` of evaluation round ``eval_round``.

    Negative, and counted apart from the training batches' (0, 1, 2, ...): so evaluating never
    moves a training batch's id, nor therefore its seed, and the rounds a resumed run kept
    (not sent again) leave the next training batches the seeds of the uninterrupted run. By
    round, so a round sent again after a resume is seeded as it was the first time. Spread
    over the generators by :meth:`Routes.generator_for` like training batches.
    """
    return -(1 + eval_round * per_round + index)


def batch_prompts(rollout: RolloutConfig, generators: int, configured: int = 0) -> int:
    """Prompts per generation batch: ``configured``, or an equal share of a step per generator."""
    return configured or max(1, -(-rollout.prompts_per_step // generators))


# ----------------------------------------------------------------------- version rules


@dataclass(frozen=True)
class Schedule:
    """Which policy version each step is sampled with, and which versions the trainers push."""

    steps: int  # trainer steps in the run
    max_staleness: int  # generate with weights at most this many versions behind the trainer
    final_eval: bool = False  # the run evaluates its final policy on the generators
    checkpoint_every: int = 0  # steps between checkpoints (0: none)
    resumed_at: int = 0  # steps done when this run started (a resumed run: its checkpoint's)

    @classmethod
    def of(cls, run, evaluation, checkpoint=None, resumed_at: int = 0) -> Schedule:
        """From the role map's ``run:``, ``eval:`` and ``checkpoint:`` sections (a run with eval
        evaluates its final policy)."""
        every = checkpoint.every_steps if checkpoint is not None else 0
        return cls(run.steps, run.max_staleness, evaluation.enabled, every, resumed_at)

    def min_version(self, step: int) -> int:
        """The oldest policy that may sample the data of ``step`` (never one from before a resume:
        the generators' own weights are then placeholders until the trainers' first push)."""
        return max(self.resumed_at, step - self.max_staleness)

    def checkpoint_due(self, steps_done: int) -> bool:
        """Whether the state after ``steps_done`` trainer steps is checkpointed."""
        return self.checkpoint_every > 0 and steps_done % self.checkpoint_every == 0 and steps_done > self.resumed_at

    def can_send(self, step: int, trainer_version: int, ahead: int = 0) -> bool:
        """Whether step ``step``'s prompts may go out while the trainers hold ``trainer_version``.

        ``ahead``: how many versions before its policy exists a step may go out. Generators
        wait for a batch's ``min_version`` themselves (the trainer announces each version to
        them directly), so a batch sent one version early is sampled by the same policy while
        the trainer's notice to the controller and the controller's batch leave the step's
        critical path (bench/scale.py, sync mode). Colocated ranks generate whatever they are
        sent at once: 0 for them."""
        return step < self.steps and trainer_version + ahead >= step - self.max_staleness

    @property
    def last_pushed_version(self) -> int:
        """The newest version the trainers push: versions 1 .. steps - 1 (nobody samples after
        the last step), or up to ``steps`` when the final policy is evaluated on the generators."""
        return self.steps if self.final_eval else max(self.steps - 1, 0)

    def pushes(self, version: int) -> bool:
        """Whether the trainers push ``version`` to the generators."""
        return version <= self.last_pushed_version

    def check_announcement(self, version: int, expected: int, who: str) -> None:
        """A generator's check of a ``WeightsPushed``: versions come one by one, none past the last."""
        where = f"{who}: the trainer announced weights version {version}"
        if version > self.last_pushed_version:
            raise RuntimeError(
                f"{where}, but a run of {self.steps} steps pushes versions up to {self.last_pushed_version}"
            )
        if version != expected:
            raise RuntimeError(f"{where}, expected {expected} (versions come one by one)")


def stop_everyone(mailbox, routes: Routes, final_version: int, reason: str = "finished") -> None:
    """The controller's last act: generators take in every pushed version, then all stop."""
    if not routes.colocated:  # colocated ranks reload their own engine: nothing in flight
        mailbox.send_role(routes.generate_role, FinalVersion(version=final_version))
    mailbox.send_all(Stop(reason))


class ForwardsStopSignals:
    """Rule 6 for a rank that does not train (an Actor mixin): a stop signal goes on to the trainers."""

    def on_preempt(self) -> None:
        request_preemption(self.mailbox, self.routes)


class SavesRandomStates:
    """Rule 5 for a generator or reward rank (an Actor mixin): asked by the controller, it writes
    its random states into the checkpoint and says so."""

    @handles(SaveState)
    def on_save_state(self, env) -> None:
        save_rng(env.msg.path, self.mailbox.role_table.rank)
        self.mailbox.send(CONTROLLER, StateSaved(steps_done=env.msg.steps_done))


def request_preemption(mailbox, routes: Routes, signal: str = "") -> None:
    """A rank that got a stop signal passes it on to the trainers, who agree on the step to stop
    after (an all-reduce of their flags at the end of each step) and checkpoint it."""
    mailbox.send_role(routes.train_role, Preempt(signal=signal))
