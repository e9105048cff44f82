"""The a+b CPU demo: a tiny Llama with a character tokenizer (`make demo`)."""
