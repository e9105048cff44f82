"""Toy models and tooling for the CPU demos and the tests: tiny Llamas built locally
(``tiny_llama``), a byte-level BPE chat tokenizer (``tiny_bpe``), a supervised warm start
(``sft``) and the demos' held-out greedy accuracy (``heldout``).

Nothing here is part of the installed library, and the library never imports it; it knows
nothing of MPI, the roles or RL.
"""
