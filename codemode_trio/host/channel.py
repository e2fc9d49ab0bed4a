"""The control channel between a network listener and one of its worker processes.

Each worker (:mod:`codemode_trio.host.worker`) is spawned with one end of a UNIX
``SOCK_SEQPACKET`` socket pair: every message is one JSON object in one packet, so no framing
is needed and a packet is never split or merged, and a message may carry file descriptors
(``SCM_RIGHTS``): the listener hands a client's socket to the worker that will serve it this
way. The end of the pair (an empty packet) means the other process is gone.

Messages are small (the largest carries an HTTP request head of at most
:data:`~codemode_trio.host.httphead.MAX_HEAD_BYTES`); base64 carries bytes inside the JSON.
"""

from __future__ import annotations

import array
import base64
import contextlib
import json
import os
import socket
from collections.abc import Sequence
from typing import Any

import trio

__all__ = [
    "MAX_MESSAGE_BYTES",
    "ChannelClosed",
    "WorkerChannel",
    "close_fds",
    "decode_bytes",
    "encode_bytes",
]

#: The largest message either side sends (a request head, base64'd, fits with room to spare).
MAX_MESSAGE_BYTES = 64 * 1024
# No message carries more than one descriptor; room for a few more so that a surplus is seen
# (and closed) rather than silently truncated.
_MAX_FDS = 4


class ChannelClosed(Exception):
    """The other process closed its end (it exited), or sent something that is not a message."""


def encode_bytes(data: bytes) -> str:
    """``data`` as text for a JSON message."""
    return base64.b64encode(data).decode("ascii")


def decode_bytes(text: object) -> bytes:
    """The bytes :func:`encode_bytes` made; ``b""`` for anything that is not a string."""
    return base64.b64decode(text) if isinstance(text, str) else b""


class WorkerChannel:
    """One end of a listener-worker socket pair."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = trio.socket.from_stdlib_socket(sock)

    @staticmethod
    def pair() -> tuple[socket.socket, socket.socket]:
        """A fresh connected pair of ``SOCK_SEQPACKET`` sockets (close-on-exec, both ends)."""
        return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    async def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        """Send ``message`` with ``fds`` (duplicated into the receiver; ours stay open).

        Raises :class:`ChannelClosed` when the other process is gone.
        """
        data = json.dumps(message, separators=(",", ":")).encode()
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        try:
            await self._socket.sendmsg([data], ancillary)
        except OSError as exc:
            raise ChannelClosed(f"the worker channel is closed ({exc.strerror})") from None

    async def receive(self) -> tuple[dict[str, Any], list[int]]:
        """The next message and the descriptors it carried (the caller owns them).

        Raises :class:`ChannelClosed` at the end of the channel or for a malformed message
        (whose descriptors are closed).
        """
        try:
            data, ancillary, flags, _ = await self._socket.recvmsg(
                MAX_MESSAGE_BYTES, socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)
            )
        except OSError as exc:
            raise ChannelClosed(f"the worker channel is closed ({exc.strerror})") from None
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                fds.extend(received)
        if not data:
            close_fds(fds)
            raise ChannelClosed("the other process closed the worker channel")
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise ValueError("truncated")
            message = json.loads(data)
            if not isinstance(message, dict):
                raise ValueError("not an object")
        except ValueError:
            close_fds(fds)
            raise ChannelClosed("a malformed message on the worker channel") from None
        return message, fds

    def close(self) -> None:
        """Close our end: the other process sees the end of the channel."""
        self._socket.close()


def close_fds(fds: Sequence[int]) -> None:
    """Close each descriptor of ``fds``, ignoring any already closed."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
