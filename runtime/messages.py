"""Messages the runtime itself understands."""

from transports.codec import message


@message
class Stop:
    """Ends the receiving actor's loop after the messages before it have been handled."""

    reason: str = "done"
