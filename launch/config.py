"""The role-map file: its schema, validation and the rank -> role assignment.

Everything is checked before any work starts. A mistake — an unknown key, a wrong type, a
non-positive size, a missing model folder — becomes one :class:`ConfigError` whose text
names the field (``run.steps: must be > 0, got 0``). Relative paths are taken from the
directory ``mpirun`` was started in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# Ranks are handed out in this order; a role with 0 ranks takes none.
ROLE_ORDER = ("controller", "generator", "colocated", "reward", "trainer")


class ConfigError(ValueError):
    """An invalid role map; the message names the field and the problem."""


class _Section(BaseModel):
    # Unknown keys are errors (a typo must not silently fall back to a default). Strict types:
    # `steps: true`, `steps: 2.5` or `ranks: "2"` are mistakes to name, not values to coerce
    # (an int is still a valid float).
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True)


# ----------------------------------------------------------------------------- world


class RoleGroup(_Section):
    ranks: int = Field(1, gt=0)  # how many MPI ranks play this role


class OptionalGroup(_Section):
    ranks: int = Field(0, ge=0)  # 0: the role is not used


class GeneratorGroup(_Section):
    ranks: int = Field(1, ge=0)  # generator ranks (0 only in colocated mode)
    engine: Literal["torch", "vllm"] = "torch"  # torch: our KV-cache sampler; vllm: in-process vllm.LLM
    tensor_parallel: int = Field(1, gt=0)  # devices one vLLM engine spans (GPU only)
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)  # vLLM's share of device memory
    batch_prompts: int = Field(0, ge=0)  # prompts per generation batch; 0 = prompts_per_step / generators
    # vLLM: torch.compile the model (and CUDA graphs on GPUs). None = on GPUs, off on CPU, where
    # compiling costs about a minute at start-up (it then samples ~1.3x faster: bench/generation.py).
    compile: bool | None = None

    @model_validator(mode="after")
    def _vllm_only_options(self) -> "GeneratorGroup":
        if self.engine != "vllm":
            for name in ("compile",):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies to engine: vllm only (engine is {self.engine!r})")
        return self


class TrainerGroup(_Section):
    ranks: int = Field(1, ge=0)  # trainer ranks (0 only in colocated mode); > 1 shards with FSDP2


def _shorthand(value):
    """``generator: 2`` means ``generator: {ranks: 2}``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"ranks": value}
    return value


class World(_Section):
    controller: RoleGroup = RoleGroup()  # exactly one rank: it owns the loop and the data
    generator: GeneratorGroup = GeneratorGroup()
    reward: RoleGroup = RoleGroup()
    trainer: TrainerGroup = TrainerGroup()
    # The DeepSpeed-Chat-like baseline: these ranks both generate and train, taking turns
    # (generation uses the generator options above). Needs generator = trainer = 0.
    colocated: OptionalGroup = OptionalGroup()

    _wrap = field_validator("controller", "generator", "colocated", "reward", "trainer", mode="before")(
        lambda cls, v: _shorthand(v)
    )

    @field_validator("controller")
    @classmethod
    def _one_controller(cls, v: RoleGroup) -> RoleGroup:
        if v.ranks != 1:
            raise ValueError(f"there must be exactly 1 controller rank, got {v.ranks}")
        return v

    @model_validator(mode="after")
    def _one_layout(self) -> "World":
        if self.colocated.ranks:
            if self.generator.ranks or self.trainer.ranks:
                raise ValueError(
                    "colocated ranks generate and train themselves; set generator and "
                    f"trainer to 0 (got generator {self.generator.ranks}, trainer {self.trainer.ranks})"
                )
        elif not (self.generator.ranks and self.trainer.ranks):
            raise ValueError(
                "needs at least 1 generator and 1 trainer rank "
                f"(got generator {self.generator.ranks}, trainer {self.trainer.ranks}), or colocated ranks"
            )
        return self

    @property
    def colocated_mode(self) -> bool:
        return self.colocated.ranks > 0

    @property
    def train_role(self) -> str:
        """The role whose ranks train (and receive scored rollouts)."""
        return "colocated" if self.colocated_mode else "trainer"

    @property
    def generate_role(self) -> str:
        return "colocated" if self.colocated_mode else "generator"

    def counts(self) -> dict[str, int]:
        """Ranks per role, for the roles that have any."""
        return {role: getattr(self, role).ranks for role in ROLE_ORDER if getattr(self, role).ranks}

    @property
    def size(self) -> int:
        return sum(self.counts().values())

    def roles_by_rank(self) -> list[str]:
        return [role for role, n in self.counts().items() for _ in range(n)]


