"""An LLM judge: a generative model on the reward rank that reads each response and writes a
verdict, from which a parse rule reads the score.

The judge runs through the generators' engine classes (``engine: torch``, our decode loop on
the rank's device; ``engine: vllm``, an in-process vLLM, for GPUs): every response of a call
in one ``generate`` (one sample each, greedy by default). Its prompt is the ``template``
filled with the prompt, the response and the reference answer (``judge_prompt``), rendered
as a user turn with the judge's own chat template when it has one; prompts longer than the
judge's context keep their end and are counted (``<label>/truncated``).

A verdict the rule cannot read is a parse failure (``<label>/parse_failed``): by default the
sample is not scored (it scores 0 and is counted among the step's failures, as a verifier
that raises); ``on_parse_failure: <number>`` gives it that raw score instead. The judge's
output text goes to ``samples.jsonl`` (``notes``) for the samples shown. A judge that never
stops is cut at ``max_new_tokens`` (then usually a parse failure); one that raises fails
its call's responses (``roles.rewards.scoring``).

The Config is checked on the controller from config.json alone (nothing is loaded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from roles.models import config_int, read_lm_config
from roles.rewards.learned.base import LearnedConfig, LearnedReward, RawScore, ScoreItem, ScorerContext
from roles.rewards.learned.judge_prompt import check_parse_rule, check_template, fill, parse_score


class JudgeConfig(LearnedConfig):
    # A local Hugging Face folder, or a Hub name (owner/name[@revision]) in the local cache:
    # a *ForCausalLM model with its tokenizer.
    path: str
    engine: Literal["torch", "vllm"] = "torch"  # the generators' engine classes; vllm for GPUs
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # the judge's own precision
    # torch engine: auto = the rank's GPU when it has one, else CPU. vLLM takes its platform's device.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # What the judge reads (judge_prompt): str.format fields {prompt}, {response} (required),
    # {answer}; literal braces doubled.
    template: str
    chat_template: bool = True  # the filled template as a user turn of the judge's chat template, if any
    parse: str  # a regex with one capture group around the score (judge_prompt)
    match: Literal["first", "last"] = "last"  # which match of the rule is the verdict
    max_new_tokens: int = Field(64, gt=0)  # the verdict's length limit (a judge that never stops ends here)
    temperature: float = Field(0.0, ge=0)  # 0: greedy
    # Tokens of the judge's prompt (after its chat template); longer ones keep their end, counted.
    # None: the judge's context (config.json) less max_new_tokens.
    max_prompt_tokens: int | None = Field(None, gt=0)
    # What a verdict the rule cannot read scores: "fail" (not scored: 0, counted as a failure)
    # or a raw score given instead (shaped like the others). Either way <label>/parse_failed.
    on_parse_failure: Literal["fail"] | float = "fail"
    score_min: float | None = None  # parsed scores below are raised to it (<label>/clamped)
    score_max: float | None = None  # parsed scores above are lowered to it
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1)  # engine: vllm on a GPU: its share of the device

    @field_validator("path")
    @classmethod
    def _a_causal_lm(cls, path: str) -> str:
        from roles.hub_cache import model_folder

        path = model_folder(path)
        check_causal_lm_folder(path)
        return path

    @field_validator("template")
    @classmethod
    def _template(cls, template: str) -> str:
        return check_template(template)

    @field_validator("parse")
    @classmethod
    def _parse(cls, rule: str) -> str:
        check_parse_rule(rule)
        return rule

    @model_validator(mode="after")
    def _fits(self) -> JudgeConfig:
        if self.engine == "vllm" and self.device != "auto":
            raise ValueError(f"device: {self.device!r} applies to engine: torch; vLLM runs on its platform's device")
        if self.score_min is not None and self.score_max is not None and self.score_min >= self.score_max:
            raise ValueError(f"score_min ({self.score_min}) must be below score_max ({self.score_max})")
        self.prompt_token_limit()
        return self

    def context_length(self) -> int | None:
        return config_int(read_lm_config(self.path), "max_position_embeddings")

    def prompt_token_limit(self) -> int:
        """The longest judge prompt, in tokens (``ValueError`` naming the field when none fits)."""
        context = self.context_length()
        if context is not None and self.max_new_tokens >= context:
            raise ValueError(
                f"max_new_tokens ({self.max_new_tokens}) leaves no room in the judge's context ({context})"
            )
        if self.max_prompt_tokens is None:
            if context is None:
                raise ValueError(f"{self.path!r} states no context length (config.json): set max_prompt_tokens")
            return context - self.max_new_tokens
        if context is not None and self.max_prompt_tokens + self.max_new_tokens > context:
            raise ValueError(
                f"max_prompt_tokens ({self.max_prompt_tokens}) + max_new_tokens ({self.max_new_tokens}) "
                f"exceed the judge's context ({context})"
            )
        return self.max_prompt_tokens


def check_causal_lm_folder(path: str) -> None:
    """A ``ValueError`` unless ``path`` holds a causal LM (``*ForCausalLM``, from config.json alone)."""
    from roles.models import folder_config

    architectures = folder_config(path).get("architectures") or []
    if not any(str(a).endswith("ForCausalLM") for a in architectures):
        raise ValueError(
            f"{path!r} is not a causal language model (its architectures are {architectures or 'not given'}; "
            "a judge generates its verdict: *ForCausalLM)"
        )


class Judge(LearnedReward):
    Config = JudgeConfig

    def __init__(self, config: JudgeConfig, context: ScorerContext):
        super().__init__(config, context)
        import re

        from roles.rewards.learned.conversation import uses_template
        from roles.rewards.learned.judge_engine import build_judge_engine

        self.engine, self.tokenizer = build_judge_engine(config, context)
        self.use_template = uses_template(self.tokenizer, config.chat_template)
        self.pattern = re.compile(config.parse)
        self.prompt_limit = config.prompt_token_limit()
        self.calls = 0  # generate calls so far: a sampling judge draws anew each call

    def score_raw(self, items: Sequence[ScoreItem]) -> list[RawScore]:
        from roles.rewards.learned.conversation import encode

        texts = [self.judge_prompt(item) for item in items]
        ids, cut = encode(self.tokenizer, texts, self.use_template, self.prompt_limit)
        return [self.verdict(text, c) for text, c in zip(self.generate(ids), cut)]

    def judge_prompt(self, item: ScoreItem) -> str:
        """The text the judge reads for ``item``: the filled template, as a user turn of its
        chat template (with the assistant's turn opened) when it has one."""
        filled = fill(self.config.template, item)
        if not self.use_template:
            return filled
        turn = [{"role": "user", "content": filled}]
        return self.tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)

    def generate(self, ids: list[list[int]]) -> list[str]:
        """The judge's output text for each prompt, all in one engine call (an empty prompt,
        which no engine takes, gets an empty verdict)."""
        import numpy as np

        from roles.engines.base import SamplingConfig

        cfg = self.config
        self.calls += 1
        seed = np.random.SeedSequence([self.context.seed, self.context.rank_index, self.calls]).generate_state(1)[0]
        sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=int(seed >> 1))
        asked = [i for i, x in enumerate(ids) if x]
        out = [""] * len(ids)
        if asked:
            groups = self.engine.generate([np.asarray(ids[i], dtype=np.int32) for i in asked], 1, sampling)
            for i, group in zip(asked, groups):
                out[i] = self.tokenizer.decode(np.asarray(group[0].response_ids).tolist(), skip_special_tokens=True)
        return out

    def verdict(self, text: str, truncated: bool) -> RawScore:
        """The raw score of one judge output (``note``: the output itself)."""
        cfg = self.config
        extras = {"parse_failed": 0.0, "truncated": float(truncated)}
        value = parse_score(text, self.pattern, last=cfg.match == "last")
        if value is None:
            extras["parse_failed"] = 1.0
            fallback = None if cfg.on_parse_failure == "fail" else float(cfg.on_parse_failure)
            return RawScore(fallback, note=text, extras=extras)
        if cfg.score_min is not None or cfg.score_max is not None:
            low = cfg.score_min if cfg.score_min is not None else value
            high = cfg.score_max if cfg.score_max is not None else value
            clamped = min(max(value, low), high)
            extras["clamped"] = float(clamped != value)
            value = clamped
        return RawScore(value, note=text, extras=extras)

    def close(self) -> None:
        self.engine = None
