"""The run's data, prepared once before any work: the task built, its prompts rendered.

Rank 0 (the controller) does this before the job builds anything collective, so a data
mistake — a missing file, a column absent, no usable rows, every prompt too long, no eval
split for an eval — stops every rank with exit 2 and one message naming the field, the way
a bad role map does (``launch/main.py``). ``mpirl check`` runs the same preparation. The
model folder's files are checked here too, the tokenizer and the weights' headers
(``launch/preflight/model_files.py``): read by every model rank only later, once they have started.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np

from launch.config import ConfigError, RoleMap


@dataclass
class PreparedData:
    train_prompts: dict[int, np.ndarray]  # example id -> prompt token ids
    eval_prompts: dict[int, np.ndarray]  # the examples an eval round sends, in order
    stats: dict = field(default_factory=dict)  # counts logged with every step and in the summary
    tokenizer_class: str | None = None  # roles.models.tokenizer.class_ref_of: what the reward ranks load
    eval_split: int = 0  # the task's eval examples (eval_files, eval_fraction), used or not
    # Unusable rows a file-backed task skipped, per field: {"task.train_files[0]": {reason: n}}.
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    # task.chat_template is on but the tokenizer has none, so prompts go as plain text: right
    # for a base model, and with an instruct model's folder missing its template, a mistake
    # that nothing else would show.
    untemplated: bool = False
    eos_id: int | None = None  # the tokenizer's EOS: a response ends there too (roles/engines)

    @cached_property
    def train_fingerprint(self) -> str:
        """``roles.prompt_stream.fingerprint`` of the training prompts, worked out once: the
        resume check and the controller both need it."""
        from roles.prompt_stream import fingerprint

        return fingerprint(self.train_prompts)

    def describe(self, task_name: str) -> str:
        s = self.stats
        if s["eval_examples"] or not self.eval_split:
            text = f"task {task_name}: {s['train_examples']} train / {s['eval_examples']} eval examples"
        else:  # evaluation is off (on, an eval without prompts is refused): the split goes unused
            text = (
                f"task {task_name}: {s['train_examples']} train examples; the {self.eval_split} eval "
                "examples are read but unused: evaluation is off (eval.every_steps 0)"
            )
        if s["prompts_too_long"] or s["eval_prompts_too_long"]:
            text += (
                f"; left out for length (> {s['prompt_token_limit']} tokens): "
                f"{s['prompts_too_long']} train, {s['eval_prompts_too_long']} eval prompts"
            )
        text += f"; longest prompt {s['longest_prompt']} tokens"
        if self.untemplated:
            text += "; prompts as plain text (the tokenizer at model.path has no chat template)"
        # Rows left out of the data must be seen where the counts are: a column of nulls, or
        # answers without '#### N', otherwise shrink the data set without a word.
        skipped = {f: reasons for f, reasons in self.skipped.items() if reasons}
        if skipped:
            total = sum(n for reasons in skipped.values() for n in reasons.values())
            per_file = "; ".join(
                f"{f}: " + ", ".join(f"{n} with {why}" for why, n in sorted(reasons.items(), key=lambda r: -r[1]))
                for f, reasons in skipped.items()
            )
            text += f"; {total} unusable row{'s' if total != 1 else ''} skipped ({per_file})"
        return text


def check_model_files(cfg: RoleMap) -> None:
    """The model's config.json readable with a model_type; its safetensors files whole and
    consistent, by their headers (never their data), and its index, if any, naming only files
    and tensors that are there: a ``ConfigError``."""
    from launch.preflight.model_files import WeightFileError, check_config_file, check_weight_files, has_safetensors

    try:
        check_config_file(cfg.model.path)  # before the tokenizer, whose loader reads it too
        check_weight_files(cfg.model.path)
    except WeightFileError as e:
        raise ConfigError(f"model.path: {e}") from None
    # vLLM generators take their parameter names from the safetensors headers (and the weight
    # pushes then fill them): a pytorch_model.bin-only folder loads on the torch engine and
    # the trainers, but not on a vLLM generator.
    generates = cfg.world.generator.ranks or cfg.world.colocated.ranks
    if generates and cfg.world.generator.engine == "vllm" and not has_safetensors(cfg.model.path):
        raise ConfigError(
            f"world.generator.engine: vllm reads safetensors weights, and {cfg.model.path} holds only "
            "pytorch_model.bin: save the model with safe_serialization (save_pretrained's default), "
            "or use engine: torch"
        )


def load_tokenizer(cfg: RoleMap):
    """The model's tokenizer, as AutoTokenizer loads it (roles/models/tokenizer.py), and its class_ref."""
    from roles.models.tokenizer import load_tokenizer as load

    try:
        return load(cfg.model.path)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises, name the folder
        raise ConfigError(
            f"model.path: cannot load a tokenizer from {cfg.model.path!r}: {type(e).__name__}: {e}"
        ) from None


