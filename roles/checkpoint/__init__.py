"""Checkpoints: everything a stopped run needs to continue exactly, written atomically.

One checkpoint is a folder in the run's checkpoint directory (``checkpoint.dir``, default
``<run.out>/checkpoints``)::

    step-00000050/
      trainer/            torch.distributed.checkpoint shards of {"model", "optim"}: each training
                          rank writes its own (no gather); loadable onto another number of trainers
      controller.json     steps done, the data position as of what was *trained*, counters
      rng/rank-00003.pkl  every rank's random states (Python, numpy, and torch where it has it)
      config.yaml         the role map the run was started with
      lora_base.json      a LoRA run's: the base its adapters (all trainer/ holds) were trained on
      COMPLETE            written last
    latest                the name of the newest complete checkpoint (replaced atomically)

Who writes what and when is ``roles.protocol``'s rule 5. The modules, one job each (callers
import from them; this file re-exports nothing):

- ``layout``: the folder's names, partial and complete folders, fsync'd JSON, making a
  checkpoint visible (``finalize``) and pruning old ones, ``CheckpointIOError``;
- ``rng``: every rank's random states;
- ``plan``: ``CheckpointPlan``, where a run's checkpoints go and the controller's part of each;
- ``trainer_state``: the policy's and optimizer's shards (DCP save and load), the fault hook;
- ``storage/``: the DCP storage the shards are written and read through (raw shard files,
  direct I/O);
- ``lora_base``: the base a LoRA checkpoint's adapters need, recorded and checked;
- ``export``: a checkpoint's policy as a Hugging Face model folder;
- ``resume``: the checkpoint to continue from (``newest``, ``resolve_checkpoint_path``) and
  its small files read and checked (``Resume``).

Knows files and state dicts only: it sends no message and knows no actor, no role-map schema
(``launch.config``), and none of the run folder's logs (``roles.run_files``).
"""
