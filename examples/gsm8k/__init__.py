"""The GSM8K-format CPU demo through the real pipeline (`make demo-gsm8k`): data files, a BPE
chat tokenizer, the gsm8k reward and evaluation."""
