"""Stream errors that already say, in the reference client's words, why the connection died."""

from __future__ import annotations

import trio

__all__ = ["StreamFailure"]


class StreamFailure(trio.BrokenResourceError):
    """A transport refused what the peer sent; ``reason`` is the connection's failure, verbatim.

    A transport that frames the protocol itself (a WebSocket carrying one frame per message)
    raises it from ``receive_some`` for what only it can see, such as a text message where
    binary frames belong: the connection then fails with exactly ``reason``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
