"""msgpack codec for typed messages, with numpy arrays and CPU tensors as raw bytes.

A message is a dataclass registered with :func:`message`. On the wire it is a msgpack map
``{"type": NAME, "v": SCHEMA_VERSION, **fields}``. Arrays never become Python lists: an array
travels as a msgpack extension holding its dtype, shape and raw bytes (in-band), or, when
encoded with :func:`encode_frames`, as a small reference to a separate raw buffer that the
transport sends untouched (out-of-band, no copy of large payloads).

Decoding validates everything it is given: truncated or malformed bytes, an unknown message
type, a schema version it does not speak, a missing, extra or wrongly-typed field all raise
:class:`CodecError` with a message that names the problem.

One job per module: ``registry`` (message types, schema version), ``arrays`` (the array and
tensor extensions, in-band and out-of-band), ``encoding`` and ``decoding`` (the entry points),
``builders`` (the generated per-type decoding fast path), ``validation`` (type hints checked,
problems named) and ``plain`` (the layout of plain messages for the compiled mailbox path).
It knows nothing of which messages exist (the modules that define them register them, as
roles/protocol.py does) nor of how the bytes travel (transports/mpi_transport.py).
"""

from transports.codec.arrays import OOB_THRESHOLD_BYTES
from transports.codec.decoding import decode, decode_many
from transports.codec.encoding import encode, encode_frames
from transports.codec.plain import plain_message_spec
from transports.codec.registry import SCHEMA_VERSION, CodecError, message, registered_types

__all__ = [
    "OOB_THRESHOLD_BYTES",
    "SCHEMA_VERSION",
    "CodecError",
    "decode",
    "decode_many",
    "encode",
    "encode_frames",
    "message",
    "plain_message_spec",
    "registered_types",
]
