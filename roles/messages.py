"""The messages the RL roles exchange. Rollouts go generator -> reward -> trainer directly;
the controller only sees small notices (counts, timings, metrics), never rollouts."""

from __future__ import annotations

from dataclasses import field

import numpy as np

from transports.codec import message


# What a batch (and the rollouts sampled from it) is for. Training groups go on to a trainer;
# evaluation groups come back to the controller as EvalScored and no trainer ever sees them.
TRAIN, EVAL_GREEDY, EVAL_SAMPLED = "train", "eval_greedy", "eval_sampled"
PURPOSES = (TRAIN, EVAL_GREEDY, EVAL_SAMPLED)


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
    policy_version: int  # version of the weights that sampled it
    rewards: list[float] | None = None  # set by the reward rank
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage
    purpose: str = TRAIN  # copied from the PromptBatch: train, or an evaluation pass
    eval_round: int = -1


@message
class WeightsPushed:
    """Trainer 0 -> every generator: the weights of ``version`` are on their way."""

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
    """Trainer 0 -> controller: one optimizer step finished; version is the new policy."""

    step: int
    version: int
    metrics: dict[str, float]


@message
class FinalVersion:
    """Controller -> generators, just before Stop: receive every version up to this one first."""

    version: int
