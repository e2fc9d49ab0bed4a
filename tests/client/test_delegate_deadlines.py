"""No deadline while the host is waiting on us.

The host holds a cell's observation while one of that cell's delegate calls is unanswered (a
notification's result waits for our acknowledgement). That time is ours: the wait and initial
response deadlines pause while a delegate call of the observed cell is in flight, and only
the host's own silence can fail the connection.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import DelegateResponse, OperationCancel, OperationRequest, RequestId
from codemode_trio.testing import open_fake_connection

from .conftest import execute_then_cancel, open_session, start_cell, yielded


class SlowNotifications:
    """A notify handler that takes ``seconds`` (virtual time)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.notes: list[str] = []

    async def invoke_tool(self, call: cm.ToolCall) -> None:
        await trio.sleep(self.seconds)

    async def notify(self, note: cm.Notification) -> None:
        await trio.sleep(self.seconds)
        self.notes.append(note.text)

    def cell_closed(self, cell_id: str) -> None:
        pass


async def test_a_slow_notification_does_not_time_out_the_initial_response(
    autojump_clock: trio.testing.MockClock,
) -> None:
    delegate = SlowNotifications(120)  # longer than the 61 s initial-response deadline
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        cell = await start_cell(host, session, 2, "1")
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                await host.notify(1, "session-1", "1", "working")
                await host.receive_a(DelegateResponse)  # the host holds its result until this
                await host.initial(2, yielded("1"))

            nursery.start_soon(host_side)
            assert await cell.initial_response() == yielded("1")
        assert trio.current_time() - start == pytest.approx(120)
        assert delegate.notes == ["working"]
        assert conn.alive


async def test_a_slow_tool_does_not_time_out_a_wait_on_its_cell(
    autojump_clock: trio.testing.MockClock,
) -> None:
    delegate = SlowNotifications(200)
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                request = await host.receive_a(OperationRequest)
                await host.invoke(1, "session-1", "1", "slow")
                await host.receive_a(DelegateResponse)
                await trio.sleep(30)  # the host's own time still counts, and is within budget
                await host.wait_completed(request.id, yielded("1"))

            nursery.start_soon(host_side)
            outcome = await session.wait("1", yield_time_ms=1_000)
        assert outcome == cm.WaitOutcome(True, yielded("1"))
        assert conn.alive


async def test_the_hosts_own_silence_still_fails_the_connection_after_a_delegate_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    delegate = SlowNotifications(100)
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        cell = await start_cell(host, session, 2, "1")
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                await host.notify(1, "session-1", "1", "working")
                await host.receive_a(DelegateResponse)
                # ... and then nothing: the host hangs.

            nursery.start_soon(host_side)
            with pytest.raises(
                cm.ConnectionFailed,
                match="^code-mode host timed out waiting for initial response$",
            ):
                await cell.initial_response()
        # 100 s held by our delegate, then the full 1 ms yield + 1 s grace + 60 s allowance.
        assert trio.current_time() - start == pytest.approx(161.001)
        assert not conn.alive


async def test_internal_terminate_of_an_abandoned_cell_has_a_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        await execute_then_cancel(host, session, 2)
        assert await host.receive() == OperationCancel(RequestId(2))
        start = trio.current_time()
        await host.start(2, "1")
        terminate = await host.receive_a(OperationRequest)
        assert terminate.id == 3
        # The host never answers the terminate the client sent on its own.
        assert await conn.wait_failed() == "code-mode host timed out waiting for terminate response"
        assert trio.current_time() - start == pytest.approx(60)


async def test_a_wait_cancelled_past_its_deadline_is_retired_before_the_next_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The wait's deadline passed while the cell's tool call was running, so the wait is
    # waiting for that call; its caller's cancellation must still reach the machine at once,
    # before any later command, as it does before the deadline.
    delegate = SlowNotifications(1_000)
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        await start_cell(host, session, 2, "1")
        await host.invoke(1, "session-1", "1", "slow")
        outcomes: list[cm.WaitOutcome] = []
        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:

            async def first_wait() -> None:
                with scope:
                    await session.wait("1", yield_time_ms=0)

            nursery.start_soon(first_wait)
            assert (await host.receive_a(OperationRequest)).id == 3
            await trio.sleep(100)  # past the wait's 61 s deadline; the tool call still runs

            async def cancel_then_wait_again() -> None:
                scope.cancel()
                outcomes.append(await session.wait("1", yield_time_ms=0))

            nursery.start_soon(cancel_then_wait_again)
            assert await host.receive() == OperationCancel(RequestId(3))
            await host.assert_quiet()  # the next wait is held back ...
            await host.reply_error(3, "code-mode request cancelled")
            # ... until the host has answered the cancelled one.
            assert (await host.receive_a(OperationRequest)).id == 4
            await host.wait_completed(4, yielded("1"))
        assert outcomes == [cm.WaitOutcome(True, yielded("1"))]
        assert conn.alive
