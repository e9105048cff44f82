"""Which settings of different sections a role map may combine (``rollout.mode``,
``oversample``, ``dynamic_sampling``, the over-length penalty's lengths, ``model.lora``): the
role map's checks across its sections, each error naming the field and saying why. Called by
``launch.config.RoleMap``'s validator."""

from __future__ import annotations


def check_combinations(cfg) -> None:
    """Raises ValueError for a rollout setting the rest of the role map cannot run."""
    rollout = cfg.rollout
    if rollout.mode == "stream" and cfg.world.colocated_mode:
        raise ValueError(
            "rollout.mode: stream needs generator ranks (world.generator); colocated ranks "
            "take turns generating and training, a batch at a time: use rollout.mode: batch"
        )
    if rollout.oversample > 0 and (rollout.mode != "stream" or cfg.run.max_staleness < 1):
        raise ValueError(
            f"rollout.oversample ({rollout.oversample:g}) carries unfinished groups over to later "
            "steps: it needs rollout.mode: stream and run.max_staleness >= 1 (at 0 nothing may carry over)"
        )
    if rollout.dynamic_sampling.enabled:
        _check_dynamic_sampling(cfg)
    if cfg.reward.overlong is not None:
        _check_overlong(cfg)
    if cfg.model.lora is not None:
        _check_lora(cfg)


def _check_lora(cfg) -> None:
    g = cfg.world.generator
    if g.quantization is not None:
        raise ValueError(
            f"model.lora with world.generator.quantization ({g.quantization}): the int8 layers would be "
            "requantized around adapters they do not hold; leave one of them out"
        )
    if g.engine == "vllm" and g.lora_mode == "native" and cfg.model.lora.rank > 512:
        raise ValueError(
            f"model.lora.rank {cfg.model.lora.rank}: vLLM's LoRA (world.generator.lora_mode: native) "
            "takes ranks up to 512; set lora_mode: merged or a lower rank"
        )


def overlong_max_length(cfg) -> int:
    """L_max of ``reward.overlong``: its ``max_length``, else the longest training response
    (``rollout.max_new_tokens``; an episode: its token budget, ``environment.max_episode_tokens``)."""
    if cfg.reward.overlong.max_length is not None:
        return cfg.reward.overlong.max_length
    env = cfg.environment
    turn = cfg.rollout.max_new_tokens
    return turn if env is None else (env.max_episode_tokens or turn * env.max_turns)


def _check_overlong(cfg) -> None:
    buffer, longest = cfg.reward.overlong.buffer, overlong_max_length(cfg)
    if buffer > longest:
        named = "reward.overlong.max_length" if cfg.reward.overlong.max_length else "rollout.max_new_tokens"
        raise ValueError(
            f"reward.overlong.buffer ({buffer}) exceeds the longest response ({longest}, {named}): "
            "the penalty ramps over the last buffer tokens before it"
        )


def _check_dynamic_sampling(cfg) -> None:
    if cfg.world.colocated_mode:
        raise ValueError(
            "rollout.dynamic_sampling: colocated ranks score and train each batch in turn, so nothing "
            "can refill a step; use generator, reward and trainer ranks"
        )
    if cfg.algorithm.advantage == "gae":
        raise ValueError(
            "rollout.dynamic_sampling drops groups whose samples all scored the same because their group "
            "advantage is 0; with algorithm.advantage: gae the critic's advantages are not, so it would drop "
            "signal: leave one of them out"
        )
    if cfg.rollout.samples_per_prompt < 2:
        raise ValueError(
            "rollout.dynamic_sampling: with rollout.samples_per_prompt 1 every group scores the same, "
            "so every group would be dropped"
        )
