"""PipeStream: a Trio stream over two pipe fds that tries each syscall before waiting."""

from __future__ import annotations

import array
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio
import trio.testing

from codemode_trio.transport.pipes import PipeStream


@asynccontextmanager
async def pipe_pair() -> AsyncIterator[tuple[PipeStream, trio.lowlevel.FdStream, int]]:
    """A PipeStream plus the far ends: a stream to write its input, an fd to read its output."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    stream = PipeStream(trio.lowlevel.FdStream(out_write), trio.lowlevel.FdStream(in_read))
    feeder = trio.lowlevel.FdStream(in_write)
    try:
        yield stream, feeder, out_read
    finally:
        await stream.aclose()
        await feeder.aclose()
        with contextlib.suppress(OSError):  # a test may have closed it already
            os.close(out_read)


class StepCounter(trio.abc.Instrument):
    """Counts how many times the tasks of one name are stepped by the scheduler."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1


@contextmanager
def counting_steps(name: str) -> Iterator[StepCounter]:
    counter = StepCounter(name)
    trio.lowlevel.add_instrument(counter)
    try:
        yield counter
    finally:
        trio.lowlevel.remove_instrument(counter)


async def test_bytes_flow_both_ways() -> None:
    async with pipe_pair() as (stream, feeder, out_read):
        await stream.send_all(b"to the host")
        assert os.read(out_read, 100) == b"to the host"
        await feeder.send_all(b"from the host")
        assert await stream.receive_some() == b"from the host"


async def test_receive_respects_max_bytes() -> None:
    async with pipe_pair() as (stream, feeder, _):
        await feeder.send_all(b"abcdef")
        assert await stream.receive_some(4) == b"abcd"
        assert await stream.receive_some(4) == b"ef"
        with pytest.raises(ValueError, match="max_bytes"):
            await stream.receive_some(0)


async def test_both_operations_are_checkpoints_even_without_waiting() -> None:
    async with pipe_pair() as (stream, feeder, out_read):
        await feeder.send_all(b"ready")
        with trio.testing.assert_checkpoints():
            assert await stream.receive_some() == b"ready"
        with trio.testing.assert_checkpoints():
            await stream.send_all(b"room")
        assert os.read(out_read, 10) == b"room"


async def test_a_receive_that_waits_takes_two_steps() -> None:
    # The point of the class on the read side: one step finds the pipe empty and parks, the
    # step the fd wakes returns the data. FdStream yields before its first read, so it takes
    # three.
    got: list[bytes] = []
    async with pipe_pair() as (stream, feeder, _):
        with counting_steps("pipe-reader") as counter:

            async def reader() -> None:
                got.append(await stream.receive_some())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader, name="pipe-reader")
                await trio.testing.wait_all_tasks_blocked()
                await feeder.send_all(b"late")
        assert got == [b"late"]
        assert counter.steps == 2


async def test_an_immediate_write_happens_before_the_first_yield() -> None:
    async with pipe_pair() as (stream, _, out_read):
        os.set_blocking(out_read, False)
        seen: list[bytes] = []

        async def peek() -> None:
            try:
                seen.append(os.read(out_read, 10))
            except BlockingIOError:
                seen.append(b"")

        async with trio.open_nursery() as nursery:
            # Scheduled first, so it runs in the same batch as send_all's yield: only a write
            # made before that yield is visible to it.
            nursery.start_soon(peek)
            await stream.send_all(b"now")
        assert seen == [b"now"]


async def send_while_draining(
    stream: PipeStream, out_read: int, data: bytes | memoryview, size: int
) -> bytes:
    """``stream.send_all(data)`` while another task reads the far end until ``size`` bytes."""
    received = bytearray()
    reader_stream = trio.lowlevel.FdStream(os.dup(out_read))

    async def drain() -> None:
        while len(received) < size:
            received.extend(await reader_stream.receive_some(65536))

    try:
        # A safety net, not a timing assumption: a short send would leave drain() waiting.
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain)
                await stream.send_all(data)
    finally:
        await reader_stream.aclose()
    return bytes(received)


async def test_large_send_waits_for_the_pipe_to_drain() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: many times a pipe's buffer
    async with pipe_pair() as (stream, _, out_read):
        assert await send_while_draining(stream, out_read, payload, len(payload)) == payload


async def test_end_of_file_reads_empty() -> None:
    async with pipe_pair() as (stream, feeder, _):
        await feeder.send_all(b"last")
        await feeder.aclose()
        assert await stream.receive_some() == b"last"
        assert await stream.receive_some() == b""


async def test_concurrent_use_of_one_direction_is_refused() -> None:
    async with pipe_pair() as (stream, _, _out), trio.open_nursery() as nursery:
        nursery.start_soon(stream.receive_some)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError, match="receive"):
            await stream.receive_some()
        nursery.cancel_scope.cancel()


