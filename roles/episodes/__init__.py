"""Multi-turn episodes on the generator: turns as engine requests, observations as ids.

``rendering`` makes the ids of an episode's opening and observations with the chat template
(token-exact: sampled turns are never re-tokenised); ``episode`` holds one episode's tokens
and tallies; ``runner`` drives a group's episodes through the engine and the environment's
workers; ``metrics`` turns what the episodes did into the step's figures. The environments
themselves are ``roles.environments``'s.
"""

from __future__ import annotations


def build_runner(cfg, tokenizer, task, stop_ids, seed: int, startup_timeout_s: float = 120.0):
    """The generator's ``EpisodeRunner`` for role map ``cfg`` (its ``environment:`` section),
    with the environment's workers started and its tools rendered by the model's template."""
    from roles.environments.pool import EnvironmentPool
    from roles.episodes.rendering import TurnRenderer
    from roles.episodes.runner import EpisodeRunner
    from roles.tasks.prompts import messages_of

    env = cfg.environment
    pool = EnvironmentPool(env, seed=seed, startup_timeout_s=startup_timeout_s)
    try:
        renderer = TurnRenderer(
            tokenizer,
            tools=pool.tools(),
            end_ids=stop_ids,
            template_kwargs=env.chat_template_kwargs,
            where=f"model.path {cfg.model.path}",
        )
    except BaseException:
        pool.close()
        raise

    def example_and_messages(example_id: int):
        example = task.example(example_id)
        return example, messages_of(example, task.config)

    return EpisodeRunner(env, pool, renderer, example_and_messages, cfg.rollout.max_new_tokens)
