"""The actors' sections of the role map, each in the module named after its actor.

A section belongs to the component that reads it: ``ControllerActor.Config`` is
``config.controller.ControllerConfig``, ``TrainerActor.Config`` is ``config.trainer.TrainerConfig``,
``RewardActor.Config`` is ``config.reward.RewardConfig``. They are declared here rather than
in the actor modules because the role map is parsed before anything heavy is imported: the
actors import MPI (initialising it) and torch, and ``mpirl check`` must stay a fraction of a
second on a login node, without MPI. Components whose modules are light declare their Config
in place: ``roles.engines.base.EngineConfig``, ``roles.models.ModelConfig``,
``roles.weights.WeightsConfig``, each task's and each reward's ``Config``.
"""