async def test_closing_wakes_a_waiting_reader() -> None:
    async with pipe_pair() as (stream, _, _out):

        async def close_soon() -> None:
            await trio.testing.wait_all_tasks_blocked()
            await stream.receive_stream.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_soon)
            with pytest.raises(trio.ClosedResourceError):
                await stream.receive_some()


async def test_use_after_close_is_a_closed_resource_error() -> None:
    async with pipe_pair() as (stream, _, _out):
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"x")
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some()
        with pytest.raises(trio.ClosedResourceError):
            await stream.wait_send_all_might_not_block()


async def test_writing_to_a_pipe_nobody_reads_is_a_broken_resource_error() -> None:
    async with pipe_pair() as (stream, _, out_read):
        os.close(out_read)  # the only read end is gone
        broken = r"^Broken pipe \(os error 32\)$"  # the reference client's words
        with pytest.raises(trio.BrokenResourceError, match=broken) as caught:
            await stream.send_all(b"x")
        assert isinstance(caught.value.__cause__, BrokenPipeError)


async def test_send_eof_closes_the_write_end() -> None:
    async with pipe_pair() as (stream, _, out_read):
        await stream.send_all(b"bye")
        await stream.send_eof()
        assert os.read(out_read, 10) == b"bye"
        assert os.read(out_read, 10) == b""


async def test_cancelled_reader_loses_nothing() -> None:
    async with pipe_pair() as (stream, feeder, _):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        await feeder.send_all(b"kept")
        assert await stream.receive_some() == b"kept"


async def test_a_receive_cancelled_after_its_read_keeps_the_bytes_for_the_next() -> None:
    # With data ready, the read happens before the checkpoint; a cancellation there must not
    # drop what was read, whatever max_bytes the next calls ask for.
    async with pipe_pair() as (stream, feeder, _):
        await feeder.send_all(b"abcdef")
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.receive_some(4)
        assert scope.cancelled_caught
        await feeder.send_all(b"gh")
        with trio.testing.assert_checkpoints():
            assert await stream.receive_some(3) == b"abc"
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.receive_some(10)
        assert scope.cancelled_caught
        assert await stream.receive_some(10) == b"d"
        assert await stream.receive_some(10) == b"efgh"


async def test_a_cancelled_receive_on_a_closed_stream_is_cancelled() -> None:
    # As with Trio's own streams: the cancellation comes first, not the closed stream's error.
    async with pipe_pair() as (stream, _, _out):
        await stream.aclose()
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.receive_some()
        assert scope.cancelled_caught


async def test_a_receive_that_read_its_bytes_returns_them_even_if_cancelled_meanwhile() -> None:
    # Cancelled while it yields after a read that did not wait: the bytes are still returned
    # (that yield is shielded), never left behind in a stream the caller may close next.
    scope = trio.CancelScope()
    reader = trio.lowlevel.current_task()

    class CancelAtTheNextYield(trio.abc.Instrument):
        def after_task_step(self, task: trio.lowlevel.Task) -> None:
            if task is reader:
                scope.cancel()

    got: list[bytes] = []
    async with pipe_pair() as (stream, feeder, _):
        await feeder.send_all(b"hello")
        instrument = CancelAtTheNextYield()
        with scope:
            # The receive's only yield is the one after its read: the scope is cancelled there.
            trio.lowlevel.add_instrument(instrument)
            try:
                got.append(await stream.receive_some())
            finally:
                trio.lowlevel.remove_instrument(instrument)
    assert scope.cancel_called
    assert got == [b"hello"]


async def test_bytes_kept_from_a_cancelled_receive_are_not_read_after_close() -> None:
    async with pipe_pair() as (stream, feeder, _):
        await feeder.send_all(b"kept")
        with trio.CancelScope() as scope:
            scope.cancel()
            await stream.receive_some()
        assert scope.cancelled_caught
        await stream.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await stream.receive_some()


async def test_an_empty_send_on_a_closed_stream_fails_too() -> None:
    async with pipe_pair() as (stream, _, _out):
        await stream.send_eof()
        with pytest.raises(trio.ClosedResourceError):
            await stream.send_all(b"")


async def test_waiting_for_room_while_sending_is_refused() -> None:
    async with pipe_pair() as (stream, _, _out), trio.open_nursery() as nursery:
        # Fill the pipe so that send_all has to wait, then ask for room from another task.
        nursery.start_soon(stream.send_all, b"x" * (4 << 20))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError, match="send"):
            await stream.wait_send_all_might_not_block()
        nursery.cancel_scope.cancel()


async def test_a_memoryview_of_wide_items_is_sent_byte_for_byte() -> None:
    # Partial writes count bytes; a view of 4-byte items must not be sliced by that count.
    payload = array.array("I", range(200_000))
    expected = payload.tobytes()
    async with pipe_pair() as (stream, _, out_read):
        sent = await send_while_draining(stream, out_read, memoryview(payload), len(expected))
    assert sent == expected
