"""Moving bytes and tensors: msgpack codec, MPI message transport, weight transports."""
