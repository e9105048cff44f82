"""The role map's schema: its sections, the checks of their values, the rank -> role assignment.

A mistake — an unknown key, a wrong type, a non-positive size, sizes that do not fit together —
becomes one :class:`ConfigError` whose text names the field (``run.steps: must be > 0, got 0``).
Relative paths are taken from the directory ``mpirun`` was started in.

Knows nothing of the file (``launch/role_map_file.py`` reads it) nor of this machine: the checks
that read the disk or ask the host (the model's context, the logging packages, memory, the job's
size) are ``launch/preflight/__init__.py``'s, run after these. Each section checks its own fields, as its
component (``roles.*``) declares them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from launch.combinations import check_combinations
from roles.engines.base import EngineConfig
from roles.models import ModelConfig
from roles.policy.weight_transport import WeightsConfig
from roles.sections.base import Section
from roles.sections.checkpoint import CheckpointConfig
from roles.sections.controller import ControllerConfig
from roles.sections.critic import CriticConfig
from roles.sections.evaluation import EvalConfig
from roles.sections.observability import LoggingConfig
from roles.sections.reward import RewardSection
from roles.sections.rollout import RolloutConfig
from roles.sections.trainer import TrainerConfig
from roles.tasks import task_section

if TYPE_CHECKING:
    from roles.checkpoint.plan import CheckpointPlan
    from roles.protocol import Routes, Schedule

# Ranks are handed out in this order; a role with 0 ranks takes none.
ROLE_ORDER = ("controller", "generator", "colocated", "reward", "trainer", "critic")

# The exit code of a job or a command stopped by a mistake in its input (before any work).
EXIT_CONFIG = 2


class ConfigError(ValueError):
    """An invalid role map; the message names the field and the problem."""


# ----------------------------------------------------------------------------- world


class RoleGroup(Section):
    ranks: int = Field(1, gt=0)  # how many MPI ranks play this role


class OptionalGroup(Section):
    ranks: int = Field(0, ge=0)  # 0: the role is not used


class GeneratorGroup(EngineConfig):
    """``world.generator``: the generator ranks and the engine each of them drives."""

    ranks: int = Field(1, ge=0)  # generator ranks (0 only in colocated mode)
    batch_prompts: int = Field(0, ge=0)  # prompts per generation batch; 0 = prompts_per_step / generators


class TrainerGroup(Section):
    ranks: int = Field(1, ge=0)  # trainer ranks (0 only in colocated mode); > 1 shards with FSDP2
    # Where each trainer rank trains: cuda takes its GPU slot (launch/distributed.py gpu_slot),
    # auto takes it when the rank sees a GPU. cpu by default: CUDA placement is opt-in.
    device: Literal["cpu", "cuda", "auto"] = "cpu"


def _shorthand(value):
    """``generator: 2`` means ``generator: {ranks: 2}``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"ranks": value}
    return value


class World(Section):
    controller: RoleGroup = RoleGroup()  # exactly one rank: it owns the loop and the data
    generator: GeneratorGroup = GeneratorGroup()
    reward: RoleGroup = RoleGroup()
    trainer: TrainerGroup = TrainerGroup()
    # The DeepSpeed-Chat-like baseline: these ranks both generate and train, taking turns
    # (generation uses the generator options above). Needs generator = trainer = 0.
    colocated: OptionalGroup = OptionalGroup()
    # Ranks that hold the value model (the critic: section) for algorithm.advantage: gae; > 1
    # shards it with FSDP2. They come after the trainers.
    critic: OptionalGroup = OptionalGroup()

    _wrap = field_validator("controller", "generator", "colocated", "reward", "trainer", "critic", mode="before")(
        lambda cls, v: _shorthand(v)
    )

    @field_validator("controller")
    @classmethod
    def _one_controller(cls, v: RoleGroup) -> RoleGroup:
        if v.ranks != 1:
            raise ValueError(f"there must be exactly 1 controller rank, got {v.ranks}")
        return v

    @model_validator(mode="after")
    def _one_layout(self) -> World:
        if self.colocated.ranks:
            if self.trainer.device != "cpu":
                raise ValueError(
                    f"world.trainer.device ({self.trainer.device}) places trainer ranks; colocated ranks "
                    "train on the CPU, where their torch engine samples with the trained module: leave it out"
                )
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

    def counts(self) -> dict[str, int]:
        """Ranks per role, for the roles that have any."""
        return {role: getattr(self, role).ranks for role in ROLE_ORDER if getattr(self, role).ranks}

    @property
    def size(self) -> int:
        return sum(self.counts().values())

    def roles_by_rank(self) -> list[str]:
        return [role for role, n in self.counts().items() for _ in range(n)]


