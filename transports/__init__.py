"""Moving bytes and tensors between ranks: message codec and transport, torch.distributed set-up,
and weight transports with their shard-to-shard transfer plan. Knows nothing about RL."""
