"""Multi-turn episodes with a slow, variable tool: streaming against turn-synchronous rounds.

One JSON line per configuration, medians of ``--repeats`` interleaved rounds with (min, max):

- ``turn_sync``: what simple implementations do: a batch of episodes advances turn by turn
  together; each turn is generated for every episode still going, then every tool call runs
  (in parallel), and the next turn starts when the slowest call is back;
- ``stream``: mpirl's runner (``roles.episodes.runner``): a turn is a request; an episode whose
  tool answers goes back to the engine at once while others still wait on theirs, and a new
  group starts the moment one ends. As the streaming generator grants credit (room for twice
  the groups its engine decodes at once, ``roles.stream_generator``), up to twice the engine's
  capacity in episodes are in flight: those waiting on a tool hold no slot;
- ``stream_capacity``: the same with no more episodes in flight than ``turn_sync`` has (the
  engine's capacity): what streaming alone gains, without the room credit gives.

Both use the same pieces: the sim engine (modelled decode time, ``--per-token-ms``; the
engine's cost is what a real one would spend), the real environment workers
(``roles.environments.pool``) running ``bench/episode_env.py``'s tool, whose latency has a
median of ``--latency-ms`` and varies ``--spread``-fold (p5 to p95), the real turn renderer
with a chat tokenizer. Figures: ``episodes_per_s``, ``turns_per_s``, ``engine_busy`` (the
share of wall time the engine spent decoding), ``tool_latency_ms`` (median call, measured).
A last line gives each streaming configuration's ratio of medians over ``turn_sync``.

    python bench/episodes.py [--episodes 256] [--capacity 32] [--repeats 3] [--spread 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # episode_env, for the workers too
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roles.engines import sim_engine  # noqa: E402
from roles.engines.base import SamplingConfig  # noqa: E402
from roles.engines.sim_cost import SimConfig  # noqa: E402
from roles.engines.sim_engine import SimEngine  # noqa: E402
from roles.environments import environment_section  # noqa: E402
from roles.environments.pool import EnvironmentPool  # noqa: E402
from roles.episodes.rendering import TurnRenderer  # noqa: E402
from roles.episodes.runner import EpisodeRunner  # noqa: E402
from roles.tasks.base import Example  # noqa: E402

GROUP = 4  # episodes per group (samples per prompt)
CONFIGS = ("turn_sync", "stream", "stream_capacity")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=256, help="episodes per round and configuration")
    p.add_argument("--capacity", type=int, default=32, help="sequences the engine decodes at once (a turn_sync batch)")
    p.add_argument("--tool-turns", type=int, default=2, help="tool calls per episode (turns: one more)")
    p.add_argument("--latency-ms", type=float, default=100.0, help="the median tool call")
    p.add_argument("--spread", type=float, default=10.0, help="p95 / p5 of a tool call's latency")
    p.add_argument("--turn-tokens", type=int, default=16, help="tokens per model turn")
    p.add_argument("--per-token-ms", type=float, default=1.0, help="modelled decode step of the engine")
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args()


def tokenizer(folder: Path):
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer

    return save_bpe_chat_tokenizer(folder, ["What is 12+30?", "ok", "wait"] * 10, vocab_size=300, tools=True)


class Bench:
    """The pieces both configurations share, built once."""

    def __init__(self, args, tok):
        self.args = args
        env = {
            "name": "episode_env:LatencyTools",
            "workers": 2 * args.capacity,  # a call never waits for a worker, in either mode
            "max_turns": args.tool_turns + 1,
            "max_episode_tokens": 4096,
        }
        env.update(tool_turns=args.tool_turns, latency_ms=args.latency_ms, spread=args.spread)
        self.env_config = environment_section(env)
        self.pool = EnvironmentPool(self.env_config, seed=0)
        self.renderer = TurnRenderer(tok, tools=self.pool.tools(), end_ids=[tok.eos_token_id])
        self.sim = SimConfig.model_validate(
            {"per_token_s": args.per_token_ms / 1000, "vocab": len(tok), "lengths": {"mean": args.turn_tokens}}
        )
        self.prompt = self.renderer.opening_ids([{"role": "user", "content": "What is 12+30?"}])

    def run(self, config: str) -> dict:
        args = self.args
        engine = SimEngine(self.sim, capacity=args.capacity)
        example = Example(id=0, prompt="What is 12+30?", answer="42")
        runner = EpisodeRunner(
            self.env_config,
            self.pool,
            self.renderer,
            lambda i: (example, [{"role": "user", "content": example.prompt}]),
            args.turn_tokens,
        )
        groups = args.episodes // GROUP
        lockstep = config == "turn_sync"
        held = []
        runner.add = held.append if lockstep else engine.add
        # room above a turn's length: a turn ends as the model ends it ("stop"), not cut
        sampling = SamplingConfig(1.0, 1.0, 2 * args.turn_tokens, 0)
        started = ended = turns = 0
        t0 = time.perf_counter()
        while ended < groups:
            room = args.capacity if config == "stream_capacity" else 2 * args.capacity
            if started < groups and (not runner.groups if lockstep else len(runner.groups) * GROUP < room):
                batch = args.capacity // GROUP if lockstep else 1
                for _ in range(min(batch, groups - started)):
                    runner.start(started, 0, GROUP, sampling, self.prompt)
                    started += 1
                continue
            if lockstep and held and not engine.unfinished() and not runner.calls:
                for request in held:  # every episode's next turn at once
                    engine.add(request)
                held.clear()
            done = []
            if engine.unfinished():
                for f in engine.step():
                    done += runner.turn_ended(f)
            done += runner.pump(0.0 if engine.unfinished() else 0.001)
            ended += len(done)
            turns += sum(info["turns"] for d in done for info in d.infos)
        wall = time.perf_counter() - t0
        return {
            "episodes_per_s": groups * GROUP / wall,
            "turns_per_s": turns / wall,
            "engine_busy": engine.slept_s / wall,
            "wall_s": wall,
        }


def summary(config: str, rounds: list[dict], about: dict) -> dict:
    line = {"bench": "episodes", "config": config, **about, "repeats": len(rounds)}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        line[key] = round(statistics.median(values), 4)
        line.setdefault("spread", {})[key] = [round(min(values), 4), round(max(values), 4)]
    return line


def main() -> None:
    args = parse_args()
    # One decode step per engine call, as the torch and vLLM engines step: tool results are
    # taken between decode steps (the sim's default models up to 64 at once, for bench/scale.py).
    sim_engine.MAX_STEPS_AT_ONCE = 1
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args, tokenizer(Path(tmp)))
        try:
            rounds = {c: [] for c in CONFIGS}
            for _ in range(args.repeats):  # interleaved: drift hits both alike
                for config in CONFIGS:
                    rounds[config].append(bench.run(config))
        finally:
            bench.pool.close()
    about = {
        "episodes": args.episodes,
        "capacity": args.capacity,
        "tool_calls_per_episode": args.tool_turns,
        "tool_latency_median_ms": args.latency_ms,
        "tool_latency_spread": args.spread,
        "per_token_ms": args.per_token_ms,
        "turn_tokens": args.turn_tokens,
    }
    lines = {c: summary(c, rounds[c], about) for c in CONFIGS}
    for line in lines.values():
        print(json.dumps(line), flush=True)
    base = lines["turn_sync"]["episodes_per_s"]
    ratios = {f"{c}_over_turn_sync": round(lines[c]["episodes_per_s"] / base, 3) for c in CONFIGS[1:]}
    print(json.dumps({"bench": "episodes", **ratios, **about}), flush=True)


if __name__ == "__main__":
    main()