# ------------------------------------------------------------------------- sections


class ModelSection(_Section):
    path: str  # folder with a Hugging Face causal LM (config, safetensors, tokenizer)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # parameter dtype everywhere

    @field_validator("path")
    @classmethod
    def _exists(cls, v: str) -> str:
        p = Path(v)
        if not p.is_dir():
            raise ValueError(f"no model folder at {v!r} (resolved to {p.resolve()})")
        if not (p / "config.json").is_file():
            raise ValueError(f"{v!r} has no config.json: not a Hugging Face model folder")
        return v

    def context_length(self) -> int | None:
        """``max_position_embeddings`` of the model's config.json (None when it has none)."""
        import json

        try:
            data = json.loads((Path(self.path) / "config.json").read_text())
        except (OSError, ValueError):
            return None
        if isinstance(data.get("text_config"), dict):  # multimodal configs nest the LM's
            data = {**data, **data["text_config"]}
        n = data.get("max_position_embeddings")
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


class RolloutSection(_Section):
    prompts_per_step: int = Field(16, gt=0)  # prompt groups the trainer consumes per step
    samples_per_prompt: int = Field(8, gt=0)  # group size n for the group baseline
    max_new_tokens: int = Field(16, gt=0)  # response length cap
    temperature: float = Field(1.0, gt=0)  # sampling temperature (the trainer uses the same)
    top_p: float = Field(1.0, gt=0, le=1)  # nucleus mass; < 1 truncates the behaviour policy


class AlgorithmSection(_Section):
    loss: Literal["aipo", "grpo"] = "aipo"  # aipo: ratio clipped from above only (LlamaRL)
    rho: float = Field(4.0, ge=1)  # AIPO's clip on the importance ratio; paper: 2..10
    clip_eps: float = Field(0.2, gt=0, lt=1)  # GRPO's PPO clip range
    # GRPO's weight of the k3 KL to the reference policy (the model.path weights, kept frozen on
    # every training rank, sharded like the policy). 0 = no reference model is loaded.
    kl_coef: float = Field(0.0, ge=0)
    advantage: Literal["group_mean", "group_std", "leave_one_out"] = "group_mean"  # baseline
    lr: float = Field(3.0e-5, gt=0)  # AdamW learning rate
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, ge=0)  # max gradient norm; 0 disables clipping
    micro_batch: int = Field(64, gt=0)  # sequences per forward/backward (gradient accumulation)
    # Leave out of the forward/backward the groups whose samples all scored the same: their
    # advantages are 0, so the update is unchanged and their compute is saved. (Not with a KL
    # term, which such samples still feed.)
    skip_zero_advantage: bool = True

    @model_validator(mode="after")
    def _kl_with_grpo(self) -> "AlgorithmSection":
        if self.kl_coef and self.loss != "grpo":
            raise ValueError(
                f"algorithm.kl_coef ({self.kl_coef}) applies to loss: grpo only (AIPO has no KL term); "
                f"loss is {self.loss!r}"
            )
        return self


# The task and reward sections belong to their components: each built-in or user task and
# reward declares its own Config (roles.tasks / roles.rewards), and the role map validates the
# section against that class, so a typo in a task option is named like any other field.


def _nested_error(loc: tuple, message: str, value) -> ValidationError:
    """A validation error at ``loc`` inside the field being validated (so it reads task.name: ...)."""
    return ValidationError.from_exception_data(
        "RoleMap", [{"type": "value_error", "loc": loc, "input": value, "ctx": {"error": ValueError(message)}}]
    )


def _task_section(value):
    """``task: {name: ..., <the task's own options>}`` validated by that task's Config."""
    from roles.plugins import PluginError
    from roles.tasks import TASKS, task_class

    if not isinstance(value, dict):
        raise ValueError(f"a mapping with the task's name and options, got {type(value).__name__}")
    if "name" not in value:
        raise _nested_error(("name",), "required but missing (a built-in task: "
                            f"{', '.join(sorted(TASKS))}; or package.module:Class)", value)
    name = value["name"]
    if not isinstance(name, str):
        raise _nested_error(("name",), f"a task name is a string, got {name!r}", name)
    try:
        cls = task_class(name)
    except PluginError as e:
        raise _nested_error(("name",), str(e), name) from None
    return cls.Config.model_validate(value)


