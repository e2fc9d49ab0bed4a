"""The Rust client's driver test suite (``driver_tests.rs``), behaviour for behaviour.

Each test keeps the seed's name with a ``test_`` prefix. Where the seed drives the driver
through its channels, these drive the real connection through a FakeHost over memory streams:
the frames asserted are the frames on the wire.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import (
    CellLimits,
    DelegateResponse,
    NotificationDelivered,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    ShutdownRequest,
    TerminateRequest,
    WaitRequest,
    WireError,
    WireOk,
)
from codemode_trio.testing import FakeHost, open_fake_connection

from .conftest import (
    FailingStream,
    HeldDelegate,
    RecordingDelegate,
    assert_connection_stopped,
    execute_then_cancel,
    open_session,
    start_cell,
    terminated,
    yielded,
)


async def test_open_session_includes_nondefault_cell_execution_limits() -> None:
    async with open_fake_connection() as (host, conn):
        limits = CellLimits(max_yield_time_ms=250, max_heap_size_bytes=16 * 1024 * 1024)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.answer_open)
            session = await conn.start_session(limits=limits, session_id="session-1")
        (frame,) = [m for m in host.log if isinstance(m, OperationRequest)]
        assert frame == OperationRequest(
            cm.protocol.RequestId(1),
            OpenSessionRequest(
                "session-1",
                CellLimits(max_yield_time_ms=250, max_heap_size_bytes=16 * 1024 * 1024),
            ),
        )
        assert frame.request.to_wire()["cellExecutionLimits"] == {
            "maxYieldTimeMs": 250,
            "maxHeapSizeBytes": 16777216,
        }
        assert session.session_id == "session-1"


async def test_deferred_delegates_follow_cell_readiness_and_cancellation(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        async with trio.open_nursery() as nursery:
            first: list[cm.StartedCell] = []
            second: list[cm.StartedCell] = []

            async def execute(into: list[cm.StartedCell], call_id: str) -> None:
                into.append(
                    await session.execute("text('done')", tool_call_id=call_id, yield_time_ms=1)
                )

            nursery.start_soon(execute, first, "first-cell")
            assert (await host.receive_a(OperationRequest)).id == 2
            nursery.start_soon(execute, second, "second-cell")
            assert (await host.receive_a(OperationRequest)).id == 3

            # Delegate calls for cells whose execution/started has not arrived yet.
            await host.notify(7, "session-1", "first-cell", "hello", call_id="notify-first-cell")
            await host.notify(8, "session-1", "second-cell", "hello", call_id="notify-second-cell")
            await host.notify(9, "session-1", "first-cell", "hello", call_id="notify-first-cell")
            await host.cancel_delegate(9)
            await host.assert_quiet()
            assert recording.notifications == 0

            await host.start(3, "second-cell")
            response = await host.receive()
            assert response == DelegateResponse(
                cm.protocol.DelegateRequestId(8), WireOk(NotificationDelivered())
            )
            assert recording.notifications_by_cell == {"second-cell": 1}

            await host.start(2, "first-cell")
            response = await host.receive()
            assert response == DelegateResponse(
                cm.protocol.DelegateRequestId(7), WireOk(NotificationDelivered())
            )
            assert recording.notifications_by_cell == {"first-cell": 1, "second-cell": 1}
        assert [c.cell_id for c in first + second] == ["first-cell", "second-cell"]
        await host.assert_quiet()
        assert conn.alive


async def test_dropped_open_waiter_shuts_down_committed_session() -> None:
    async with open_fake_connection() as (host, conn):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.start_session, None)
                request = await host.receive_a(OperationRequest)
                assert request.id == 1
                scope.cancel()  # the caller gives up before session/ready
        # The open's cancellation is reported, then the host commits the session anyway.
        assert await host.receive() == OperationCancel(cm.protocol.RequestId(1))
        await host.reply(1, cm.protocol.SessionReady("session-1"))
        shutdown = await host.receive_a(OperationRequest)
        assert shutdown.id == 2
        assert shutdown.request == ShutdownRequest("session-1")
        await host.session_closed(2, "session-1")
        await host.assert_quiet()

        # Nobody holds a Session for it; the machine no longer knows it (the exact refusal of a
        # later execute, "unknown code-mode session session-1", is checked on the machine in
        # tests/protocol/test_client_protocol.py).
        assert conn.statistics().sessions == 0
        assert conn.alive


async def test_delegate_cancel_is_best_effort_and_sends_no_late_response(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "slow")
        await host.cancel_delegate(7)
        await host.assert_quiet()
        await host.notify(7, "session-1", "1", "duplicate", call_id="notify-reused")
        assert (
            await conn.wait_failed()
            == "duplicate code-mode delegate request ID DelegateRequestId(7)"
        )
        await host.assert_quiet()
        assert not conn.alive
        assert recording.invocations == 1
        assert recording.notifications == 0


async def test_delegate_limit_returns_an_error_without_disconnecting(
    recording: RecordingDelegate,
) -> None:
    limit = 1024
    async with open_fake_connection(capabilities=[]) as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        for delegate_id in range(1, limit + 1):
            await host.invoke(delegate_id, "session-1", "1", "slow")
        await host.invoke(limit + 1, "session-1", "1", "slow")
        with trio.fail_after(5):
            response = await host.receive()
        assert response == DelegateResponse(
            cm.protocol.DelegateRequestId(limit + 1),
            WireError(f"code-mode host exceeded the limit of {limit} pending delegate calls"),
        )
        assert conn.alive

        await host.cancel_delegate(1)
        await host.invoke(limit + 2, "session-1", "1", "slow")
        await trio.testing.wait_all_tasks_blocked()
        assert recording.invocations == limit + 1
        assert conn.statistics().active_delegates == limit
        await host.assert_quiet()
        assert conn.alive


async def test_terminate_closes_cell_without_waiting_for_delegate_cleanup(
    held: HeldDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, held)
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "slow")
        assert await held.next_event() == "started"

        async with trio.open_nursery() as nursery:
            outcome: list[cm.WaitOutcome] = []

            async def terminate() -> None:
                outcome.append(await session.terminate("1"))

            nursery.start_soon(terminate)
            request = await host.receive_a(OperationRequest)
            assert request == OperationRequest(
                cm.protocol.RequestId(3), TerminateRequest("session-1", "1")
            )
            await host.cancel_delegate(7)
            await host.cell_closed("session-1", "1")
            await host.wait_completed(3, terminated("1"))
            closure = {await held.next_event(), await held.next_event()}
            assert closure == {"cancelled", ("cell_closed", "1")}
        # Terminate returned while the delegate is still holding its cleanup.
        assert outcome == [cm.WaitOutcome(True, terminated("1"))]
        assert held.pending_event() is None

        held.release.set()
        assert await held.next_event() == "finished"
        await host.assert_quiet()
        assert held.pending_event() is None
        assert conn.alive


async def test_shutdown_closes_cell_without_waiting_for_delegate_cleanup(
    held: HeldDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, held)
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "slow")
        assert await held.next_event() == "started"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.aclose)
            request = await host.receive_a(OperationRequest)
            assert request == OperationRequest(
                cm.protocol.RequestId(3), ShutdownRequest("session-1")
            )
            await host.cancel_delegate(7)
            await host.cell_closed("session-1", "1")
            await host.session_closed(3, "session-1")
            closure = {await held.next_event(), await held.next_event()}
            assert closure == {"cancelled", ("cell_closed", "1")}
        # aclose() returned Ok without waiting for the held delegate.
        assert held.pending_event() is None

        held.release.set()
        assert await held.next_event() == "finished"
        assert held.pending_event() is None
        await host.assert_quiet()
        assert conn.alive


async def test_completed_delegate_request_id_cannot_be_reused(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await host.notify(7, "session-1", "1", "once", call_id="notify-1")
        assert await host.receive() == DelegateResponse(
            cm.protocol.DelegateRequestId(7), WireOk(NotificationDelivered())
        )
        await host.notify(7, "session-1", "1", "once", call_id="notify-1")
        assert (
            await conn.wait_failed()
            == "duplicate code-mode delegate request ID DelegateRequestId(7)"
        )
        assert recording.notifications == 1


class PanickingDelegate(RecordingDelegate):
    async def invoke_tool(self, call: cm.ToolCall) -> object:
        raise RuntimeError("delegate panic probe")


async def test_delegate_task_panic_becomes_tool_error_without_killing_connection() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, PanickingDelegate())
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "panic")
        with trio.fail_after(1):
            response = await host.receive()
        assert response == DelegateResponse(
            cm.protocol.DelegateRequestId(7),
            WireError("code-mode delegate task failed: RuntimeError: delegate panic probe"),
        )
        assert conn.alive
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive


async def test_delegate_for_unknown_cell_returns_error_without_invocation(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "known")
        await host.invoke(7, "session-1", "missing", "slow")
        with trio.fail_after(1):
            response = await host.receive()
        assert response == DelegateResponse(
            cm.protocol.DelegateRequestId(7),
            WireError("code-mode host delegated for unknown cell missing in session session-1"),
        )
        assert conn.alive
        assert recording.invocations == 0


async def test_delegate_after_cell_close_returns_error_without_invocation(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await host.cell_closed("session-1", "1")
        await host.notify(7, "session-1", "1", "late", call_id="notify-1")
        with trio.fail_after(1):
            response = await host.receive()
        assert response == DelegateResponse(
            cm.protocol.DelegateRequestId(7),
            WireError("code-mode host delegated for unknown cell 1 in session session-1"),
        )
        assert conn.alive
        assert recording.notifications == 0
        assert recording.closed_cells == ["1"]


async def test_mismatched_initial_response_fails_connection_and_closes_cell_once(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cell = await start_cell(host, session, 2, "1")
        await host.initial(2, yielded("2"))
        with pytest.raises(
            cm.ConnectionFailed,
            match="^code-mode host returned initial response for cell 2 instead of 1$",
        ):
            await cell.initial_response()
        assert not conn.alive
        assert recording.closed_cells == ["1"]


async def test_mismatched_wait_response_fails_connection(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                request = await host.receive_a(OperationRequest)
                assert request.request == WaitRequest("session-1", "1", 1)
                await host.wait_completed(3, yielded("2"))

            nursery.start_soon(host_side)
            with pytest.raises(
                cm.ConnectionFailed,
                match="^code-mode host returned cell 2 for request targeting 1$",
            ):
                await session.wait("1", yield_time_ms=1)
        assert not conn.alive
        assert recording.closed_cells == ["1"]


async def test_mismatched_terminate_response_fails_connection(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                request = await host.receive_a(OperationRequest)
                assert request.request == TerminateRequest("session-1", "1")
                await host.wait_completed(3, terminated("2"), live=False)

            nursery.start_soon(host_side)
            with pytest.raises(cm.ConnectionFailed, match="for request targeting 1$"):
                await session.terminate("1")
        assert not conn.alive
        assert recording.closed_cells == ["1"]


async def test_remote_wait_accepts_durations_longer_than_five_minutes() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                with trio.fail_after(1):
                    request = await host.receive_a(OperationRequest)
                assert request.request == WaitRequest("session-1", "1", 300_001)
                await host.wait_completed(3, yielded("1"))

            nursery.start_soon(host_side)
            outcome = await session.wait("1", yield_time_ms=300_001)
        assert outcome == cm.WaitOutcome(True, yielded("1"))
        assert outcome.response.host_duration_ns == 0


async def test_queued_remote_wait_times_out_and_invalidates_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        await start_cell(host, session, 2, "1")
        start = trio.current_time()
        with pytest.raises(
            cm.ConnectionFailed, match="^code-mode host timed out waiting for wait response$"
        ):
            await session.wait("1", yield_time_ms=1)
        # yield_time_ms + 1 s grace + 60 s transport allowance, on the virtual clock.
        assert trio.current_time() - start == pytest.approx(61.001)
        assert isinstance(await host.receive(), OperationRequest)
        assert not conn.alive
        assert conn.failure == "code-mode host timed out waiting for wait response"
        await assert_connection_stopped(host)


async def test_queued_remote_termination_times_out_and_invalidates_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        await start_cell(host, session, 2, "1")
        start = trio.current_time()
        with pytest.raises(
            cm.ConnectionFailed, match="^code-mode host timed out waiting for terminate response$"
        ):
            await session.terminate("1")
        assert trio.current_time() - start == pytest.approx(60.0)
        assert not conn.alive
        await assert_connection_stopped(host)


async def test_cancelled_wait_is_retired_before_next_wait_is_sent() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:
            first_wait = trio.CancelScope()

            async def first() -> None:
                with first_wait:
                    await session.wait("1", yield_time_ms=60_000)

            nursery.start_soon(first)
            assert (await host.receive_a(OperationRequest)).request == WaitRequest(
                "session-1", "1", 60_000
            )
            first_wait.cancel()

            second_result: list[cm.WaitOutcome] = []

            async def second() -> None:
                second_result.append(await session.wait("1", yield_time_ms=1))

            nursery.start_soon(second)
            assert await host.receive() == OperationCancel(cm.protocol.RequestId(3))
            await host.assert_quiet()  # the second wait is held back

            await host.reply_error(3, "code-mode request cancelled")
            second_wait = await host.receive_a(OperationRequest)
            assert second_wait.id == 4
            assert second_wait.request == WaitRequest("session-1", "1", 1)
            await host.wait_completed(4, yielded("1"))
        assert second_result == [cm.WaitOutcome(True, yielded("1"))]


async def test_abandoned_execute_is_tracked_and_terminated_after_admission(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await execute_then_cancel(host, session, 2)
        await host.start(2, "1")
        assert await host.receive() == OperationCancel(cm.protocol.RequestId(2))
        assert await host.receive() == OperationRequest(
            cm.protocol.RequestId(3), TerminateRequest("session-1", "1")
        )
        await host.initial(2, terminated("1"))
        await host.wait_completed(3, terminated("1"))
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive
        assert recording.closed_cells == ["1"]


class _CancelWhenRescheduled(trio.abc.Instrument):
    """Cancel ``scope`` the moment ``task`` is handed a result, before it runs again."""

    def __init__(self, task: trio.lowlevel.Task, scope: trio.CancelScope) -> None:
        self.task = task
        self.scope = scope

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.scope.cancel()


async def test_delivered_but_unclaimed_execute_is_terminated_when_the_caller_is_cancelled(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        # The seed drives its driver directly: the StartedCell is delivered, then the caller is
        # cancelled before it claims it. Here the same instant is made with an instrument: the
        # caller's scope is cancelled just as execution/started hands it the cell, before the
        # caller runs again. The cancellation wins, so the delivered cell must be cleaned up.
        caller: list[trio.lowlevel.Task] = []
        scope = trio.CancelScope()

        async def execute() -> None:
            caller.append(trio.lowlevel.current_task())
            with scope:
                await session.execute("await new Promise(() => {})", yield_time_ms=1)
                raise AssertionError("the cancellation must win over the delivered cell")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(execute)
            assert (await host.receive_a(OperationRequest)).id == 2
            instrument = _CancelWhenRescheduled(caller[0], scope)
            trio.lowlevel.add_instrument(instrument)
            try:
                await host.start(2, "1")
                assert await host.receive() == OperationCancel(cm.protocol.RequestId(2))
            finally:
                trio.lowlevel.remove_instrument(instrument)
        assert scope.cancelled_caught
        assert await host.receive() == OperationRequest(
            cm.protocol.RequestId(3), TerminateRequest("session-1", "1")
        )
        await host.initial(2, terminated("1"))
        await host.wait_completed(3, terminated("1"))
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive
        assert recording.closed_cells == ["1"]
        assert conn.statistics().live_cells == 0


async def test_session_accepts_more_than_4096_cells_without_growing_a_tombstone_set(
    recording: RecordingDelegate,
) -> None:
    cell_count = 4097
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        for sequence in range(1, cell_count + 1):
            request_id = sequence + 1
            cell_id = str(sequence)
            cell = await start_cell(host, session, request_id, cell_id)
            await host.initial(request_id, yielded(cell_id))
            assert (await cell.initial_response()).kind == "yielded"
            await host.cell_closed("session-1", cell_id)
        await trio.testing.wait_all_tasks_blocked()
        assert len(recording.closed_cells) == cell_count
        assert conn.alive
        assert conn.statistics().live_cells == 0


async def test_connection_failure_closes_every_live_cell_once(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await host.close()  # the host crashed
        with trio.fail_after(1):
            await session.wait_cleaned_up()
        assert recording.closed_cells == ["1"]
        assert conn.failure == "code-mode host closed its stdout (0 delegate calls in flight)"


async def test_session_cleanup_does_not_wait_for_delegate_completion(held: HeldDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, held)
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "slow")
        assert await held.next_event() == "started"

        await host.close()  # the host crashed
        closure = {await held.next_event(), await held.next_event()}
        assert closure == {"cancelled", ("cell_closed", "1")}
        with trio.fail_after(1):
            await session.wait_cleaned_up()
        assert held.pending_event() is None

        held.release.set()
        assert await held.next_event() == "finished"
        assert held.pending_event() is None


async def test_aborting_driver_marks_connection_dead_and_closes_cells(
    recording: RecordingDelegate,
) -> None:
    # There is no driver task to abort: the machine holds the state and every task applies to
    # it directly. The nearest thing is one of the connection's tasks dying of a bug; the
    # outcome the seed asks for must be the same.
    client_stream, host_stream = trio.testing.memory_stream_pair()
    stream = FailingStream(client_stream, RuntimeError("connection task aborted"))
    host = FakeHost(host_stream)
    async with trio.open_nursery() as outer:
        await outer.start(host.run_reader)
        outer.start_soon(host.handshake)
        async with cm.open_connection(stream) as conn:
            session = await open_session(host, conn, recording)
            await start_cell(host, session, 2, "1")
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    with pytest.raises(cm.ConnectionFailed):
                        await session.wait("1", yield_time_ms=60_000)

                nursery.start_soon(wait)
                await host.receive_a(OperationRequest)
                stream.armed.set()
                await host.cancel_delegate(99)  # wakes the reader, whose next read fails
            assert not conn.alive
            assert conn.failure == (
                "code-mode connection task failed: RuntimeError('connection task aborted')"
            )
            await assert_connection_stopped(host)
            assert recording.closed_cells == ["1"]
        outer.cancel_scope.cancel()


async def test_dropped_shutdown_waiter_does_not_abort_remote_cleanup() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        with trio.CancelScope() as scope:
            scope.cancel()
            await session.aclose()  # cancelled at once: the shutdown must still go out
        request = await host.receive_a(OperationRequest)
        assert request == OperationRequest(cm.protocol.RequestId(2), ShutdownRequest("session-1"))
        await host.session_closed(2, "session-1")
        await trio.testing.wait_all_tasks_blocked()
        assert session.cleaned_up

        # The session is gone locally too (the exact driver-level refusal, "unknown code-mode
        # session session-1", is checked on the machine in test_client_protocol.py).
        assert conn.statistics().sessions == 0
        with pytest.raises(cm.SessionClosed, match="^code mode session is shutting down$"):
            await session.execute("text('unreachable')")
        await host.assert_quiet()
        assert conn.alive
