"""The outgoing side of a connection: a bounded memory channel drained by one writer task.

Whoever produced bytes for the host (the reader answering a frame, a caller's command, a
delegate task's result) hands them to :meth:`Outbox.push`, which never awaits:

- when nothing is queued and the writer is idle, and the stream can write without blocking
  (:class:`~codemode_trio.transport.pipes.PipeStream` can), the bytes are written on the spot:
  no task switch between producing an answer and the host receiving it;
- otherwise they join the channel, behind everything queued before them, and the writer task
  sends them. Order is kept because the direct path is only taken when nothing waits.

The channel is the Rust client's bounded mpsc queue: a full queue means the host stopped
reading, and is a connection failure ("code-mode host outgoing queue is full"), because
producers must never block on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import trio

from .._oserror import describe_stream_error

__all__ = ["NonBlockingSend", "Outbox"]

logger = logging.getLogger("codemode_trio.outbox")

# How many queued pushes one write may join: fewer syscalls under load, bounded copies.
_MAX_BATCH = 256


@runtime_checkable
class NonBlockingSend(Protocol):
    """A stream that can try a write without awaiting (see :class:`Outbox`)."""

    def send_nowait(self, data: bytes) -> int:
        """Write what fits now; return the number of bytes written (raise if broken)."""


class Outbox:
    """Bytes on their way to the host, in the order they were pushed.

    ``on_failure(reason)`` is called once when the queue overflows or a write fails.
    """

    def __init__(
        self, stream: trio.abc.SendStream, capacity: int, on_failure: Callable[[str], None]
    ) -> None:
        self._stream = stream
        self._send, self._receive = trio.open_memory_channel[bytes](capacity)
        # Pushes handed to the channel and not yet written: the direct path is open only at 0.
        self._in_flight = 0
        self._direct = stream.send_nowait if isinstance(stream, NonBlockingSend) else None
        self._on_failure = on_failure
        self._failed = False

    @property
    def queued(self) -> int:
        """Pushes waiting in the channel (not counting one the writer is writing)."""
        return self._send.statistics().current_buffer_used

    def push(self, data: bytes) -> None:
        """Send ``data`` after everything pushed before it; never awaits."""
        if self._failed:
            return
        if self._in_flight == 0 and self._direct is not None:
            try:
                written = self._direct(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                # Let the writer task meet the same error: it can wait for the reader's
                # description of the host's death, which explains far more than EPIPE.
                written = 0
            if written == len(data):
                return
            data = data[written:]
        try:
            self._send.send_nowait(data)
        except trio.WouldBlock:
            self._fail("code-mode host outgoing queue is full")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._fail("code-mode host writer closed")
        else:
            self._in_flight += 1

    def close(self) -> None:
        """Refuse further pushes (the connection is over)."""
        self._failed = True
        self._send.close()

    async def run_writer(self, wait_for_failure: Callable[[], Awaitable[object]]) -> None:
        """The writer task: drain the channel into the stream until it is closed.

        ``wait_for_failure`` is awaited (bounded) after a write error, so that a failure
        recorded meanwhile (the host's exit, seen by the reader) is the one reported.
        """
        receive = self._receive
        stream = self._stream
        try:
            async for data in receive:
                batch = [data]
                while len(batch) < _MAX_BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                await stream.send_all(data if len(batch) == 1 else b"".join(batch))
                self._in_flight -= len(batch)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            with trio.move_on_after(_OTHER_FAILURE_GRACE_S):
                await wait_for_failure()
            self._fail(f"failed to write code-mode host message: {describe_stream_error(exc)}")

    def _fail(self, reason: str) -> None:
        if not self._failed:
            self._failed = True
            self._on_failure(reason)


# A broken pipe means the host is going away; its stdout ends a moment later and the reader's
# EOF report (exit status, stderr) says why. Give that report this long to come first.
_OTHER_FAILURE_GRACE_S = 3.0