class RewardComponent(_Section):
    """One scorer of a (possibly weighted) reward; its options are checked by its own Config."""

    name: str  # a built-in (roles.rewards.REWARDS) or "package.module:function" / ":Class"
    weight: float = 1.0  # the reward is the weighted sum of its components' scores
    # The name it is logged under (default: the name, or for package.module:fn just fn); unique.
    label: str | None = None
    options: dict = {}  # the reward's own options (written beside name in the role map)

    @model_validator(mode="before")
    @classmethod
    def _options_beside_name(cls, value):
        from roles.plugins import PluginError
        from roles.rewards import options_class, reward_object

        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return value  # pydantic names what is missing or mistyped
        own = {"name", "weight", "label"}
        options = {k: v for k, v in value.items() if k not in own}
        try:
            reward_object(value["name"])
            schema = options_class(value["name"])
        except PluginError as e:
            raise _nested_error(("name",), str(e), value["name"]) from None
        if schema is not None:
            schema.model_validate(options)  # raises with each option's location
        elif options:
            raise _nested_error((sorted(options)[0],), f"reward {value['name']!r} takes no options "
                                f"(got {', '.join(sorted(options))})", options)
        return {**{k: v for k, v in value.items() if k in own}, "options": options}

    @property
    def logged_as(self) -> str:
        return self.label or self.name.rpartition(":")[2]


class RewardSection(_Section):
    # What scores a response. Written as a name (reward: gsm8k), one component with its options
    # (reward: {name: format, boxed: true}), or weighted components (a list, or components:).
    # Empty: the task's default reward (gsm8k -> gsm8k, math -> math_verify).
    components: list[RewardComponent] = []
    # Seconds one response may take to score (all components); past it the scorer's process is
    # killed and the response scores 0 (counted in verifier_timeouts). Holds even inside C code.
    timeout_s: float = Field(5.0, gt=0)
    workers: int = Field(1, gt=0)  # scorer processes per reward rank (give a rank as many cores)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value):
        if value is None:
            return {}
        if isinstance(value, (str, list)):
            return {"components": value if isinstance(value, list) else [value]}
        if isinstance(value, dict) and "name" in value:
            section = {k: value[k] for k in ("timeout_s", "workers") if k in value}
            return {**section, "components": [{k: v for k, v in value.items() if k not in section}]}
        return value

    @field_validator("components")
    @classmethod
    def _unique_labels(cls, v: list[RewardComponent]) -> list[RewardComponent]:
        seen = [c.logged_as for c in v]
        for label in seen:
            if "/" in label or label in ("correct", "score"):
                raise ValueError(f"a component cannot be logged as {label!r} (no '/', and 'correct' and "
                                 "'score' are the reward's own keys): give it another label")
            if seen.count(label) > 1:
                raise ValueError(f"two components are logged as {label!r}: give one a label")
        return v


class EvalSection(_Section):
    # Evaluate the newest policy on the task's eval split every this many steps (0: never
    # during training). Eval prompts go through the same generators and reward ranks, tagged
    # so no trainer sees them; a run with eval also evaluates its final policy.
    every_steps: int = Field(0, ge=0)
    before_training: bool = False  # also evaluate the starting policy (version 0)
    examples: int | None = Field(None, gt=0)  # the first N eval examples (None: all of them)
    # Greedy decoding always gives pass@1; samples: k also draws k responses per example at
    # `temperature` for mean@k and pass@k (unbiased estimator).
    samples: int = Field(0, ge=0)
    temperature: float = Field(1.0, gt=0)
    max_new_tokens: int | None = Field(None, gt=0)  # None: rollout.max_new_tokens

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0 or self.before_training


class WeightsSection(_Section):
    transport: Literal["torch", "mpi"] = "torch"  # torch.distributed (gloo/NCCL) or MPI buffers
    bucket_mb: int = Field(64, gt=0)  # flat buffer size for bucketed point-to-point sends


class RunSection(_Section):
    steps: int = Field(gt=0)  # trainer steps before the controller stops the job
    max_staleness: int = Field(1, ge=0)  # 0 = on-policy; k = generate with weights <= k versions old
    seed: int = 0
    out: str = "runs/default"  # metrics.jsonl, summary.json, traces go here
    progress: bool = True  # progress bar on the controller's terminal
    timeout_s: float = Field(3600.0, gt=0)  # a step that makes no progress this long aborts the job


