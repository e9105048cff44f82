"""The messages the RL roles exchange. Rollouts go generator -> reward -> trainer directly;
the controller only sees small notices (counts, timings, metrics), never rollouts."""

from __future__ import annotations

from dataclasses import field

import numpy as np

from transports.codec import message


@message
class PromptBatch:
    """Controller -> generator: prompts to sample, all for one trainer step."""

    batch_id: int
    step: int  # the trainer step that will consume these groups
    min_version: int  # generate only with weights at least this new (the staleness bound)
    prompt_ids: list[int]  # dataset indices, so the verifier can find the answer
    group_ids: list[int]  # step * prompts_per_step + position: fixes each group's trainer
    prompts: list[np.ndarray]  # int32 token ids, one array per prompt
    samples_per_prompt: int
    seed: int


@message
class Rollout:
    """One group: the n samples of one prompt, as generated and (after the reward rank) scored."""

    prompt_id: int
    group_id: int  # step * prompts_per_step + position in the step; unique per run
    step: int  # the trainer step this group is for
    prompt_ids: np.ndarray  # int32 prompt token ids
    response_ids: list[np.ndarray]  # int32, one array per sample (EOS included if sampled)
    logprobs: list[np.ndarray]  # float32 behaviour log-probs mu, one per response token
    finish_reasons: list[str]  # "stop" or "length" per sample
    policy_version: int  # version of the weights that sampled it
    rewards: list[float] | None = None  # set by the reward rank
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage


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


@message
class Scored:
    """Reward -> controller: counts for the groups it scored and forwarded."""

    step: int
    groups: int
    score_s: float
    failures: int  # user verifier raised: scored 0
    timeouts: int  # user verifier ran past its limit: scored 0


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
