"""The role-map file: its schema, validation and the rank -> role assignment.

Everything is checked before any work starts. A mistake — an unknown key, a wrong type, a
non-positive size, a missing model folder — becomes one :class:`ConfigError` whose text
names the field (``run.steps: must be > 0, got 0``). Relative paths are taken from the
directory ``mpirun`` was started in.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from roles.config.checkpoint import CheckpointConfig
from roles.config.controller import ControllerConfig
from roles.config.evaluation import EvalConfig
from roles.config.observability import LoggingConfig
from roles.config.reward import RewardConfig
from roles.config.rollout import RolloutConfig
from roles.config.trainer import TrainerConfig
from roles.engines.base import EngineConfig
from roles.models import ModelConfig
from roles.section import Section, shortened_path
from roles.tasks import task_section
from roles.weights import WeightsConfig

if TYPE_CHECKING:
    from roles.checkpoint import CheckpointPlan
    from roles.protocol import Routes, Schedule

# Ranks are handed out in this order; a role with 0 ranks takes none.
ROLE_ORDER = ("controller", "generator", "colocated", "reward", "trainer")

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
    def _one_layout(self) -> World:
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
    # The prompt source (roles.tasks): its name and its own options, checked by its Config.
    task: Any
    reward: RewardConfig = RewardConfig()
    eval: EvalConfig = EvalConfig()
    weights: WeightsConfig = WeightsConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    run: ControllerConfig

    _task = field_validator("task", mode="before")(lambda cls, v: task_section(v))

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
            self.reward = RewardConfig.model_validate(
                {"components": [default], "timeout_s": self.reward.timeout_s, "workers": self.reward.workers}
            )
        return self

    @model_validator(mode="after")
    def _prompts_fit_the_context(self) -> RoleMap:
        context = self.model.context_length()
        limit, new = self.task.max_prompt_tokens, self.longest_response()
        which = "eval.max_new_tokens" if new > self.rollout.max_new_tokens else "rollout.max_new_tokens"
        if context is not None:
            if new >= context:
                raise ValueError(
                    f"{which} ({new}) leaves no room for a prompt in "
                    f"the model's context of {context} tokens (its config.json)"
                )
            if limit is not None and limit + new > context:
                raise ValueError(
                    f"task.max_prompt_tokens ({limit}) + {which} ({new}) "
                    f"exceeds the model's context of {context} tokens (its config.json)"
                )
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
    def _groups_can_learn(self) -> RoleMap:
        # Every advantage here is relative to the prompt's group: with one sample per prompt
        # each advantage is 0, and the run would train for hours on nothing.
        if self.rollout.samples_per_prompt < 2:
            raise ValueError(
                f"rollout.samples_per_prompt ({self.rollout.samples_per_prompt}): algorithm.advantage "
                f"{self.algorithm.advantage!r} compares the samples of a prompt with each other, so it needs "
                "at least 2 (with 1 every advantage is 0 and nothing is learned)"
            )
        return self

    @model_validator(mode="after")
    def _logging_can_run(self) -> RoleMap:
        from roles.observe.backends import check_backends

        per_step = self.rollout.prompts_per_step * self.rollout.samples_per_prompt
        if self.logging.samples_per_step > per_step:
            raise ValueError(
                f"logging.samples_per_step ({self.logging.samples_per_step}) exceeds the {per_step} "
                "generations of a step (rollout.prompts_per_step x rollout.samples_per_prompt)"
            )
        check_backends(self.logging)  # a missing package, named now rather than at the first step
        return self

    @model_validator(mode="after")
    def _fits_in_memory(self) -> RoleMap:
        from launch.sizing import check_memory

        check_memory(self)  # after the checks above: it reads sizes they have made consistent
        return self

    # What the actors receive besides their own section: derived here, in one place.

    def checkpoint_dir(self) -> Path:
        """Where this run's checkpoints go: ``checkpoint.dir``, else ``<run.out>/checkpoints``."""
        from roles.checkpoint import RUN_CHECKPOINTS

        return Path(self.checkpoint.dir) if self.checkpoint.dir else Path(self.run.out) / RUN_CHECKPOINTS

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
        """Where and how this run writes its checkpoints (``roles.checkpoint``)."""
        from roles.checkpoint import CheckpointPlan

        text = yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
        return CheckpointPlan(str(self.checkpoint_dir()), self.checkpoint.keep_last, text)

    def generator_batch_prompts(self) -> int:
        from roles.protocol import batch_prompts

        return batch_prompts(self.rollout, self.routes().generators, self.world.generator.batch_prompts)


