"""The role map's sections that belong to the actors, one module per actor, and their strict base.

- ``base``: ``Section`` (strict, no unknown keys), the base of every component's section, and
  ``field_error`` for checks that read like pydantic's;
- ``controller``, ``trainer``, ``reward``, ``rollout``, ``evaluation``, ``checkpoint``,
  ``observability``: ``ControllerActor.Config`` is ``controller.ControllerConfig``,
  ``TrainerActor.Config`` is ``trainer.TrainerConfig``, ``RewardActor.Config`` is
  ``reward.RewardSection`` (the ``reward:`` section; each reward's own options are its
  ``roles.rewards.base.RewardConfig`` subclass).

They are declared here rather than in the actor modules because the role map is parsed before
anything heavy is imported: the actors import MPI (initialising it) and torch, and ``mpirl
check`` must stay a fraction of a second on a login node, without MPI. So this package knows
nothing of MPI, torch, messages or the actors themselves. Components whose modules are light
declare their Config in place: ``roles.engines.base.EngineConfig``, ``roles.models.ModelConfig``,
``roles.policy.weight_transport.WeightsConfig``, each task's and each reward's ``Config``. The whole
role map (``RoleMap``) is composed in ``launch/config.py``.
"""