# An example id travels in the rollout messages (PromptBatch.example_ids, Rollout.example_id,
# EvalScored.example_id): the codec (transports/codec/) packs it as a msgpack integer, 64
# bits signed or unsigned, and the receiver takes only an int there (numpy integers are sent as
# ints; a bool, a str or a float is refused): an id past that would fail at the first batch sent.
ID_MIN, ID_MAX = -(2**63), 2**64 - 1


def _id_problem(example_id) -> str | None:
    if isinstance(example_id, (bool, np.bool_)) or not isinstance(example_id, (int, np.integer)):
        return f"its id is a {type(example_id).__name__}, not an int: messages carry example ids as integers"
    if not ID_MIN <= int(example_id) <= ID_MAX:
        return (
            f"its id {int(example_id)} does not fit in 64 bits: messages carry example ids as msgpack "
            "integers, from -2**63 to 2**64 - 1"
        )
    return None


def _pickle_problem(example) -> str | None:
    """Why ``example`` cannot go to a reward worker, naming the field (and metadata key) at fault.

    Only the id crosses MPI; the reward ranks find the example in their own copy of the task and
    send it, with each response, pickled to their scoring processes (roles/rewards/sandbox.py),
    which would raise mid-run on an example that does not pickle. One pickle per example, as
    the runtime pickles it.
    """
    try:
        pickle.dumps(example, pickle.HIGHEST_PROTOCOL)
        return None
    except Exception as e:  # noqa: BLE001 - whatever pickling raises, found and named below
        error = f"{type(e).__name__}: {e}"
    parts = list(getattr(example, "__dict__", {}).items())
    metadata = getattr(example, "metadata", None)
    if isinstance(metadata, Mapping):
        parts = [(f"metadata[{k!r}]", v) for k, v in metadata.items()] + parts
    for name, value in parts:
        try:
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - this is the part at fault
            what = f"{type(value).__module__}.{type(value).__qualname__}"
            return (
                f"its {name} holds a {what}, which cannot be pickled to the reward ranks' scoring processes ({error})"
            )
    return f"it (a {type(example).__name__}) cannot be pickled to the reward ranks' scoring processes ({error})"


def check_sendable(task_name: str, split: str, examples) -> None:
    """Every example's id fits the rollout messages and the example pickles as the reward ranks
    send it: a ``ConfigError`` naming the task, the example and the field, before any work."""
    for ex in examples:
        problem = _id_problem(ex.id) or _pickle_problem(ex)
        if problem:
            raise ConfigError(f"task: task {task_name!r}, {split} example {ex.id!r}: {problem}")


