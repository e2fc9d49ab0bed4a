"""Reading and writing a Trio stream without the scheduler passes of its own methods.

An HTTP/2 connection writes each request the moment it is made and reads again only once it
has handled everything read before; both are on the critical path of every gRPC call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable

import trio

from ..client.outbox import NonBlockingSend

__all__ = ["nonblocking_writer", "reader_for"]


def nonblocking_writer(stream: trio.abc.Stream) -> Callable[[bytes], int] | None:
    """A function writing what ``stream`` takes at once (``0`` if full), if it can have one.

    Trio's ``send_all`` yields to the scheduler even when the bytes went out at once: one
    scheduler pass on the critical path of every call. A connected TCP socket (on POSIX) or a
    :class:`~.transport.pipes.PipeStream` can be written without awaiting.
    """
    if isinstance(stream, NonBlockingSend):
        return stream.send_nowait
    if isinstance(stream, trio.SocketStream) and sys.platform != "win32":
        sock = stream.socket

        def send_nowait(data: bytes) -> int:
            fd = sock.fileno()  # looked up each time: a closed socket reads -1
            if fd < 0:
                raise trio.ClosedResourceError("socket was already closed")
            try:
                return os.write(fd, data)
            except BlockingIOError:
                return 0

        return send_nowait
    return None


def reader_for(stream: trio.abc.Stream) -> Callable[[int], Awaitable[bytes | bytearray]]:
    """``stream.receive_some``, or for a TCP socket (on POSIX) one that waits first.

    Trio's sockets try the read before waiting, so every time the reader catches up it pays
    for a failed read (a syscall and an exception, through several context managers). The
    reader only reads again once it handled everything, when usually nothing is there yet.
    """
    if not isinstance(stream, trio.SocketStream) or sys.platform == "win32":
        return stream.receive_some
    sock = stream.socket

    async def receive_some(max_bytes: int) -> bytes:
        while True:
            # The wait is the checkpoint; closing the socket wakes it (ClosedResourceError).
            await trio.lowlevel.wait_readable(sock)
            fd = sock.fileno()  # looked up each time: a closed socket reads -1
            if fd < 0:
                raise trio.ClosedResourceError("socket was already closed")
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue

    return receive_some
