"""An HTTP request head read before anything is decided about the connection it came on.

A ``ws://`` listener reads each request head itself (:func:`read_request_head`), answers the
upgrade, and routes the upgraded socket: a bulk lane (``/bulk/{token}``) to the worker that
owns the token, anything else to a fresh worker, which gets the socket together with
:attr:`RequestHead.rest`, whatever the client sent behind its head. On ``wss://`` a worker
reads the head itself, after TLS, for the same routing.

Whether a request is served at all (its Origin, Host, token) is
:func:`codemode_trio.host.admission.admit`'s decision; :func:`answer_status` sends a refusal,
:func:`upgrade_response` the upgrade.
"""

from __future__ import annotations

import contextlib
import email.utils
import http
from collections.abc import Sequence

import attrs
import h11
import trio

from ..transport.wsframes import accept_key

__all__ = [
    "MAX_HEAD_BYTES",
    "RequestHead",
    "answer_status",
    "read_request_head",
    "upgrade_response",
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
    target: bytes
    #: Header names lower-cased, values as sent.
    headers: tuple[tuple[bytes, bytes], ...]
    #: ``b"1.1"`` or ``b"1.0"``.
    http_version: bytes = b"1.1"
    #: What followed the head (a client may send its first message before the answer).
    rest: bytes = b""

    @property
    def path(self) -> str:
        """The target without its query."""
        return self.target.decode("latin-1").partition("?")[0]

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
                return RequestHead(
                    bytes(raw), event.method, event.target, headers, event.http_version, bytes(rest)
                )
            if event is not h11.NEED_DATA:
                return None  # the connection closed (or paused) before a request
            data = await stream.receive_some(MAX_HEAD_BYTES)
            raw += data
            parser.receive_data(bytes(data))
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        return None


def upgrade_response(key: str) -> bytes:
    """The ``101`` answer to an admitted upgrade whose ``Sec-WebSocket-Key`` is ``key``.

    No extension and no subprotocol is ever agreed.
    """
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n"
    ).encode("ascii")


async def answer_status(
    stream: trio.abc.Stream, status: int, headers: Sequence[tuple[str, str]] = (), body: bytes = b""
) -> None:
    """Answer with HTTP ``status``, ``headers`` and ``body``, and close ``stream``."""
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {status} {phrase}".rstrip()]
    lines += [f"{name}: {value}" for name, value in headers]
    date = email.utils.formatdate(usegmt=True)
    lines += [f"Content-Length: {len(body)}", f"Date: {date}", "Connection: close"]
    response = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        with trio.move_on_after(1.0):
            await stream.send_all(response)
    await trio.aclose_forcefully(stream)
