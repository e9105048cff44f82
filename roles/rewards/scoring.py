"""A reward rank's whole reward: verifiers in sandbox processes and learned rewards in the
rank, added up into one weighted score per sample.

Verifiers (``roles.rewards.sandbox``) score one response at a time under a time limit;
learned rewards (``roles.rewards.learned``) score every group of a call in one batch, then
shape their raw scores (``shaping``). The total is the weighted sum of both; each component
keeps its own (unweighted) score under its label in ``components``, with its extras
(``<label>/truncated``, ``<label>/raw``); "correct" is the first verifier's that reports one,
else 1.0 for a positive total without failures, as for verifiers alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from roles.rewards.combine import ComponentSpec
from roles.rewards.learned.base import LearnedReward, RawScore, ScoreItem, ScorerGaveUp
from roles.rewards.learned.shaping import Shaping
from roles.rewards.sandbox import SampleResult

log = logging.getLogger(__name__)


@dataclass
class GroupToScore:
    example: Any  # the task's Example
    messages: list[dict]  # its prompt as chat messages
    prompt: str  # the prompt as the policy saw it, decoded
    responses: list[str]  # the group's responses, decoded


@dataclass
class LearnedComponent:
    spec: ComponentSpec
    scorer: LearnedReward
    shaping: Shaping = field(init=False)

    def __post_init__(self):
        self.shaping = Shaping(self.scorer.config)


class RewardScoring:
    """``score(groups) -> per group, per sample SampleResult``, from ``sandbox`` (the verifier
    components; None when there are none) and ``learned`` components."""

    def __init__(self, sandbox, learned: Sequence[LearnedComponent], verifier_labels: Sequence[str]):
        self.sandbox = sandbox
        self.learned = list(learned)
        self.verifier_labels = tuple(verifier_labels)
        self._warned: set[str] = set()

    @property
    def collective_group(self):
        """The reward ranks' process group when a learned reward is sharded over them (each
        ``score`` call is then collective: see ``agree``), else None."""
        return next((c.scorer.context.group for c in self.learned if c.scorer.collective), None)

    def agree(self, has_work: bool, stopping: bool) -> tuple[bool, bool]:
        """(any reward rank has work, every reward rank is stopping): collective."""
        from transports.torch_dist import agree_max, agree_min

        (work,) = agree_max(self.collective_group, int(has_work))
        (all_stopping,) = agree_min(self.collective_group, int(stopping))
        return bool(work), bool(all_stopping)

    def score(self, groups: Sequence[GroupToScore]) -> list[list[SampleResult]]:
        """Each group's results; with a collective learned reward, every reward rank calls this
        at once, with no groups when it has none."""
        sizes = [len(g.responses) for g in groups]
        if self.sandbox is not None and groups:
            flat = self.sandbox.score([(text, g.example) for g in groups for text in g.responses])
        else:
            flat = [SampleResult(0.0, {}) for _ in range(sum(sizes))]
        if self.learned and (groups or self.collective_group is not None):
            items = [ScoreItem(g.messages, g.prompt, text, g.example) for g in groups for text in g.responses]
            for component in self.learned:
                self._add_learned(component, items, sizes, flat)
            for result in flat:
                self._set_correct(result)
        out, start = [], 0
        for n in sizes:
            out.append(flat[start : start + n])
            start += n
        return out

    def _add_learned(self, component: LearnedComponent, items, sizes, flat: list[SampleResult]) -> None:
        label = component.spec.label
        raw = self._raw(component, items)
        values: list[list[float | None]] = []
        start = 0
        for n in sizes:
            values.append([r.value for r in raw[start : start + n]])
            start += n
        shaped = [x for group in component.shaping(values) for x in group]
        identity = component.shaping.is_identity
        for result, r, y in zip(flat, raw, shaped):
            result.score += component.spec.weight * y
            result.components[label] = y
            if not identity and r.value is not None:
                result.components[f"{label}/raw"] = r.value
            for key, v in r.extras.items():
                result.components[f"{label}/{key}"] = v
            if r.value is None:
                result.failures += 1
            if r.note:
                result.notes[label] = r.note

    def _raw(self, component: LearnedComponent, items) -> list[RawScore]:
        """The scorer's raw scores; a scorer that raises fails the call's items (each 0, counted)."""
        try:
            raw = component.scorer.score_raw(items)
            if len(raw) != len(items):
                raise RuntimeError(f"returned {len(raw)} scores for {len(items)} responses")
            return raw
        except ScorerGaveUp:
            raise  # the scorer cannot go on (a server down for good): the job ends, named
        except Exception:  # noqa: BLE001 - scored 0 and counted, like a verifier that raises
            label = component.spec.label
            if label not in self._warned:
                self._warned.add(label)
                log.warning(
                    "reward %r failed on a batch; its responses score 0 (later failures only counted)",
                    label,
                    exc_info=True,
                )
            return [RawScore(None, extras={"failed": 1.0}) for _ in items]

    def _set_correct(self, result: SampleResult) -> None:
        reported = [
            result.components[f"{label}/correct"]
            for label in self.verifier_labels
            if f"{label}/correct" in result.components
        ]
        if reported:
            result.components["correct"] = reported[0]
        else:
            result.components["correct"] = 1.0 if result.score > 0 and result.failures == 0 else 0.0

    def state_dict(self) -> dict:
        """The learned components' running statistics, by label (a checkpoint's reward state)."""
        return {c.spec.label: c.shaping.state_dict() for c in self.learned}

    def load_state_dict(self, state: dict) -> None:
        for c in self.learned:
            if c.spec.label in state:
                c.shaping.load_state_dict(state[c.spec.label])

    def close(self) -> None:
        for c in self.learned:
            c.scorer.close()
        if self.sandbox is not None:
            self.sandbox.close()


def build_scoring(section, context) -> RewardScoring:
    """The scoring of a role map's ``reward:`` section (``RewardSection``) on this rank: a
    sandbox for its verifiers (none when every component is learned), and each learned
    component built here with the rank's ``ScorerContext``."""
    from roles.rewards import reward_object
    from roles.rewards.learned import is_learned
    from roles.rewards.sandbox import RewardSandbox

    specs = section.component_specs()
    learned_specs = [s for s in specs if is_learned(s.name)]
    verifiers = [s for s in specs if not is_learned(s.name)]
    learned = []
    try:
        for spec in learned_specs:
            cls = reward_object(spec.name)
            learned.append(LearnedComponent(spec, cls(cls.Config.model_validate(spec.options), context)))
        sandbox = RewardSandbox(verifiers, section.timeout_s, workers=section.workers) if verifiers else None
    except BaseException:
        for c in learned:
            c.scorer.close()
        raise
    return RewardScoring(sandbox, learned, [s.label for s in verifiers])
