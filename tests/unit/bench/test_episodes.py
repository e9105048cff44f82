"""bench/episodes.py runs its configurations and reports whole episodes (bounded in time)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.paths import REPO

pytestmark = pytest.mark.timeout(180)


def test_every_configuration_runs_whole_episodes_and_the_ratios_follow():
    cmd = [sys.executable, str(REPO / "bench/episodes.py"), "--episodes", "16", "--capacity", "8", "--repeats", "1"]
    cmd += ["--latency-ms", "2", "--per-token-ms", "0.1", "--turn-tokens", "4"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=150, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    by_config = {line["config"]: line for line in lines if "config" in line}
    assert set(by_config) == {"turn_sync", "stream", "stream_capacity"}
    for line in by_config.values():  # two tool calls, then the answer: three turns an episode
        assert line["turns_per_s"] == pytest.approx(3 * line["episodes_per_s"], rel=1e-3)
    ratios = lines[-1]
    assert ratios["stream_over_turn_sync"] == pytest.approx(
        by_config["stream"]["episodes_per_s"] / by_config["turn_sync"]["episodes_per_s"], rel=1e-2
    )