class RoleMap(_Section):
    world: World = World()
    model: ModelSection
    rollout: RolloutSection = RolloutSection()
    algorithm: AlgorithmSection = AlgorithmSection()
    # The prompt source (roles.tasks): its name and its own options.
    task: Any
    reward: RewardSection = RewardSection()
    eval: EvalSection = EvalSection()
    weights: WeightsSection = WeightsSection()
    run: RunSection

    _task = field_validator("task", mode="before")(lambda cls, v: _task_section(v))

    @model_validator(mode="after")
    def _reward_of_the_task(self) -> "RoleMap":
        if not self.reward.components:
            from roles.tasks import task_class

            default = task_class(self.task.name).default_reward
            if default is None:
                raise ValueError(f"reward: task {self.task.name!r} has no default reward; name one "
                                 "(reward: {name: exact}, or package.module:function)")
            self.reward = RewardSection.model_validate(
                {"components": [default], "timeout_s": self.reward.timeout_s, "workers": self.reward.workers})
        return self

    @model_validator(mode="after")
    def _prompts_fit_the_context(self) -> "RoleMap":
        context = self.model.context_length()
        limit, new = self.task.max_prompt_tokens, self.longest_response()
        which = "eval.max_new_tokens" if new > self.rollout.max_new_tokens else "rollout.max_new_tokens"
        if context is not None:
            if new >= context:
                raise ValueError(f"{which} ({new}) leaves no room for a prompt in "
                                 f"the model's context of {context} tokens (max_position_embeddings)")
            if limit is not None and limit + new > context:
                raise ValueError(f"task.max_prompt_tokens ({limit}) + {which} ({new}) "
                                 f"exceeds the model's context of {context} tokens (max_position_embeddings)")
        return self

    def longest_response(self) -> int:
        """The most tokens any response may take (training or evaluation)."""
        return max(self.rollout.max_new_tokens, self.eval.max_new_tokens or 0)

    def prompt_token_limit(self) -> int | None:
        """Longest prompt kept: task.max_prompt_tokens, else what the model's context leaves."""
        if self.task.max_prompt_tokens is not None:
            return self.task.max_prompt_tokens
        context = self.model.context_length()
        return None if context is None else context - self.longest_response()

    @model_validator(mode="after")
    def _batches_fit(self) -> "RoleMap":
        trainers = self.world.colocated.ranks or self.world.trainer.ranks
        if self.rollout.prompts_per_step % trainers:
            raise ValueError(
                f"rollout.prompts_per_step ({self.rollout.prompts_per_step}) must divide evenly "
                f"over the {trainers} training ranks (each trains on an equal share)"
            )
        if self.world.colocated_mode and self.run.max_staleness != 0:
            raise ValueError(
                "run.max_staleness: colocated ranks take turns, so they are synchronous; "
                f"set it to 0 (got {self.run.max_staleness})"
            )
        g = self.world.generator
        if g.batch_prompts and g.batch_prompts > self.rollout.prompts_per_step:
            raise ValueError(
                f"world.generator.batch_prompts ({g.batch_prompts}) exceeds "
                f"rollout.prompts_per_step ({self.rollout.prompts_per_step})"
            )
        return self

    def generator_batch_prompts(self) -> int:
        g = self.world.generator
        n = self.world.colocated.ranks or g.ranks
        return g.batch_prompts or max(1, -(-self.rollout.prompts_per_step // n))


# ------------------------------------------------------------------------- loading


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        # Checks across sections have no location: their message starts with the field.
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
        if not where:
            lines.append(e["msg"].removeprefix("Value error, "))
        elif e["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key")
        elif e["type"] == "missing":
            lines.append(f"{where}: required but missing")
        elif e["type"] == "value_error":  # our own validators already name the value
            lines.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"{where}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(lines)


def parse(data: dict, source: str = "<config>") -> RoleMap:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a role map is a YAML mapping, got {type(data).__name__}")
    try:
        return RoleMap.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_format(e)}") from None


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but ``1e-5`` is a float (YAML 1.1 wants ``1.0e-5``; 1.2 and users
    do not)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """Parse role-map YAML (safe: no Python objects), with numbers read as users write them."""
    return yaml.load(text, Loader=_YamlLoader)


def load(path: str | Path) -> RoleMap:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no role-map file at {str(path)!r}")
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return parse(data, str(path))


def check_world_size(cfg: RoleMap, size: int, source: str = "<config>") -> None:
    if cfg.world.size != size:
        parts = " + ".join(f"{r} {n}" for r, n in cfg.world.counts().items())
        raise ConfigError(
            f"{source}: world: the role map asks for {cfg.world.size} ranks ({parts}) "
            f"but the job has {size}; run it with mpirun -n {cfg.world.size}"
        )


def rank_table(cfg: RoleMap) -> str:
    rows = ["rank  role        index"]
    counters: dict[str, int] = {}
    for rank, role in enumerate(cfg.world.roles_by_rank()):
        i = counters.get(role, 0)
        counters[role] = i + 1
        rows.append(f"{rank:>4}  {role:<10}  {i:>5}")
    return "\n".join(rows)
