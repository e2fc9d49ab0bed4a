"""One HTTP/2 stream as its consumer sees it: headers, buffered DATA, trailers, failure.

The connection's reader task delivers what arrives (``*_arrived``, :meth:`Http2Stream.fail`)
and wakes the consumer only when something it waits for came; the consumer reads with
``receive_*`` and gives the stream back with ``reset``/``finish``. What a stream needs of its
connection (window acknowledgements, forgetting it) is :class:`StreamOwner`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Protocol

import h2.errors
import trio

from ..errors import ConnectionFailed

__all__ = ["Header", "Http2Stream", "StreamOwner", "StreamReset", "error_name"]

Header = tuple[bytes, bytes]


class StreamOwner(Protocol):
    """What an :class:`Http2Stream` needs of its connection."""

    def acknowledge(self, stream_id: int, flow_length: int) -> None:
        """Give ``flow_length`` consumed bytes of ``stream_id`` back to the host's window."""

    def forget(self, stream: Http2Stream, *, error_code: int | None) -> None:
        """Stop routing to ``stream``; reset it with ``error_code`` unless that is ``None``."""


def error_name(code: int) -> str:
    """The name of HTTP/2 error ``code`` (its number if it has none)."""
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return str(code)


class StreamReset(Exception):
    """The peer reset one stream (RST_STREAM) or refused it in a GOAWAY; the connection lives.

    ``error_code`` is the HTTP/2 error code; ``refused`` is True when the host never processed
    the request (safe to retry).
    """

    def __init__(self, error_code: int, *, refused: bool = False) -> None:
        super().__init__(f"HTTP/2 stream reset by the code-mode host ({error_name(error_code)})")
        self.error_code = error_code
        self.refused = refused


class Http2Stream:
    """One request/response exchange: send the request, then read headers, data, trailers."""

    def __init__(self, connection: StreamOwner, stream_id: int) -> None:
        self._connection = connection
        self.stream_id = stream_id
        self.headers: list[Header] | None = None
        self.trailers: list[Header] | None = None
        #: True once the host ended its side (END_STREAM): no more data will come.
        self.ended = False
        self._chunks: collections.deque[tuple[bytes, int]] = collections.deque()
        self._error: BaseException | None = None
        # The consumer parks here; the reader unparks it when something it waits for arrives.
        self._lot = trio.lowlevel.ParkingLot()
        # True while the consumer waits for the headers alone: only then do 200 headers wake
        # it (one waiting for data would only go back to sleep).
        self._wants_headers = False
        self._rejected = False
        self._finished = False
        #: Called by the reader task each time DATA arrived, instead of waking the consumer
        #: (which still wakes for the end of the stream and for errors). Whatever it raises
        #: fails the stream: the consumer's next ``receive_*`` raises it.
        self.listener: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<Http2Stream {self.stream_id}>"

    def _notify(self) -> None:
        if self._lot:
            self._lot.unpark_all()

    def headers_arrived(self, headers: list[Header]) -> None:
        """The reader: the response headers came."""
        self.headers = headers
        if (b":status", b"200") not in headers:
            # An error response: a consumer waiting for data hears of it now, not only when
            # (if ever) the stream ends.
            self._rejected = True
            self._notify()
        elif self._wants_headers:
            self._notify()

    def trailers_arrived(self, trailers: list[Header]) -> None:
        """The reader: the trailers came."""
        self.trailers = trailers
        self._notify()

    def end_arrived(self) -> None:
        """The reader: the host ended its side (END_STREAM)."""
        self.ended = True
        self._notify()

    def data_arrived(self, data: bytes, flow_length: int) -> None:
        """The reader: DATA came (``flow_length`` counts against the window)."""
        self._chunks.append((data, flow_length))
        listener = self.listener
        if listener is None:
            self._notify()
            return
        try:
            listener()
        except Exception as exc:
            self.listener = None
            self.fail(exc)

    def fail(self, error: BaseException) -> None:
        """The stream failed (reset, refused, connection lost): the consumer gets ``error``."""
        if self._error is None and not self.ended:
            self._error = error
        self._notify()

    def check_failed(self) -> None:
        """Raise the stream's failure, if it failed."""
        error = self._error
        if isinstance(error, ConnectionFailed):
            # A fresh instance per raise: many tasks see the same failure at once, and one
            # shared exception object would collect all of their tracebacks.
            raise ConnectionFailed(error.reason)
        if error is not None:
            raise error

    def drop_buffered(self) -> int:
        """Drop the data nobody will read; return its flow-controlled length."""
        pending = sum(length for _, length in self._chunks)
        self._chunks.clear()
        return pending

    async def receive_headers(self) -> list[Header]:
        """Wait for the response headers (a trailers-only response ends the stream too)."""
        while self.headers is None:
            self.check_failed()
            self._wants_headers = True
            try:
                await self._lot.park()
            finally:
                self._wants_headers = False
        return self.headers

    async def receive_data(self) -> bytes | None:
        """Return the next DATA chunk (acknowledging it to the host), or ``None`` at the end.

        Also ``None`` once the response headers carry a status other than 200: whatever such a
        response holds is not the data asked for (see :attr:`headers`).
        """
        while not self._chunks:
            self.check_failed()
            if self.ended or self._rejected:
                return None
            await self._lot.park()
        return self._take_chunk()

    def receive_data_nowait(self) -> bytes | None:
        """Return the next DATA chunk if one is buffered (acknowledging it), else ``None``.

        Only the data: the end of the stream and errors are for :meth:`receive_data`.
        """
        return self._take_chunk() if self._chunks else None

    def _take_chunk(self) -> bytes:
        data, flow_length = self._chunks.popleft()
        self._connection.acknowledge(self.stream_id, flow_length)
        return data

    def reset(self, error_code: int = h2.errors.ErrorCodes.CANCEL) -> None:
        """Abandon the stream: send RST_STREAM unless it already ended; never blocks.

        Safe to call from a cancelled task's ``finally``: the frame is written or queued.
        Buffered data is acknowledged, so an abandoned stream gives its window back.
        """
        if self._finished:
            return
        self._finished = True
        self._connection.forget(self, error_code=None if self.ended else error_code)

    def finish(self) -> None:
        """The consumer is done with a stream that ended normally (idempotent)."""
        self.reset()
