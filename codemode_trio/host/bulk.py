"""Pairing a connection's bulk WebSocket with its control WebSocket (``dual-websocket-v1``).

Each control connection gets a :class:`BulkPairing` with a fresh random token. When the client
asks for ``dual-websocket-v1``, ``connection/ready`` carries the token, and the client opens a
second WebSocket at the control path plus ``/bulk/{token}``; :class:`BulkRegistry` hands that
socket to the connection whose token it names. A token is good for one socket, only while its
connection lives, and an unknown one is refused (HTTP 404) before any WebSocket exists.
"""

from __future__ import annotations

import uuid

import trio

__all__ = ["PAIRING_TIMEOUT_S", "BulkPairing", "BulkRegistry"]

#: How long a connection that granted the bulk lane waits for its socket.
PAIRING_TIMEOUT_S = 10.0


class BulkPairing:
    """One connection's bulk lane: the token that names it and, once it arrives, its stream."""

    def __init__(self, path: str = "", *, token: str | None = None) -> None:
        #: The control path, without a trailing ``/``; the bulk one is ``{path}/bulk/{token}``.
        self.path = path.rstrip("/")
        # uuid4 draws from os.urandom: 122 random bits, as unguessable as a token needs to be.
        # A worker process is given the token its listener minted and routes by.
        self.token = str(uuid.uuid4()) if token is None else token
        self._stream: trio.abc.Stream | None = None
        self._arrived = trio.Event()
        #: Set when the connection is over: whoever holds the bulk socket may let it go.
        self.finished = trio.Event()

    def attach(self, stream: trio.abc.Stream) -> bool:
        """Hand over the bulk socket; ``False`` if the connection already has one or ended."""
        if self._stream is not None or self.finished.is_set():
            return False
        self._stream = stream
        self._arrived.set()
        return True

    async def wait(self) -> trio.abc.Stream:
        """The bulk stream, once the client has opened it."""
        await self._arrived.wait()
        assert self._stream is not None
        return self._stream

    def finish(self) -> None:
        """The connection ended: the token is void and the bulk socket may close."""
        self.finished.set()


class BulkRegistry:
    """The pairings of a listener's live connections, by token."""

    def __init__(self) -> None:
        self._pairings: dict[str, BulkPairing] = {}

    def open(self, path: str = "") -> BulkPairing:
        """A pairing for a new control connection at ``path`` (void after :meth:`close`)."""
        pairing = BulkPairing(path)
        self._pairings[pairing.token] = pairing
        return pairing

    def close(self, pairing: BulkPairing) -> None:
        """Forget ``pairing`` and finish it."""
        self._pairings.pop(pairing.token, None)
        pairing.finish()

    def redeem(self, path: str) -> BulkPairing | None:
        """The live pairing a bulk request for ``path`` names, or ``None`` (a 404).

        ``path`` is the request's path without its query: the control path, ``/bulk/``, the
        token. Each token is redeemed once.
        """
        head, sep, token = path.rpartition("/bulk/")
        pairing = self._pairings.get(token) if sep else None
        if pairing is None or pairing.path != head.rstrip("/"):
            return None
        del self._pairings[token]
        return pairing

    @staticmethod
    def is_bulk_path(path: str) -> bool:
        """Whether a request for ``path`` (without its query) asks for a bulk lane."""
        _, sep, token = path.rpartition("/bulk/")
        return bool(sep and token and "/" not in token)
