"""A Hugging Face sequence-classification reward model (one label: a Bradley-Terry reward
model such as the Skywork-Reward or OpenAssistant families), on the reward rank's device.

Each reward rank loads it once, in its own dtype, with its own tokenizer and chat template
(``roles.rewards.learned.conversation``). A batch is scored in micro-batches of at most
``tokens_per_batch`` padded tokens, longest first so that rows of like length pad together.
The score is the model's single logit at the last token of each conversation (found from the
attention mask, not from the pad id, which some tokenizers share with end-of-turn tokens).
With ``shard: true`` the reward ranks hold one copy between them (``sharded``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from roles.rewards.learned.base import LearnedConfig, LearnedReward, RawScore, ScoreItem, ScorerContext
from roles.rewards.learned.conversation import conversation_text, encode, uses_template


class RewardModelConfig(LearnedConfig):
    path: str  # a local Hugging Face folder: a *ForSequenceClassification model with one label
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # the reward model's own precision
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: the rank's GPU when it has one, else CPU
    # Tokens (after its chat template) a conversation may have; longer ones keep their end and
    # are counted (reward_components: <label>/truncated, the share cut).
    max_length: int = Field(4096, gt=0)
    tokens_per_batch: int = Field(16384, gt=0)  # padded tokens per forward pass
    chat_template: bool = True  # render with the reward model's chat template when it has one
    shard: bool = False  # one copy sharded across the reward ranks (FSDP2, forward only)

    @field_validator("path")
    @classmethod
    def _a_reward_model(cls, path: str) -> str:
        check_reward_model_folder(path)
        return path


def check_reward_model_folder(path: str) -> None:
    """A ``ValueError`` unless ``path`` holds a sequence-classification model with one label
    (read from config.json alone: nothing is imported or loaded)."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{path!r} is not a Hugging Face model folder (no config.json)")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{config_file}: cannot read it ({e})") from None
    architectures = config.get("architectures") or []
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ValueError(
            f"{path!r} is not a sequence-classification reward model (its architectures are "
            f"{architectures or 'not given'}; a reward model is *ForSequenceClassification, one label)"
        )
    labels = len(config["id2label"]) if "id2label" in config else config.get("num_labels", 2)
    if labels != 1:
        raise ValueError(f"{path!r} has {labels} labels; a reward model gives one score (num_labels: 1)")


class RewardModel(LearnedReward):
    Config = RewardModelConfig

    def __init__(self, config: RewardModelConfig, context: ScorerContext):
        super().__init__(config, context)
        from roles.rewards.learned.model_loading import load_classifier

        self.model, self.tokenizer, self.device = load_classifier(config, context)
        self.use_template = uses_template(self.tokenizer, config.chat_template)
        # Sharded: every forward pass is collective over the reward ranks (``sharded``).
        self.collective = config.shard and context.group is not None

    def score_raw(self, items: Sequence[ScoreItem]) -> list[RawScore]:
        try:
            texts = [conversation_text(self.tokenizer, item, self.use_template) for item in items]
            ids, cut = encode(self.tokenizer, texts, self.use_template, self.config.max_length)
        except Exception:
            if not self.collective:
                raise  # the call's items fail (roles.rewards.scoring)
            # Sharded: this rank must still take its part in the others' forward passes.
            self.score_ids([])
            raise
        scores = self.score_ids(ids)
        return [RawScore(float(s), extras={"truncated": 1.0} if c else {}) for s, c in zip(scores, cut)]

    def score_ids(self, ids: list[list[int]]) -> list[float]:
        """The model's score of each token sequence, in micro-batches by token budget."""
        from roles.rewards.learned.model_loading import forward_scores

        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        scores = [0.0] * len(ids)
        batches = micro_batches([len(ids[i]) for i in order], self.config.tokens_per_batch)
        passes = len(batches)
        if self.collective:  # as many passes as the busiest reward rank, placeholders after ours
            from roles.rewards.learned.sharded import agree_max

            (passes,) = agree_max(self.context.group, passes)
        for k in range(passes):
            if k >= len(batches):
                forward_scores(self.model, [[self.pad_id]], self.pad_id, self.device)
                continue
            rows = [order[j] for j in batches[k]]
            for i, s in zip(rows, forward_scores(self.model, [ids[i] for i in rows], self.pad_id, self.device)):
                scores[i] = s
        return scores

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def close(self) -> None:
        self.model = None


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Consecutive index runs of ``lengths`` (sorted longest first) whose padded size
    (rows x the first row's length) stays within ``budget``; a row longer than it goes alone."""
    batches: list[list[int]] = []
    for k in range(len(lengths)):
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(k)
        else:
            batches.append([k])
    return batches
