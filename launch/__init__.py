"""Entry points: python -m launch CONFIG, the mpirl CLI, the role-map schema."""

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
