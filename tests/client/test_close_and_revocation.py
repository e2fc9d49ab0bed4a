"""Closing and revoking never wait on a delegate, even one whose own cleanup fails."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import DelegateResponse
from codemode_trio.testing import FakeHost, open_fake_connection

from .conftest import RecordingDelegate, open_session, start_cell


class CleanupFailsDelegate:
    """A tool that runs helpers in its own nursery; one helper's cleanup fails on cancel.

    When the call is revoked the nursery raises ``BaseExceptionGroup([Cancelled, ValueError])``;
    the call's cancel scope strips the ``Cancelled`` and an ``ExceptionGroup([ValueError])``
    leaves the delegate task.
    """

    def __init__(self) -> None:
        self.started = trio.Event()
        self.closed_cells: list[str] = []

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        async def helper() -> None:
            try:
                await trio.sleep_forever()
            finally:
                raise ValueError("helper cleanup failed")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(helper)
            self.started.set()
            await trio.sleep_forever()

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        self.closed_cells.append(cell_id)


async def test_revoked_delegate_whose_cancellation_cleanup_raises_keeps_the_connection() -> None:
    delegate = CleanupFailsDelegate()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        await start_cell(host, session, 2, "1")
        await host.invoke(1, "session-1", "1")
        await delegate.started.wait()
        await host.cancel_delegate(1)
        await trio.testing.wait_all_tasks_blocked()
        # A revoked call's outcome is dropped; it must not take the connection down.
        assert conn.alive, conn.failure
        assert delegate.closed_cells == []
        assert not any(isinstance(m, DelegateResponse) for m in host.log)


class NurseryTool:
    """A tool that runs a helper in its own nursery and waits for it (a common shape).

    Cancelled by the connection's teardown, the nursery raises a group of ``Cancelled``.
    """

    def __init__(self) -> None:
        self.started = trio.Event()

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            self.started.set()
            await trio.sleep_forever()

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        pass


async def test_connection_failure_during_a_tool_with_its_own_nursery_raises_connection_failed() -> (
    None
):
    delegate = NurseryTool()
    with pytest.raises(cm.ConnectionFailed, match="^code-mode host closed its stdout"):
        async with open_fake_connection() as (host, conn):
            session = await open_session(host, conn, delegate)
            cell = await start_cell(host, session, 2, "1")
            await host.invoke(1, "session-1", "1")
            await delegate.started.wait()
            await host.close()
            await cell.initial_response()


async def test_leaving_the_connection_while_a_tool_with_its_own_nursery_runs_raises_nothing() -> (
    None
):
    delegate = NurseryTool()
    client_stream, host_stream = trio.testing.memory_stream_pair()
    host = FakeHost(host_stream)
    escaped: list[BaseException] = []
    after_block = False
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run_reader)
        nursery.start_soon(host.handshake)
        try:
            async with cm.open_connection(client_stream) as conn:
                session = await open_session(host, conn, delegate)
                await start_cell(host, session, 2, "1")
                await host.invoke(1, "session-1", "1")
                await delegate.started.wait()
            after_block = True
        except BaseException as exc:
            escaped.append(exc)
            raise
        finally:
            nursery.cancel_scope.cancel()
    assert escaped == []
    assert after_block


async def test_session_aclose_on_a_dead_connection_returns_after_its_cells_are_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recording = RecordingDelegate()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        # The host never answers: the wait's deadline fails the connection.
        with pytest.raises(cm.ConnectionFailed):
            await session.wait("1", yield_time_ms=1)
        assert not conn.alive
        await session.aclose()
        # Shutting down a dead binding waits for the session's cleanup (CLIENT §3.10).
        assert session.cleaned_up
        assert recording.closed_cells == ["1"]


async def test_connection_aclose_returns_after_every_live_cell_is_closed() -> None:
    # Scheduling order inside a Trio batch is randomised; repeat so a race shows every time.
    for _ in range(16):
        recording = RecordingDelegate()
        async with open_fake_connection() as (host, conn):
            session = await open_session(host, conn, recording)
            await start_cell(host, session, 2, "1")
            await conn.aclose()
            assert recording.closed_cells == ["1"]
            assert session.cleaned_up
