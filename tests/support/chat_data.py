"""The small synthetic GSM8K-format data and the small Llama shape that the examples' tests
build their BPE chat tokenizer and models from (fixtures in tests/unit/examples/conftest.py)."""

from examples.gsm8k import problems

SMALL = problems.ProblemConfig(train=300, test=40, seed=5)
TINY_SIZE = dict(
    hidden_size=64, num_layers=1, num_heads=2, intermediate_size=128, max_position_embeddings=160
)  # head dim 32: one of the supported ones
