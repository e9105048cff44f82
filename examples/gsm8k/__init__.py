"""The GSM8K-format CPU demo through the real pipeline: files, BPE chat tokenizer, gsm8k reward, eval (`make demo-gsm8k`)."""
