"""The protocol over a WebSocket: every length-prefixed frame is one binary message.

:class:`WebSocketFrameStream` turns a trio-websocket connection into the byte stream the client
and the reference host run on, in either role: what is sent is cut at frame boundaries and each
frame goes out as one message; each message received must be binary (a text message is a
protocol error, in the reference client's words) and is handed on as bytes; a close is the end
of the stream. :func:`open_websocket_connection` is the client's opener; the reference host
serves ``ws://`` with :func:`serve_websocket` in :mod:`codemode_trio.host.listen`.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from os import PathLike

import trio
import trio_websocket

from ..client.config import DEFAULT_CONFIG, ConnectionConfig
from ..client.connection import Connection, open_connection
from ..client.streams import StreamFailure
from ..errors import ConnectionFailed
from ..protocol.framing import HEADER_BYTES, MAX_FRAME_BYTES
from ..protocol.handshake import ALL_CAPABILITIES

__all__ = ["MAX_MESSAGE_BYTES", "WebSocketFrameStream", "open_websocket_connection"]

#: A frame and its length prefix: the largest message either side may send.
MAX_MESSAGE_BYTES = MAX_FRAME_BYTES + HEADER_BYTES
#: The reference client's connect deadline.
CONNECT_TIMEOUT_S = 10.0

_HEADER = struct.Struct("<I")


class WebSocketFrameStream(trio.abc.Stream):
    """A :class:`trio.abc.Stream` of protocol frames over one WebSocket connection."""

    def __init__(self, websocket: trio_websocket.WebSocketConnection) -> None:
        self.websocket = websocket
        self._outgoing = bytearray()  # bytes of a frame not yet complete
        self._incoming = b""  # the rest of a message larger than a receive_some asked for

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send every complete frame in ``data`` (with what came before it) as one message."""
        pending = self._outgoing
        pending += data
        start = 0
        messages = []
        while len(pending) - start >= HEADER_BYTES:
            (length,) = _HEADER.unpack_from(pending, start)
            end = start + HEADER_BYTES + length
            if end > len(pending):
                break
            messages.append(bytes(pending[start:end]))
            start = end
        del pending[:start]
        try:
            for message in messages:
                await self.websocket.send_message(message)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(
                f"failed to write code-mode host websocket message: {exc.reason}"
            ) from None
        if not messages:
            await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        """A WebSocket send waits for its own room; nothing to wait for here."""
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes of the peer's frames; ``b""`` once the WebSocket is closed."""
        if not self._incoming:
            try:
                message = await self.websocket.get_message()
            except trio_websocket.ConnectionClosed:
                return b""
            if isinstance(message, str):
                raise StreamFailure(
                    "code-mode host websocket messages must be binary framed messages"
                )
            self._incoming = message
        if max_bytes is None or max_bytes >= len(self._incoming):
            data, self._incoming = self._incoming, b""
        else:
            data, self._incoming = self._incoming[:max_bytes], self._incoming[max_bytes:]
        return data

    async def aclose(self) -> None:
        """Close the WebSocket (the peer sees the stream end)."""
        await self.websocket.aclose()


@asynccontextmanager
async def open_websocket_connection(
    url: str,
    *,
    config: ConnectionConfig = DEFAULT_CONFIG,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    transcript: str | PathLike[str] | None = None,
) -> AsyncIterator[Connection]:
    """Connect to a host serving the protocol on ``ws://`` (e.g. ``codemode-trio serve``).

    The same :class:`~codemode_trio.Connection` as over stdio, so applications switch transport
    by changing the opener. Raises :class:`~codemode_trio.ConnectionFailed` with the reference
    client's texts when the WebSocket cannot be opened.
    """
    async with contextlib.AsyncExitStack() as stack:
        try:
            websocket = await stack.enter_async_context(
                trio_websocket.open_websocket_url(
                    url,
                    max_message_size=MAX_MESSAGE_BYTES,
                    connect_timeout=CONNECT_TIMEOUT_S,
                    disconnect_timeout=5.0,
                )
            )
        except trio_websocket.ConnectionTimeout:
            raise ConnectionFailed("timed out connecting to the code-mode host websocket") from None
        except (trio_websocket.HandshakeError, OSError, ValueError) as exc:
            raise ConnectionFailed(
                f"failed to connect to the code-mode host websocket: {_describe(exc)}"
            ) from None
        yield await stack.enter_async_context(
            open_connection(
                WebSocketFrameStream(websocket),
                config=config,
                capabilities=capabilities,
                transcript=transcript,
            )
        )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
