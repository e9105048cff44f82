"""Moving messages and tensors between ranks.

- ``codec/``: typed messages (registered dataclasses) to msgpack bytes and back, with numpy
  arrays and CPU tensors as raw buffers, every decoded value checked against its type hint.
- ``mpi_transport``: framed byte messages over an MPI communicator (posted receives, adaptive
  batching, back-pressure); ``fast_transport.pyx`` is the same transport compiled, with its
  buffer pool (``fast_buffers.pyx``) and a compiled codec for plain messages (``fast_codec.pyx``);
  ``build`` compiles them and ``choose`` picks the compiled or the Python one.
- ``torch_dist``: torch.distributed set up from MPI (no MASTER_ADDR to configure).
- ``weights/``: weight transports from training shards to generators, with their transfer plan.

It knows nothing of reinforcement learning, rollouts, roles or model families: which messages
exist and what they mean is roles/' business (roles/protocol.py), and a weight transport is
told how a model is split, as data. Nothing here imports runtime/, roles/ or launch/.
"""
