"""A failing stream fails the connection at once, naming the read or write failure."""

from __future__ import annotations

import errno
import re

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import OperationRequest
from codemode_trio.testing import FakeHost

from .conftest import FailingStream, RecordingDelegate, open_session, start_cell


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            trio.BrokenResourceError("connection reset"),
            "failed to read code-mode host message: connection reset",
        ),
        (
            OSError(errno.ECONNRESET, "Connection reset by peer"),
            "failed to read code-mode host message: Connection reset by peer (os error 104)",
        ),
    ],
)
async def test_a_failing_read_fails_pending_operations_at_once(
    autojump_clock: trio.testing.MockClock, error: BaseException, reason: str
) -> None:
    client_stream, host_stream = trio.testing.memory_stream_pair()
    stream = FailingStream(client_stream, error)
    host = FakeHost(host_stream)
    recording = RecordingDelegate()
    async with trio.open_nursery() as outer:
        await outer.start(host.run_reader)
        outer.start_soon(host.handshake)
        async with cm.open_connection(stream) as conn:
            session = await open_session(host, conn, recording)
            await start_cell(host, session, 2, "1")
            start = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    with pytest.raises(cm.ConnectionFailed, match=f"^{re.escape(reason)}$"):
                        await session.wait("1", yield_time_ms=60_000)

                nursery.start_soon(wait)
                assert isinstance(await host.receive(), OperationRequest)
                stream.armed.set()
                await host.cancel_delegate(99)  # any frame: the read that brings it fails
            # Within a moment, not after the 61 s wait deadline.
            assert trio.current_time() - start < 1
            assert not conn.alive
            assert conn.failure == reason
            assert recording.closed_cells == ["1"]
        outer.cancel_scope.cancel()
