"""The protocol over a WebSocket: every length-prefixed frame is one binary message.

:class:`WebSocketFrameStream` turns a trio-websocket connection into the byte stream the client
and the reference host run on, in either role: what is sent is cut at frame boundaries and each
frame goes out as one message; each message received must be binary (a text message is a
protocol error, in the reference client's words) and is handed on as bytes; a close is the end
of the stream. :func:`open_websocket_connection` is the client's opener; the reference host
serves ``ws://`` with :func:`serve_websocket` in :mod:`codemode_trio.host.listen`.

The opener offers ``dual-websocket-v1``; when the host grants it, a second WebSocket (the bulk
lane, see :mod:`codemode_trio.protocol.lanes`) is opened at the control URL's path plus
``/bulk/{token}``, query kept, before the connection is handed out.
"""

from __future__ import annotations

import contextlib
import http
import struct
import urllib.parse
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
from ..protocol.lanes import DUAL_WEBSOCKET

__all__ = [
    "MAX_MESSAGE_BYTES",
    "WEBSOCKET_CAPABILITIES",
    "WebSocketFrameStream",
    "bulk_websocket_url",
    "open_websocket_connection",
]

#: A frame and its length prefix: the largest message either side may send.
MAX_MESSAGE_BYTES = MAX_FRAME_BYTES + HEADER_BYTES
#: The reference client's connect deadline.
CONNECT_TIMEOUT_S = 10.0

#: What :func:`open_websocket_connection` offers by default: everything, and the bulk lane.
WEBSOCKET_CAPABILITIES: tuple[str, ...] = (*ALL_CAPABILITIES, DUAL_WEBSOCKET)

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
    capabilities: Iterable[str] = WEBSOCKET_CAPABILITIES,
    transcript: str | PathLike[str] | None = None,
) -> AsyncIterator[Connection]:
    """Connect to a host serving the protocol on ``ws://`` (e.g. ``codemode-trio serve``).

    The same :class:`~codemode_trio.Connection` as over stdio, so applications switch transport
    by changing the opener. ``dual-websocket-v1`` is offered unless ``capabilities`` leaves it
    out; a host that grants it gets a second (bulk) WebSocket for tool calls and their
    results. Raises :class:`~codemode_trio.ConnectionFailed` with the reference client's texts
    when a WebSocket cannot be opened (for the bulk one, the text carries the HTTP status).
    """
    async with contextlib.AsyncExitStack() as stack:
        websocket = await _connect(stack, url, "")

        async def connect_bulk(token: str) -> trio.abc.Stream:
            # Entered on the same stack, so the bulk socket closes with the connection.
            bulk = await _connect(stack, bulk_websocket_url(url, token), "bulk ")
            return WebSocketFrameStream(bulk)

        yield await stack.enter_async_context(
            open_connection(
                WebSocketFrameStream(websocket),
                config=config,
                capabilities=capabilities,
                transcript=transcript,
                connect_bulk=connect_bulk,
            )
        )


def bulk_websocket_url(url: str, token: str) -> str:
    """The bulk lane's URL: ``url`` with ``/bulk/{token}`` appended to its path, query kept.

    Raises :class:`~codemode_trio.ConnectionFailed` with the reference client's texts when it
    cannot be built.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parses the port, so a bad one is reported here
    except ValueError as exc:
        raise ConnectionFailed(
            f"failed to build code-mode host bulk websocket URL: {_describe(exc)}"
        ) from None
    if not parts.netloc:
        raise ConnectionFailed(
            f"failed to build code-mode host bulk websocket path: `{url}` cannot be a base URL"
        )
    segment = urllib.parse.quote(token, safe="")
    return urllib.parse.urlunsplit(
        parts._replace(path=f"{parts.path.rstrip('/')}/bulk/{segment}", fragment="")
    )


async def _connect(
    stack: contextlib.AsyncExitStack, url: str, lane: str
) -> trio_websocket.WebSocketConnection:
    """Open one WebSocket on ``stack``; ``lane`` is ``""`` or ``"bulk "`` for the messages."""
    try:
        return await stack.enter_async_context(
            trio_websocket.open_websocket_url(
                url,
                max_message_size=MAX_MESSAGE_BYTES,
                connect_timeout=CONNECT_TIMEOUT_S,
                disconnect_timeout=5.0,
            )
        )
    except trio_websocket.ConnectionTimeout:
        raise ConnectionFailed(
            f"timed out connecting to the code-mode host {lane}websocket"
        ) from None
    except (trio_websocket.HandshakeError, OSError, ValueError) as exc:
        raise ConnectionFailed(
            f"failed to connect to the code-mode host {lane}websocket: {_describe(exc)}"
        ) from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio_websocket.ConnectionRejected):
        # The peer answered the upgrade with a plain HTTP status (a bulk token it does not
        # know gets 404): say it the way an HTTP client would.
        status = exc.status_code
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        return f"HTTP error: {status} {phrase}".rstrip()
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
