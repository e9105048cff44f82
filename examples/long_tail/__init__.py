"""A long-tailed rollout workload for the benchmarks (``bench/long_tail.py``): a tiny Llama
warm-started to answer ``a+b=`` after a filler of heavy-tailed length, and its reward."""
