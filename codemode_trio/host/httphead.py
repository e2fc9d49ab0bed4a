"""An HTTP request head read before anything is decided about the connection it came on.

A ``ws://`` listener reads each request head itself (:func:`read_request_head`) to route it:
a bulk lane (``/bulk/{token}``) to the worker that owns the token, anything else to a fresh
worker, which gets the socket together with :attr:`RequestHead.raw`, every byte read so far,
and completes the upgrade as if it had read them (:class:`Prefixed`). On ``wss://`` a worker
reads the head itself, after TLS, for the same routing.

:func:`admission_refusal` is where the listener asks whether a request may be served at all
(its Origin, Host, token); :func:`answer_status` sends a refusal.
"""

from __future__ import annotations

import contextlib
import http

import attrs
import h11
import trio

from ..transport.wsframes import accept_key

__all__ = [
    "MAX_HEAD_BYTES",
    "Prefixed",
    "RequestHead",
    "admission_refusal",
    "answer_status",
    "read_request_head",
    "websocket_upgrade",
]

#: The largest request head read (h11's own limit for an incomplete event).
MAX_HEAD_BYTES = 16 * 1024


@attrs.frozen
class RequestHead:
    """A request line and its headers, and the raw bytes they were read from."""

    #: Every byte read from the connection: the head and whatever the client sent after it.
    raw: bytes
    method: bytes
    #: The request target: path and query.
    target: str
    #: Header names lower-cased, values as sent.
    headers: tuple[tuple[bytes, bytes], ...]
    #: What followed the head (a client may send its first message before the answer).
    rest: bytes = b""

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.partition("?")[0]

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lower-case), or ``None``."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


async def read_request_head(stream: trio.abc.Stream) -> RequestHead | None:
    """Read one request head from ``stream``; ``None`` if none arrives whole.

    ``None`` when the stream ends or fails first, or when what arrives is not HTTP/1.1 or
    outgrows :data:`MAX_HEAD_BYTES`; the stream is left open. The caller sets the deadline.
    """
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    raw = bytearray()
    try:
        while True:
            event = parser.next_event()
            if isinstance(event, h11.Request):
                headers = tuple((name.lower(), value) for name, value in event.headers)
                rest, _ = parser.trailing_data
                target = event.target.decode("latin-1")
                return RequestHead(bytes(raw), event.method, target, headers, bytes(rest))
            if event is not h11.NEED_DATA:
                return None  # the connection closed (or paused) before a request
            data = await stream.receive_some(MAX_HEAD_BYTES)
            raw += data
            parser.receive_data(bytes(data))
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return None


class Prefixed(trio.abc.Stream):
    """``stream``, whose first received bytes are ``prefix`` (read from it earlier)."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.stream = stream
        self.prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """The prefix first (in as few reads as ``max_bytes`` allows), then the stream's."""
        if not self.prefix:
            return await self.stream.receive_some(max_bytes)
        await trio.lowlevel.checkpoint()
        size = len(self.prefix) if max_bytes is None else max_bytes
        data, self.prefix = self.prefix[:size], self.prefix[size:]
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Send on the stream."""
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """Wait on the stream."""
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Close the stream."""
        await self.stream.aclose()


def admission_refusal(head: RequestHead) -> int | None:
    """The HTTP status refusing ``head`` before any worker sees it, or ``None`` to admit it.

    The admission hook of the WebSocket listeners: the ``ws://`` listener asks it for every
    request head it reads, and a ``wss://`` worker for the head it reads after TLS. Only the
    method is checked here; the rules on ``Origin``, ``Host`` and the access token belong in
    this one place, so that both listeners keep them alike.
    """
    if head.method != b"GET":
        return 400
    return None


def websocket_upgrade(head: RequestHead) -> bytes | int:
    """The ``101`` answer upgrading ``head`` to a WebSocket, or the HTTP status refusing it.

    400 for a request that is not a WebSocket upgrade (RFC 6455 4.2.1), 426 for a version
    other than 13. No extension and no subprotocol is ever agreed.
    """
    key = (head.header(b"sec-websocket-key") or b"").strip()
    upgrade = (head.header(b"upgrade") or b"").strip().lower() == b"websocket"
    connection = head.header(b"connection") or b""
    wants_upgrade = any(part.strip().lower() == b"upgrade" for part in connection.split(b","))
    if head.method != b"GET" or not upgrade or not wants_upgrade or not key or not key.isascii():
        return 400
    if (head.header(b"sec-websocket-version") or b"").strip() != b"13":
        return 426
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key.decode('latin-1'))}\r\n\r\n"
    ).encode("latin-1")


async def answer_status(stream: trio.abc.Stream, status: int) -> None:
    """Answer with HTTP ``status``, an empty body, and close ``stream``."""
    phrase = http.HTTPStatus(status).phrase
    extra = "Sec-WebSocket-Version: 13\r\n" if status == 426 else ""
    response = (
        f"HTTP/1.1 {status} {phrase}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        with trio.move_on_after(1.0):
            await stream.send_all(response)
    await trio.aclose_forcefully(stream)
