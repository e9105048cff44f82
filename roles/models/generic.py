"""Any other Hugging Face causal LM: what can be done without knowing the family.

Finds the decoder blocks by name (the first ``nn.ModuleList`` named "...layers"), so FSDP2 and
the full-weight sync work as for a known family. Knows no tensor-parallel split: serving such a
model with tensor_parallel > 1 is refused with a clear error (add a family module instead).
"""

from __future__ import annotations

from roles.models.base import ModelSpec, layers_by_name

SPEC = ModelSpec(name="generic", decoder_layers=layers_by_name, tp_rule=None)
