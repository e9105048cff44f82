"""Several rewards as one: a weighted sum, every component and its extras kept for the logs.

A component is plain data (:class:`ComponentSpec`), so the list can be pickled to a sandbox
worker and built there; nothing here knows about processes or time limits. Scoring gives a
:class:`SampleScore`: ``score`` the weighted sum; ``components`` each component's unweighted
score and ``label/extra`` values, plus ``correct`` (the first component's that reports one,
else 1.0 for a positive total without failures); ``failures`` the components that raised or
returned a non-finite number (they score 0). The first failure of each is logged with its
traceback.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic

from roles.rewards import build_reward, score_of

log = logging.getLogger(__name__)

RESERVED_LABELS = ("correct", "score")  # top-level keys of SampleScore.components


@dataclass(frozen=True)
class ComponentSpec:
    label: str  # the component's name in the logs ("gsm8k", "format"); unique, no "/"
    name: str  # a built-in reward (roles.rewards.REWARDS) or "package.module:attribute"
    weight: float = 1.0  # its score counts this many times in the total (may be negative)
    options: dict = field(default_factory=dict)  # validated against the reward's Config

    def __post_init__(self):
        if not self.label or "/" in self.label or self.label in RESERVED_LABELS:
            raise ValueError(
                f"reward label {self.label!r}: a label is a non-empty name without '/', "
                f"and not one of {', '.join(RESERVED_LABELS)}"
            )
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not math.isfinite(self.weight):
            raise ValueError(f"reward {self.label!r}: weight must be a finite number, got {self.weight!r}")


@dataclass
class SampleScore:
    score: float  # the weighted sum
    components: dict[str, float]  # per-component scores and extras, and "correct"
    failures: int = 0  # components that raised or returned a non-finite value


def _describe(e: Exception) -> str:
    """One line per problem; an option error names its option ("fallback: Input should be ...")."""
    if isinstance(e, pydantic.ValidationError):
        return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'options'}: {err['msg']}" for err in e.errors())
    return f"{type(e).__name__}: {e}"


def check_labels(specs: Sequence[ComponentSpec]) -> None:
    labels = [s.label for s in specs]
    if not labels:
        raise ValueError("at least one reward is needed")
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"reward labels must be unique; repeated: {', '.join(duplicates)}")


class CombinedReward:
    """Builds each component with ``build_reward`` and scores a response with all of them."""

    def __init__(self, specs: Sequence[ComponentSpec]):
        check_labels(specs)
        self.specs = tuple(specs)
        self._fns = []
        for spec in self.specs:
            try:
                self._fns.append(build_reward(spec.name, spec.options))
            except Exception as e:  # noqa: BLE001 - re-raised with the component named
                raise ValueError(f"reward {spec.label!r} ({spec.name}): {_describe(e)}") from e
        self._logged: set[str] = set()

    def __call__(self, response: str, example: Any) -> SampleScore:
        total, failures = 0.0, 0
        components: dict[str, float] = {}
        correct: float | None = None
        for spec, fn in zip(self.specs, self._fns):
            try:
                value, extras = score_of(fn(response, example))
                bad = [k for k, v in {"score": value, **extras}.items() if not math.isfinite(v)]
                if bad:
                    raise ValueError(f"returned a non-finite {', '.join(bad)}")
                # pass@k and correct_mean count it as a share of one sample: 2.0 would break both.
                if not 0.0 <= extras.get("correct", 0.0) <= 1.0:
                    raise ValueError(f"returned correct = {extras['correct']}, outside [0, 1]")
            except Exception:  # noqa: BLE001 - a failing reward scores 0 and is counted
                failures += 1
                components[spec.label] = 0.0
                self._log_first(spec, example)
                continue
            total += spec.weight * value
            components[spec.label] = value
            for key, v in extras.items():
                components[f"{spec.label}/{key}"] = v
            if correct is None and "correct" in extras:
                correct = extras["correct"]
        if correct is None:
            correct = 1.0 if total > 0 and failures == 0 else 0.0
        components["correct"] = correct
        return SampleScore(score=total, components=components, failures=failures)

    def _log_first(self, spec: ComponentSpec, example: Any) -> None:
        if spec.label not in self._logged:
            self._logged.add(spec.label)
            log.warning(
                "reward %r (%s) failed on example %s; it scores 0 (later failures are only counted)",
                spec.label,
                spec.name,
                getattr(example, "id", "?"),
                exc_info=True,
            )
