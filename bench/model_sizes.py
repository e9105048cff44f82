"""The synthetic Llama shapes the weight benchmarks share (bench/weight_sync.py, bench/lora.py).

name -> (hidden, layers, intermediate, vocab): Llama shapes, MHA, untied head.
"""

SIZES = {"25M": (256, 10, 688, 32000), "100M": (768, 7, 2048, 32000), "400M": (1024, 26, 2816, 32000)}
