"""What a step's episodes did, as sums on the reward ranks' notices and figures on the step line.

The reward rank adds up its groups' episode records (``Rollout.episodes``) into sums
(:func:`episode_sums`, carried by ``Scored.episodes``; sums, so the controller can add the
notices of several ranks), and the controller turns a step's sums into the figures of
``metrics.jsonl``, the dashboards and ``mpirl report`` (:func:`episode_figures`). Also what
the reward ranks make of an episode's own rewards (:func:`episode_bonus`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# How an episode can end (roles.environments.base.END_REASONS) that the step line counts.
_ENDS = ("max_turns", "token_budget", "length", "error")


def episode_bonus(info: dict) -> float:
    """What the environment adds to an episode's score: its per-turn rewards and its final one."""
    env = info.get("env_reward")
    return float(info.get("turn_reward", 0.0)) + (0.0 if env is None else float(env))


def episode_failed(info: dict) -> bool:
    """An episode the environment failed (it raised, or was cut with ``on_error: end``): scored 0."""
    return info.get("end") == "error"


def final_turn(ids: np.ndarray, info: dict | None) -> np.ndarray:
    """The tokens the task's reward scores: an episode's last model turn, or the whole response."""
    return ids if info is None else np.asarray(ids)[int(info.get("final_start", 0)) :]


def episode_sums(infos: Sequence[dict], masks: Sequence[np.ndarray]) -> dict[str, float]:
    """The sums of one group's episodes."""
    sums = {
        "episodes": float(len(infos)),
        "turns": 0.0,
        "tool_calls": 0.0,
        "tool_errors": 0.0,
        "tool_latency_s": 0.0,
        "with_tool_calls": 0.0,
        "episode_tokens": 0.0,
        "observation_tokens": 0.0,
        "env_errors": 0.0,
        **{f"ended_{e}": 0.0 for e in _ENDS},
    }
    for info, mask in zip(infos, masks):
        for k in ("turns", "tool_calls", "tool_errors", "tool_latency_s", "observation_tokens", "env_errors"):
            sums[k] += float(info.get(k, 0.0))
        sums["with_tool_calls"] += float(info.get("tool_calls", 0.0) > 0)
        sums["episode_tokens"] += float(len(mask))
        if info.get("end") in _ENDS:
            sums[f"ended_{info['end']}"] += 1.0
    return sums


def episode_figures(sums: dict[str, float]) -> dict[str, float]:
    """The step line's episode figures from a step's sums ({} when it had no episodes)."""
    n = sums.get("episodes", 0.0)
    if not n:
        return {}
    calls = sums["tool_calls"]
    figures = {
        "episode_turns_mean": sums["turns"] / n,
        "episode_tokens_mean": sums["episode_tokens"] / n,
        "observation_tokens_mean": sums["observation_tokens"] / n,
        "tool_calls_per_episode": calls / n,
        "tool_call_rate": sums["with_tool_calls"] / n,  # episodes that called a tool at least once
        "tool_error_rate": sums["tool_errors"] / calls if calls else 0.0,
        "tool_latency_mean_s": sums["tool_latency_s"] / calls if calls else 0.0,
        "env_errors": sums["env_errors"],
    }
    figures.update({f"ended_{e}_share": sums[f"ended_{e}"] / n for e in _ENDS})
    return figures


def add_sums(into: dict[str, float], more: dict[str, float]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0.0) + float(v)