# ------------------------------------------------------------------------- sections


# Every other section belongs to the component that reads it: each declares its own Config
# (roles.*), and the role map is composed of them under the same names.


class RoleMap(Section):
    world: World = World()
    model: ModelConfig
    rollout: RolloutConfig = RolloutConfig()
    algorithm: TrainerConfig = TrainerConfig()
    critic: CriticConfig = CriticConfig()
    # The prompt source (roles.tasks): its name and its own options, checked by its Config.
    task: Any
    reward: RewardSection = RewardSection()
    eval: EvalConfig = EvalConfig()
    weights: WeightsConfig = WeightsConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    run: ControllerConfig
    # Multi-turn episodes (roles.environments): the environment's name and its own options.
    environment: Any = None

    _task = field_validator("task", mode="before")(lambda cls, v: task_section(v))
    _environment = field_validator("environment", mode="before")(
        lambda cls, v: None if v is None else _environment_section(v)
    )

    @model_validator(mode="after")
    def _reward_of_the_task(self) -> RoleMap:
        if not self.reward.components:
            from roles.tasks import task_class

            default = task_class(self.task.name).default_reward
            if default is None:
                raise ValueError(
                    f"reward: task {self.task.name!r} has no default reward; name one "
                    "(reward: {name: exact}, or package.module:function)"
                )
            self.reward = RewardSection.model_validate(
                {**self.reward.model_dump(exclude={"components"}), "components": [default]}
            )
        return self

    def longest_response(self) -> int:
        """The most tokens any response may take (training or evaluation; an episode: all its
        turns and observations)."""
        turn = max(self.rollout.max_new_tokens, self.eval.max_new_tokens or 0)
        env = self.environment
        return turn if env is None else (env.max_episode_tokens or turn * env.max_turns)

    @model_validator(mode="after")
    def _episodes_can_run(self) -> RoleMap:
        if self.environment is None:
            return self
        if self.world.colocated_mode or self.rollout.mode != "stream":
            raise ValueError(
                "environment: episodes run on streamed rollouts (a turn is a request); set rollout.mode: stream "
                "and use generator and trainer ranks"
            )
        if self.algorithm.advantage == "gae":
            raise ValueError(
                "environment: episodes train with group advantages; algorithm.advantage gae is not supported"
            )
        return self

    def prompt_token_limit(self) -> int | None:
        """Longest prompt kept: task.max_prompt_tokens, else what the model's context leaves."""
        if self.task.max_prompt_tokens is not None:
            return self.task.max_prompt_tokens
        context = self.model.context_length()
        return None if context is None else context - self.longest_response()

    @model_validator(mode="after")
    def _batches_fit(self) -> RoleMap:
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

    @model_validator(mode="after")
    def _sections_combine(self) -> RoleMap:
        check_combinations(self)
        return self

    @model_validator(mode="after")
    def _stall_bound_above_the_longest_wait(self) -> RoleMap:
        # A reward rank waits up to reward.timeout_s for one response while its workers (other
        # processes) score it: its loop stands still meanwhile, and must not look stuck.
        stall = self.run.stall_timeout_s
        if stall and stall <= self.reward.timeout_s:
            raise ValueError(
                f"run.stall_timeout_s ({stall:g}) must exceed reward.timeout_s ({self.reward.timeout_s:g}): "
                "a reward rank's loop waits that long for one response (or set it to 0: not watched)"
            )
        return self

    @model_validator(mode="after")
    def _critic_for_gae(self) -> RoleMap:
        critics, gae = self.world.critic.ranks, self.algorithm.advantage == "gae"
        if gae != bool(critics):
            raise ValueError(
                "algorithm.advantage: gae needs critic ranks (world.critic), which hold the value model"
                if gae
                else f"world.critic ({critics} ranks) holds a value model for algorithm.advantage: gae "
                f"(advantage is {self.algorithm.advantage!r}): set it, or leave world.critic out"
            )
        if critics and self.world.colocated_mode:
            raise ValueError("world.critic: colocated ranks cannot host a critic; use generator and trainer ranks")
        if critics and self.rollout.prompts_per_step % critics:
            raise ValueError(
                f"rollout.prompts_per_step ({self.rollout.prompts_per_step}) must divide evenly over the "
                f"{critics} critic ranks (each scores an equal share)"
            )
        if critics and self.critic.warmup_steps >= self.run.steps:
            raise ValueError(
                f"critic.warmup_steps ({self.critic.warmup_steps}) leaves no step of run.steps for the policy"
            )
        if critics:  # only then: the check imports transformers' model tables (seconds)
            from roles.value.folder import check_value_model_folder

            field = "critic.path" if self.critic.path else "model.path (the critic's, as critic.path is not set)"
            try:
                check_value_model_folder(self.critic.path or self.model.path)
            except ValueError as e:
                raise ValueError(f"{field}: {e}") from None
        return self

    @model_validator(mode="after")
    def _groups_can_learn(self) -> RoleMap:
        # A group advantage is relative to the prompt's group: with one sample per prompt
        # each advantage is 0, and the run would train for hours on nothing.
        if self.algorithm.advantage != "gae" and self.rollout.samples_per_prompt < 2:
            raise ValueError(
                f"rollout.samples_per_prompt ({self.rollout.samples_per_prompt}): algorithm.advantage "
                f"{self.algorithm.advantage!r} compares the samples of a prompt with each other, so it needs "
                "at least 2 (with 1 every advantage is 0 and nothing is learned)"
            )
        return self

    @model_validator(mode="after")
    def _logging_can_run(self) -> RoleMap:
        per_step = self.rollout.prompts_per_step * self.rollout.samples_per_prompt
        if self.logging.samples_per_step > per_step:
            raise ValueError(
                f"logging.samples_per_step ({self.logging.samples_per_step}) exceeds the {per_step} "
                "generations of a step (rollout.prompts_per_step x rollout.samples_per_prompt)"
            )
        return self

    # What the actors receive besides their own section: derived here, in one place.

    def checkpoint_dir(self) -> Path:
        """Where this run's checkpoints go: ``checkpoint.dir``, else ``<run.out>/checkpoints``."""
        from roles.run_files import CHECKPOINTS

        return Path(self.checkpoint.dir) if self.checkpoint.dir else Path(self.run.out) / CHECKPOINTS

    # roles.protocol is imported here, not at the top: it brings torch (the codec) and MPI.

    def routes(self) -> Routes:
        """Who talks to whom: ranks per part of the step (``roles.protocol.Routes``)."""
        from roles.protocol import Routes

        return Routes.of(self.world.counts())

    def schedule(self, resumed_at: int = 0) -> Schedule:
        """Which version samples each step, which versions the trainers push, when to checkpoint."""
        from roles.protocol import Schedule

        return Schedule.of(self.run, self.eval, self.checkpoint, resumed_at)

    def checkpoints(self) -> CheckpointPlan:
        """Where and how this run writes its checkpoints (``roles.checkpoint.plan``)."""
        from roles.checkpoint.plan import CheckpointPlan

        text = yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
        return CheckpointPlan(str(self.checkpoint_dir()), self.checkpoint.keep_last, text)

    def generator_batch_prompts(self) -> int:
        from roles.protocol import batch_prompts

        return batch_prompts(self.rollout, self.routes().generators, self.world.generator.batch_prompts)


# ----------------------------------------------------------------------- validating


def _environment_section(value):
    from roles.environments import environment_section

    return environment_section(value)


def _location_part(p) -> str:
    """One step of a field's location: ``.name``, ``[index]``, or a key no name looks like, quoted
    (an empty key, one with spaces or dots: ``run.'': unknown key`` must not read as ``run.:``)."""
    if isinstance(p, int):
        return f"[{p}]"
    if isinstance(p, str) and re.fullmatch(r"[A-Za-z_][\w@-]*", p):
        return f".{p}"
    return f".{p!r}"


def _format(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        # Checks across sections have no location: their message starts with the field.
        where = "".join(_location_part(p) for p in e["loc"]).lstrip(".")
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
    """The role map in ``data``, its values checked (``launch.preflight.parse`` checks the machine too)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a role map is a YAML mapping, got {type(data).__name__}")
    try:
        return RoleMap.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_format(e)}") from None
