"""Entry points: python -m launch CONFIG, the mpirl CLI, the role-map schema."""

import os

# Hugging Face prints a progress bar per model load and save; with several ranks loading
# at once that drowns the job's own output. Users can still ask for them explicitly.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
