"""The policy as the model ranks hold it, and how its weights move.

- ``model``: the policy loaded from ``model.path`` (and, for a KL term, its frozen reference),
  whole on one trainer or colocated rank, FSDP2-sharded over several trainers;
- ``sharding``: FSDP2 over the trainers' group, each rank's rows, and the full state on demand;
- ``weight_transport``: which transport carries the weights from trainers to generators, built
  from ``transports.weights`` (the ``weights:`` section).

Importing this package imports none of them: a generator takes the weight transport without
the trainer's FSDP modules. Knows nothing of messages, steps or losses.
"""
