"""Runnable recipes: the CPU demos (arith, gsm8k), GPU role maps and Slurm scripts."""
