"""Tasks: tiny local models and the prompts, answers and verifiers they are trained on."""
