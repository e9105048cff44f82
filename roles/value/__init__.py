"""The critic's value model: the policy's architecture with a scalar head, per-token values,
training on returns, its checkpoint and export.

- ``folder``: whether a model folder can carry a value head (config.json only, no torch: the
  role map's check runs it on the controller);
- ``model``: loading it (Hugging Face token classification, one label, head seeded when new),
  sharded with FSDP2 over the critic ranks;
- ``forward``: the value of the state before each response token, from one forward pass;
- ``training``: :class:`~roles.value.training.ValueModel`, values in micro-batches and one
  optimizer step on returns, in lockstep over the critic ranks;
- ``checkpoint``: its shards and optimizer (DCP, reshardable) and a Hugging Face export.

Its loss is ``roles.algorithm.gae.value_loss``. Knows nothing of messages, GAE or the
schedule: the critic actor drives it. Importing this
package imports nothing else (so the role map's check of ``folder`` stays free of torch).
"""
