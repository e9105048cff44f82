"""Runnable recipes: the CPU demos (arith, gsm8k) and the toy tooling they share (toy), GPU role
maps and Slurm scripts. Importable from a checkout, not installed: no library package imports it."""
