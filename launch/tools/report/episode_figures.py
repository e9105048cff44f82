"""The report's figure of multi-turn episodes (runs with an ``environment:``): how many turns
an episode takes and how its tool calls go, per step (``episodes`` in ``metrics.jsonl``)."""

from __future__ import annotations

from pathlib import Path

from launch.tools.report.figures import SMOOTHED, has, per_run_figure, smoothed_curve
from launch.tools.report.runs import Run


def applies(runs: list[Run]) -> bool:
    """Whether any of the runs had multi-turn episodes."""
    return has(runs, "episodes.episode_turns_mean")


def episodes_png(runs: list[Run], path: Path) -> Path | None:
    """Turns per episode, and the share of episodes that call a tool with the calls' error rate."""
    if not applies(runs):
        return None
    return per_run_figure(
        runs,
        path,
        "Episodes and tool calls",
        [
            ("model turns per episode", "turns", smoothed_curve("episodes.episode_turns_mean"), SMOOTHED),
            ("episodes that call a tool", "tool call rate", smoothed_curve("episodes.tool_call_rate"), SMOOTHED),
            ("tool calls that fail", "tool error rate", smoothed_curve("episodes.tool_error_rate"), SMOOTHED),
        ],
    )


FIGURE = ("episodes.png", "Episodes and tool calls", episodes_png, "no run had multi-turn episodes")
