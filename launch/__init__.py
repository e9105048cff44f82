"""Entry points: what starts, checks and reads a job. Four rooms, one per job:

- starting a job (this folder): ``python -m launch CONFIG`` on every rank (``main``,
  ``__main__``) and ``mpirl run`` (``cli``, ``mpi_settings``, ``signal_ready``); the role
  map's schema (``config``) read from its file (``role_map_file``); each rank's collective
  set-up (``distributed``), its actor built (``builders``) and run (``job``); who runs where,
  as printed (``ranks``); the imports warmed meanwhile (``warm``); the rank's quick exit
  (``fast_exit``); the run folder (``run_folder``) and the checkpoint to resume (``resume``);
- ``preflight/``: the checks before any work, by ``mpirl check`` and the launch alike: the
  role map against this machine, the memory a rank needs (``sizing``), the model's files
  (``model_files``), the data (``data``); each refusal one line naming the field, exit 2;
- ``tools/``: offline tools that read a run's folder: ``mpirl report``, ``trace``,
  ``advise``, ``restarts`` (what ``mpirl run --restarts`` says of a failed attempt);
- ``recipe``: a Python API for the demos, the end-to-end tests and the benchmarks: a role
  map with overrides, run the way ``mpirl run`` runs it.

Knows nothing of the inside of a role (``roles/``: the RL) nor of how messages travel
(``runtime/``, ``transports/``): it wires them together. Nothing below it imports it.
"""

import logging
import os

# Hugging Face prints a progress bar per model load and save; with several ranks loading
# at once that drowns the job's own output. Users can still ask for them explicitly.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


class _DropKnownNoise(logging.Filter):
    """Drops the records whose message holds ``fragment``: a known, harmless line that every
    model-holding rank would print at each start. Every other record of the logger passes."""

    def __init__(self, fragment: str):
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        return self.fragment not in record.getMessage()


# transformers imports torchao (for its quantizer) at the first from_pretrained. torchao then
# warns that its CUDA-only kernels do not load on this build, and torch that torchao registers
# enums the deprecated way: four lines per rank, each job, none of which concerns mpirl's use
# of torchao (int8 weight-only, roles/engines/quantization.py). Every other record passes.
logging.getLogger("torchao").addFilter(_DropKnownNoise("Failed to load "))
logging.getLogger("torch.utils._pytree").addFilter(_DropKnownNoise("is an Enum subclass and is now natively supported"))
