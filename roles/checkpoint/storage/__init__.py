"""The torch.distributed.checkpoint storage the trainers' shards go through: one file of raw
tensor bytes per rank (``raw_shards``), written with direct I/O (``direct_io``).

Knows DCP's storage interface and files only: nothing of what a checkpoint holds besides the
shards, or of when one is written.
"""