def _raised_at(e: BaseException) -> str:
    """`` (file.py:LINE)`` of the innermost frame that raised ``e``: where to look, in one line."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def prepare_data(cfg: RoleMap, tokenizer=None) -> PreparedData:
    """Check the model's files, build the task and encode its prompts; any problem is a
    ``ConfigError`` naming the field."""
    check_model_files(cfg)
    tokenizer_class = None
    if tokenizer is None:
        tokenizer, tokenizer_class = load_tokenizer(cfg)
    limit = cfg.prompt_token_limit()
    encoded = _encode_task(cfg, tokenizer, limit)
    _check_prompts_kept(cfg, encoded, limit)
    stats = _stats(encoded, limit)
    _check_memory(cfg, stats["longest_prompt"])
    skipped = dict(getattr(encoded.task, "skipped", None) or {})  # FileTask's; a user task may have none
    untemplated = bool(cfg.task.chat_template) and not getattr(tokenizer, "chat_template", None)
    return PreparedData(
        encoded.train.ids,
        encoded.evals.ids,
        stats,
        tokenizer_class,
        eval_split=len(encoded.eval_examples),
        skipped=skipped,
        untemplated=untemplated,
        eos_id=None if tokenizer.eos_token_id is None else int(tokenizer.eos_token_id),
    )


class _Encoded(NamedTuple):
    task: object
    train_examples: list  # every training example of the task
    eval_examples: list  # every eval example, used or not
    train: object  # roles.tasks.prompts.EncodedPrompts of the training examples
    evals: object  # those of the eval examples an eval round sends


def _encode_task(cfg: RoleMap, tokenizer, limit: int | None) -> _Encoded:
    """The task built and its prompts encoded; a failure, the task's own included, is a ``ConfigError``."""
    from roles.plugins import PluginError
    from roles.tasks import TaskDataError, build_task
    from roles.tasks.prompts import encode_prompts

    try:
        task = build_task(cfg.task, seed=cfg.run.seed)
        train_examples = task.examples("train")
        eval_examples = task.examples("eval")
        if not train_examples:
            raise ConfigError(f"task: task {cfg.task.name!r} has no training examples")
        task.check_ids()  # ids that repeat across the splits would score against the wrong answer
        chosen = eval_examples[: cfg.eval.examples] if cfg.eval.enabled else []
        check_sendable(cfg.task.name, "train", train_examples)
        check_sendable(cfg.task.name, "eval", chosen)
        tools = None
        if cfg.environment is not None:  # prompts as the episodes open them: with the tools
            from launch.preflight.episodes import episode_tools

            tools = episode_tools(cfg, tokenizer) or None
        train = encode_prompts(tokenizer, train_examples, cfg.task, limit, tools=tools)
        evals = encode_prompts(tokenizer, chosen, cfg.task, limit, tools=tools)
    except (TaskDataError, PluginError) as e:
        raise ConfigError(str(e)) from None
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a user task's own failure, named with where it was raised
        raise ConfigError(f"task: task {cfg.task.name!r} failed: {type(e).__name__}: {e}{_raised_at(e)}") from None
    return _Encoded(task, train_examples, eval_examples, train, evals)


def _check_prompts_kept(cfg: RoleMap, encoded: _Encoded, limit: int | None) -> None:
    """Some training prompts fit the limit, and some eval prompts when evaluation is on."""
    if not encoded.train.ids:
        raise ConfigError(
            f"task.max_prompt_tokens: every one of the {len(encoded.train_examples)} training prompts "
            f"is longer than {limit} tokens (the longest prompt kept; raise the limit, or "
            f"lower {_longest_response_field(cfg)} if the model's context is what limits it)"
        )
    if cfg.eval.enabled and not encoded.evals.ids:
        why = (
            "the task has no eval examples (set task.eval_files or task.eval_fraction)"
            if not encoded.eval_examples
            else f"every eval prompt is longer than {limit} tokens"
        )
        raise ConfigError(
            f"eval: evaluation is on (every_steps {cfg.eval.every_steps}, before_training "
            f"{cfg.eval.before_training}) but {why}"
        )


def _stats(encoded: _Encoded, limit: int | None) -> dict:
    train, evals = encoded.train, encoded.evals
    return {
        "train_examples": len(train.ids),
        "eval_examples": len(evals.ids),
        "prompts_too_long": len(train.too_long),
        "eval_prompts_too_long": len(evals.too_long),
        "prompt_token_limit": limit,
        "longest_prompt": max(train.longest, evals.longest),
    }


def _check_memory(cfg: RoleMap, longest_prompt: int) -> None:
    from launch.preflight.sizing import check_memory

    try:  # the role map's check counted 1-token prompts; now the longest is known
        check_memory(cfg, longest_prompt=longest_prompt)
    except ValueError as e:
        raise ConfigError(f"task: with prompts of up to {longest_prompt} tokens, {e}") from None


def _longest_response_field(cfg) -> str:
    """The field that sets the longest response, which the default prompt limit leaves room
    for: eval.max_new_tokens when it is the larger (naming rollout's would not help)."""
    if (cfg.eval.max_new_tokens or 0) > cfg.rollout.max_new_tokens:
        return f"eval.max_new_tokens ({cfg.eval.max_new_tokens})"
    return f"rollout.max_new_tokens ({cfg.rollout.max_new_tokens})"
