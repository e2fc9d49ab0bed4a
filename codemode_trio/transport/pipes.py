"""A host's stdin and stdout as one :class:`trio.abc.Stream` that tries the syscall first.

Trio's :class:`trio.lowlevel.FdStream` yields to the scheduler *before* every ``write`` and
``read``. For a request/response protocol on a pipe that puts one extra scheduler pass on the
critical path of every round trip: the writer task wakes with a frame, yields, and only writes
on its next turn. :class:`PipeStream` tries the syscall at once instead, and only if it would
block waits for the fd (a wait is a checkpoint: a cancelled call raises there). A call that did
not have to wait still yields once, *after* the syscall, so every ``send_all`` and
``receive_some`` remains a checkpoint, as the :class:`~trio.abc.Stream` contract requires. A
``send_all`` checks for cancellation before it writes; a ``receive_some`` whose read did not
wait checks after it, and when cancelled keeps the bytes for the next call, so nothing read is
ever lost.

The fds stay owned by the two ``FdStream`` objects the process was spawned with: closing goes
through them, so a task blocked on the fd is woken with :class:`trio.ClosedResourceError`
(Trio's ``notify_closing``), and the fd number is looked up on every call, never cached, so a
closed and reused number can never be written to.
"""

from __future__ import annotations

import errno
import os

import trio

from .._oserror import os_error_text

__all__ = ["PipeStream"]

_DEFAULT_RECEIVE_SIZE = 65536


class PipeStream(trio.abc.Stream):
    """``send_stream`` (the host's stdin) and ``receive_stream`` (its stdout) as one stream.

    Both ends are non-blocking :class:`trio.lowlevel.FdStream` objects.
    """

    def __init__(
        self, send_stream: trio.lowlevel.FdStream, receive_stream: trio.lowlevel.FdStream
    ) -> None:
        self.send_stream = send_stream
        self.receive_stream = receive_stream
        self._sending = False
        self._receiving = False
        # Bytes read by a receive_some that was cancelled after its read: the next one's.
        self._held = b""

    def __repr__(self) -> str:
        return (
            f"<PipeStream send_fd={self.send_stream.fileno()} "
            f"receive_fd={self.receive_stream.fileno()}>"
        )

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data``, waiting for the pipe to drain only when it is full."""
        if self._sending:
            raise trio.BusyResourceError("another task is using this stream for send")
        # Checked up front: sending b"" on a closed stream must fail too.
        if self.send_stream.fileno() < 0:
            raise trio.ClosedResourceError("file was already closed")
        self._sending = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            waited = False
            # Bytes, not items: os.write counts bytes, and slicing a memoryview of wider items
            # by a byte count would skip data.
            with memoryview(data) as view, view.cast("B") as octets:
                sent = 0
                while sent < len(octets):
                    fd = self.send_stream.fileno()
                    try:
                        sent += os.write(fd, octets[sent:])
                    except BlockingIOError:
                        waited = True
                        await trio.lowlevel.wait_writable(fd)
                    except OSError as exc:
                        raise _stream_error(exc) from _cause(exc)
            if not waited:
                await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._sending = False

    def send_nowait(self, data: bytes) -> int:
        """Write what the pipe takes now, without waiting; return the number of bytes written.

        For writers that must not await (see :class:`~codemode_trio.client.outbox.Outbox`):
        ``0`` when the pipe is full or another task is sending; raises
        :class:`trio.BrokenResourceError` / :class:`trio.ClosedResourceError` like
        :meth:`send_all`.
        """
        if self._sending:
            return 0  # a send_all is under way: writing now would interleave with it
        fd = self.send_stream.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("file was already closed")
        try:
            return os.write(fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise _stream_error(exc) from _cause(exc)

    async def wait_send_all_might_not_block(self) -> None:
        """Wait until the pipe has room."""
        if self._sending:
            raise trio.BusyResourceError("another task is using this stream for send")
        fd = self.send_stream.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("file was already closed")
        self._sending = True
        try:
            await trio.lowlevel.wait_writable(fd)
        finally:
            self._sending = False

    async def send_eof(self) -> None:
        """Close the write end: the host sees EOF on its stdin."""
        await self.send_stream.aclose()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Read what the pipe holds (up to ``max_bytes``); ``b""`` at end of file."""
        if max_bytes is None:
            max_bytes = _DEFAULT_RECEIVE_SIZE
        elif max_bytes < 1:
            raise ValueError("max_bytes must be integer >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is using this stream for receive")
        self._receiving = True
        try:
            fd = self.receive_stream.fileno()
            if fd < 0:
                # A cancelled call on a closed stream says Cancelled, as Trio's own streams do.
                await trio.lowlevel.checkpoint_if_cancelled()
                raise trio.ClosedResourceError("file was already closed")
            held = self._held
            if held:
                data, self._held = held[:max_bytes], held[max_bytes:]
            else:
                waited = False
                while True:
                    try:
                        data = os.read(fd, max_bytes)
                    except BlockingIOError:
                        # Nothing there yet: waiting is the checkpoint, and a cancelled call
                        # raises there, before it has read anything.
                        waited = True
                    except OSError as exc:
                        raise _stream_error(exc) from _cause(exc)
                    else:
                        break
                    await trio.lowlevel.wait_readable(fd)
                    fd = self.receive_stream.fileno()
                if waited:
                    # Once woken, return the data at once rather than yielding again while the
                    # host waits for our answer.
                    return data
            # Read without waiting: cancellation is checked after the syscall (so the common
            # read, which waits, pays for no separate check), and a cancelled call keeps the
            # bytes for the next one. Past the check the data is returned: the yield every
            # checkpoint owes is shielded.
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
            except BaseException:
                self._held = data + self._held
                raise
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        """Close both ends."""
        try:
            await self.send_stream.aclose()
        finally:
            await self.receive_stream.aclose()


def _stream_error(exc: OSError) -> trio.ClosedResourceError | trio.BrokenResourceError:
    """What an ``OSError`` from a pipe syscall means to a Trio stream's user."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("file was already closed")
    return trio.BrokenResourceError(os_error_text(exc))


def _cause(exc: OSError) -> OSError | None:
    # EBADF only means "we closed it": the OSError would add noise, not information.
    return None if exc.errno == errno.EBADF else exc
