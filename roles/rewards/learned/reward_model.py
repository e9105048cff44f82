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

import logging
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from roles.rewards.learned.base import LearnedConfig, LearnedReward, RawScore, ScoreItem, ScorerContext
from roles.rewards.learned.conversation import conversation_text, encode, uses_template

log = logging.getLogger(__name__)


class RewardModelConfig(LearnedConfig):
    # A local Hugging Face folder, or a Hub name (owner/name[@revision]) in the local cache:
    # a *ForSequenceClassification model with one label.
    path: str
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
        from roles.hub_cache import model_folder

        path = model_folder(path)
        check_reward_model_folder(path)
        return path


def check_reward_model_folder(path: str) -> None:
    """A ``ValueError`` unless ``path`` holds a sequence-classification model with one label
    (read from config.json alone: nothing is imported or loaded)."""
    from roles.models import folder_config

    config = folder_config(path)
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
        self._warned: set[str] = set()

    def score_raw(self, items: Sequence[ScoreItem]) -> list[RawScore]:
        """One score per item; an item that cannot be rendered, tokenized or scored alone is
        not scored (None: 0, counted), the others are."""
        encoded = self._encode(items)
        ok = [i for i, e in enumerate(encoded) if e is not None]
        scores = self.score_ids([encoded[i][0] for i in ok])
        out = [RawScore(None, extras={"failed": 1.0}) for _ in items]
        for i, score in zip(ok, scores):
            if score is not None:
                out[i] = RawScore(score, extras={"truncated": 1.0} if encoded[i][1] else {})
        return out

    def _encode(self, items: Sequence[ScoreItem]) -> list[tuple[list[int], bool] | None]:
        """Each item's token ids and whether they were cut; None for one that raised. All in
        one tokenizer call, or one by one when that call raises."""

        def encode_all(batch):
            texts = [conversation_text(self.tokenizer, item, self.use_template) for item in batch]
            return list(zip(*encode(self.tokenizer, texts, self.use_template, self.config.max_length)))

        try:
            return encode_all(items)
        except Exception:  # noqa: BLE001 - find the item(s) it was
            out = []
            for item in items:
                try:
                    out.append(encode_all([item])[0])
                except Exception:  # noqa: BLE001 - that item is not scored, the others are
                    self._warn_once("cannot render or tokenize a response")
                    out.append(None)
            return out

    def score_ids(self, ids: list[list[int]]) -> list[float | None]:
        """The model's score of each token sequence, in micro-batches by token budget. A
        micro-batch whose forward pass raises is scored row by row, and a row that raises
        alone is None (not when sharded: every pass is collective, so that raises)."""
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        scores: list[float | None] = [None] * len(ids)
        batches = micro_batches([len(ids[i]) for i in order], self.config.tokens_per_batch)
        passes = len(batches)
        if self.collective:  # as many passes as the busiest reward rank, placeholders after ours
            from transports.torch_dist import agree_max

            (passes,) = agree_max(self.context.group, passes)
        for k in range(passes):
            if k >= len(batches):
                self._forward([[self.pad_id]])
                continue
            rows = [order[j] for j in batches[k]]
            for i, score in zip(rows, self._forward_or_alone([ids[i] for i in rows])):
                scores[i] = score
        return scores

    def _forward(self, rows: list[list[int]]) -> list[float]:
        from roles.rewards.learned.model_loading import forward_scores

        return forward_scores(self.model, rows, self.pad_id, self.device)

    def _forward_or_alone(self, rows: list[list[int]]) -> list[float | None]:
        if self.collective:
            return self._forward(rows)
        try:
            return self._forward(rows)
        except Exception:  # noqa: BLE001 - find the row(s) it was
            out: list[float | None] = []
            for row in rows:
                try:
                    out.append(self._forward([row])[0])
                except Exception:  # noqa: BLE001 - that response is not scored, the others are
                    self._warn_once("the forward pass raised on a response")
                    out.append(None)
            return out

    def _warn_once(self, what: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("reward model: %s; it scores 0 (later ones are only counted)", what, exc_info=True)

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
