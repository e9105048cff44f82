"""The RL logic of mpirl: the actors of an RL step, and the rooms they draw on.

The actors (one per rank, each an ``runtime.Actor`` whose ``Config`` is its role-map section):

- ``controller``: ``ControllerActor``, owns the prompt stream and the step loop;
- ``generator``: ``GeneratorActor``, samples responses with an engine;
- ``reward``: ``RewardActor``, scores each group of responses;
- ``trainer``: ``TrainerActor``, takes a policy-gradient step and pushes the new weights;
- ``colocated``: ``ColocatedActor``, the synchronous baseline (generate, then train, in turns);
- ``protocol``: the messages of a step, who sends them to whom, and the version rules
  (``seeds``: the sampling seeds of batches and groups).

Streamed rollouts (``rollout.mode: stream``): ``stream_generator`` (the generator's streaming
loop), ``dispatch`` (how the controller hands out prompts: round-robin, or to the generators'
credit), ``partial_rollouts`` (``rollout.oversample``: steps given to groups as they end) and
``stream_protocol`` (their messages). ``controller_checkpoints``: the controller's part in a
checkpoint.

The rooms:

- ``sections/``: the actors' role-map sections and the strict ``Section`` base;
- ``engines/``: generation engines (torch, vLLM, sim) behind one contract;
- ``tasks/`` and ``rewards/``: prompt sources and scorers, found by name (``plugins``);
- ``models/``: model folders: families, the ``model:`` section, loading, the tokenizer;
- ``policy/``: the policy as the model ranks hold it (sharded over the trainers) and which
  transport carries its weights to the generators;
- ``algorithm/``: the RL math on tensors: advantages, losses, log-probs;
- the trainer's parts: ``train_batch`` (a step's rows and micro-batches), ``trainer_group``
  (the collectives over the trainers);
- ``observe/``: the run log, the step's metrics line, dashboards and progress display;
- the run's state: ``checkpoint/`` (layout, random states, the trainers' shards and their
  storage back-ends, export, resume), ``run_files`` (the run folder's file names and its
  tolerant JSON-lines reader), ``prompt_stream``, ``evaluation``.

roles/ knows nothing of how a job is started or sized (``launch/``); it reaches other ranks only
through ``runtime`` mailboxes and ``transports``, which know nothing of RL.
"""