# ------------------------------------------------------------------------- loading


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
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a role map is a YAML mapping, got {type(data).__name__}")
    try:
        return RoleMap.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_format(e)}") from None


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but ``1e-5`` is a float (YAML 1.1 wants ``1.0e-5``; 1.2 and users
    do not), and a key written twice in one mapping is an error: PyYAML keeps the last, so a
    second ``run:`` block silently replaced the first one whole. Keys a merge (``<<``) brings
    may still be overridden, as YAML intends."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first_line[key] + 1})", key_node.start_mark
                    )
                first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """Parse role-map YAML (safe: no Python objects), with numbers read as users write them."""
    return yaml.load(text, Loader=_YamlLoader)


# A role map is a page of YAML. These bounds refuse what no role map needs, before it can
# cost minutes or gigabytes: a huge file, nesting that would exhaust the parser's stack, and
# aliases that expand into far more values than the text holds (a "billion laughs").
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_VALUES = 100_000


def load(path: str | Path) -> RoleMap:
    path = Path(path)
    try:
        found = path.is_file()
    except OSError as e:  # a name too long: said, not a traceback
        raise ConfigError(f"cannot look for a role-map file at {shortened_path(path)!r}: {e.strerror or e}") from None
    if not found:
        raise ConfigError(f"no role-map file at {str(path)!r}")
    return parse(read_yaml_file(path), str(path))


def read_yaml_file(path: Path) -> Any:
    """The YAML document of the role-map file at ``path``, or a ConfigError saying what is wrong."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path}: is {size} bytes; a role map is at most {MAX_FILE_BYTES} (is it the right file?)"
            )
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: is not UTF-8 text (byte {e.start} is {raw[e.start]:#04x})") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a role map") from None
    _check_size(data, str(path))
    return data


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: what, and where (its own text spans several, with excerpts)."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    context = getattr(e, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}" + (f" ({context})" if context else "")


def _check_size(data: Any, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH and more than MAX_VALUES values once aliases are
    expanded (each alias counts every value it stands for, as validation would visit them)."""
    seen, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(f"{source}: expands to more than {MAX_VALUES} values (YAML aliases?); not a role map")
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ConfigError(f"{source}: nested more than {MAX_DEPTH} levels deep; not a role map")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((item, depth + 1) for _, item in items)


def check_world_size(cfg: RoleMap, size: int, source: str = "<config>") -> None:
    if cfg.world.size != size:
        parts = " + ".join(f"{r} {n}" for r, n in cfg.world.counts().items())
        raise ConfigError(
            f"{source}: world: the role map asks for {cfg.world.size} ranks ({parts}) "
            f"but the job has {size}; run it with mpirun -n {cfg.world.size}"
        )


def rank_ranges(cfg: RoleMap) -> str:
    """Which ranks play which role, in one line however many ranks (``0 controller, 1-8
    generator, ...``): printed at launch, so a rank that Open MPI reports killed is named."""
    parts, start = [], 0
    for role, n in cfg.world.counts().items():
        if n:
            parts.append(f"{start}{f'-{start + n - 1}' if n > 1 else ''} {role}")
            start += n
    return ", ".join(parts)


def placement(cfg: RoleMap, hosts: list[str]) -> str:
    """Which node runs which ranks, in one line (``node-a: 0-1 controller, generator; node-b:
    2-3 reward, trainer``): printed at launch when the job spans nodes, so a user sees where
    the hostfile and ``--map-by`` put each role."""
    roles = cfg.world.roles_by_rank()
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    parts = []
    for host, ranks in by_host.items():
        runs, start = [], ranks[0]
        for prev, cur in zip(ranks, ranks[1:] + [None]):
            if cur != prev + 1:
                runs.append(f"{start}-{prev}" if prev > start else f"{start}")
                start = cur
        names = list(dict.fromkeys(roles[r] for r in ranks))
        parts.append(f"{host}: {','.join(runs)} {', '.join(names)}")
    return "; ".join(parts)


def rank_table(cfg: RoleMap) -> str:
    rows = ["rank  role        index"]
    counters: dict[str, int] = {}
    for rank, role in enumerate(cfg.world.roles_by_rank()):
        i = counters.get(role, 0)
        counters[role] = i + 1
        rows.append(f"{rank:>4}  {role:<10}  {i:>5}")
    return "\n".join(rows)
