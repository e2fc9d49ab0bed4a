"""Cancellation at every await point of open, execute, wait and close, frame by frame.

A Trio caller cancels by leaving a cancel scope; the driver must turn that into exactly the
frames the reference client sends when a Rust caller drops its future (CLIENT §3.6), and
every protocol deadline must fail the connection at exactly its virtual time.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import (
    CellClosed,
    DelegateRequestId,
    DelegateResponse,
    ExecutionStarted,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationResponse,
    RequestId,
    SessionClosedResponse,
    SessionReady,
    ShutdownRequest,
    TerminateRequest,
    WaitRequest,
    WireError,
    WireOk,
    encode_host_frame,
)
from codemode_trio.testing import open_fake_connection

from .conftest import (
    RecordingDelegate,
    execute_then_cancel,
    open_session,
    start_cell,
    terminated,
    wait_then_cancel,
    yielded,
)


def yielded_text(cell_id: str, *texts: str) -> cm.RuntimeResponse:
    items = tuple(cm.TextItem(text) for text in texts)
    return cm.RuntimeResponse("yielded", cell_id, items, code_mode_host_duration_ns=0)


def result(cell_id: str, *texts: str) -> cm.RuntimeResponse:
    items = tuple(cm.TextItem(text) for text in texts)
    return cm.RuntimeResponse("result", cell_id, items, code_mode_host_duration_ns=0)


# --------------------------------------------------------------------------- open


async def test_open_cancelled_before_reaching_the_driver_sends_nothing() -> None:
    async with open_fake_connection() as (host, conn):
        with trio.CancelScope() as scope:
            scope.cancel()
            await conn.start_session(session_id="session-1")
        assert scope.cancelled_caught
        await host.assert_quiet()
        assert conn.statistics().pending_requests == 0
        # Neither the session id nor a request id was used up.
        await open_session(host, conn)
        assert host.log[-1] == OperationRequest(RequestId(1), OpenSessionRequest("session-1"))
        assert conn.alive


async def test_open_cancelled_awaiting_ready_sends_one_cancel_then_shuts_down() -> None:
    async with open_fake_connection() as (host, conn):
        with trio.CancelScope() as outer, trio.CancelScope() as inner:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(conn.start_session, session_id="session-1"))
                assert await host.receive() == OperationRequest(
                    RequestId(1), OpenSessionRequest("session-1")
                )
                inner.cancel()
                outer.cancel()  # cancelled twice: still one cancel frame
        assert await host.receive() == OperationCancel(RequestId(1))
        await host.assert_quiet()

        # The host commits the session anyway: the driver shuts it down on its own.
        await host.reply(1, SessionReady("session-1"))
        assert await host.receive() == OperationRequest(RequestId(2), ShutdownRequest("session-1"))
        await host.assert_quiet()
        # Until session/closed the id is still taken.
        with pytest.raises(cm.UsageError, match="^code-mode session session-1 is already open$"):
            await conn.start_session(session_id="session-1")
        await host.session_closed(2, "session-1")
        await host.assert_quiet()
        # Then it is free again, and ids go on from 3.
        await open_session(host, conn)
        assert host.log[-1] == OperationRequest(RequestId(3), OpenSessionRequest("session-1"))
        assert conn.alive


async def test_open_cancelled_then_refused_by_the_host_sends_no_shutdown() -> None:
    async with open_fake_connection() as (host, conn):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(conn.start_session, session_id="session-1"))
                assert (await host.receive_a(OperationRequest)).id == 1
                scope.cancel()
        assert await host.receive() == OperationCancel(RequestId(1))
        await host.reply_error(1, "code-mode request cancelled")
        await host.assert_quiet()
        assert conn.alive
        assert conn.statistics().sessions == 0
        await open_session(host, conn)
        assert host.log[-1] == OperationRequest(RequestId(2), OpenSessionRequest("session-1"))


async def test_open_answered_at_the_instant_of_cancellation_is_shut_down() -> None:
    async with open_fake_connection() as (host, conn):
        opened: list[cm.Session] = []
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def opener() -> None:
                    opened.append(await conn.start_session(session_id="session-1"))

                nursery.start_soon(opener)
                assert (await host.receive_a(OperationRequest)).id == 1
                await trio.testing.wait_all_tasks_blocked()
                # The cancellation is applied the instant it is requested, so the answer that
                # follows it finds the open already abandoned.
                scope.cancel()
        await host.reply(1, SessionReady("session-1"))
        assert scope.cancelled_caught
        assert opened == []  # nobody holds the session, so nobody would ever close it
        # The session committed on the host must be shut down, as for an abandoned open.
        with trio.fail_after(1):
            frame = await host.receive()
            if frame == OperationCancel(RequestId(1)):
                frame = await host.receive()
        assert frame == OperationRequest(RequestId(2), ShutdownRequest("session-1"))
        await host.session_closed(2, "session-1")
        await host.assert_quiet()
        assert conn.statistics().sessions == 0
        assert conn.alive


# --------------------------------------------------------------------------- execute


async def test_execute_cancelled_before_reaching_the_driver_sends_nothing(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        with trio.CancelScope() as scope:
            scope.cancel()
            await session.execute("text(1)")
        assert scope.cancelled_caught
        await host.assert_quiet()
        await start_cell(host, session, 2, "1")  # the next execute is request 2
        assert conn.alive


async def test_execute_cancelled_then_refused_by_the_host_sends_no_terminate(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await execute_then_cancel(host, session, 2)
        assert await host.receive() == OperationCancel(RequestId(2))
        await host.reply_error(2, "code-mode request cancelled")
        await host.assert_quiet()
        assert conn.alive
        stats = conn.statistics()
        assert stats.pending_requests == 0
        assert stats.live_cells == 0
        assert stats.pending_initial_responses == 0
        # No execute is pending any more, so a delegate call for an unknown cell is answered
        # at once instead of being parked for a cell that will never start.
        await host.invoke(7, "session-1", "1", "tool")
        assert await host.receive() == DelegateResponse(
            DelegateRequestId(7),
            WireError("code-mode host delegated for unknown cell 1 in session session-1"),
        )
        assert conn.statistics().parked_delegates == 0
        assert recording.invocations == 0
        assert recording.closed_cells == []


async def test_execute_cancelled_before_started_is_terminated_after_admission(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await execute_then_cancel(host, session, 2)
        # The cancel goes out before the host answers.
        assert await host.receive() == OperationCancel(RequestId(2))
        await host.assert_quiet()
        await host.start(2, "1")
        assert await host.receive() == OperationRequest(
            RequestId(3), TerminateRequest("session-1", "1")
        )
        await host.assert_quiet()
        assert conn.statistics().live_cells == 1
        # Terminate reply first, then the initial response, then cell/closed: all consumed.
        await host.wait_completed(3, terminated("1"))
        await host.initial(2, terminated("1"))
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive
        assert recording.closed_cells == ["1"]
        stats = conn.statistics()
        assert (stats.live_cells, stats.pending_requests, stats.pending_initial_responses) == (
            0,
            0,
            0,
        )


async def test_execute_started_at_the_instant_of_cancellation_is_terminated(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cells: list[cm.StartedCell] = []
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def execute() -> None:
                    cells.append(await session.execute("await new Promise(() => {})"))

                nursery.start_soon(execute)
                assert (await host.receive_a(OperationRequest)).id == 2
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        await host.start(2, "1")
        assert cells == []
        # Cancelled, then admitted anyway: cancel, then terminate the orphaned cell.
        assert await host.receive() == OperationCancel(RequestId(2))
        assert await host.receive() == OperationRequest(
            RequestId(3), TerminateRequest("session-1", "1")
        )
        await host.wait_completed(3, terminated("1"))
        await host.initial(2, terminated("1"))
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert recording.closed_cells == ["1"]
        assert conn.alive


async def test_abandoned_execute_in_a_closing_session_is_left_to_the_shutdown(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await execute_then_cancel(host, session, 2)
        assert await host.receive() == OperationCancel(RequestId(2))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.aclose)
            assert await host.receive() == OperationRequest(
                RequestId(3), ShutdownRequest("session-1")
            )
            # The abandoned cell is admitted while the session is closing: no terminate.
            await host.start(2, "1")
            await host.assert_quiet()
            await host.cell_closed("session-1", "1")
            await host.session_closed(3, "session-1")
        await host.initial(2, terminated("1"))  # still consumed harmlessly
        await host.assert_quiet()
        assert conn.alive
        assert recording.closed_cells == ["1"]


async def test_execute_cancelled_after_its_session_closed_unclaimed_keeps_the_connection() -> None:
    class CancelOnClose(RecordingDelegate):
        """Cancels the execute's caller from the cell_closed hook, before it claims the cell."""

        scope: trio.CancelScope | None = None

        def cell_closed(self, cell_id: str) -> None:
            super().cell_closed(cell_id)
            assert self.scope is not None
            self.scope.cancel()

    delegate = CancelOnClose()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        outcome: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def execute() -> None:
                with trio.CancelScope() as delegate.scope:
                    try:
                        await session.execute("await new Promise(() => {})")
                    except BaseException as exc:
                        outcome.append(exc)
                        raise

            nursery.start_soon(execute)
            assert (await host.receive_a(OperationRequest)).id == 2
            nursery.start_soon(session.aclose)
            assert await host.receive() == OperationRequest(
                RequestId(3), ShutdownRequest("session-1")
            )
            # One read: the cell starts, closes, and its session closes before the caller runs.
            await host.send_bytes(
                encode_host_frame(OperationResponse(RequestId(2), WireOk(ExecutionStarted("1"))))
                + encode_host_frame(CellClosed("session-1", "1"))
                + encode_host_frame(
                    OperationResponse(RequestId(3), WireOk(SessionClosedResponse("session-1")))
                )
            )
        assert [type(exc) for exc in outcome] == [trio.Cancelled]
        await host.assert_quiet()  # the session is gone: nothing to cancel or terminate
        assert conn.alive, conn.failure
        assert delegate.closed_cells == ["1"]


async def test_cancelled_terminate_sends_no_cancel_and_drops_the_result(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.terminate, "1")
                assert await host.receive() == OperationRequest(
                    RequestId(3), TerminateRequest("session-1", "1")
                )
                scope.cancel()
        await host.assert_quiet()  # terminate is not cancellable on the wire
        await host.wait_completed(3, terminated("1"))
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive
        assert recording.closed_cells == ["1"]


# --------------------------------------------------------------------------- wait


async def test_wait_cancelled_before_reaching_the_driver_sends_nothing(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        with trio.CancelScope() as scope:
            scope.cancel()
            await session.wait("1")
        await host.assert_quiet()
        # Nothing is held back either: the next wait goes straight out as request 3.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(session.wait, "1", yield_time_ms=1))
            assert await host.receive() == OperationRequest(
                RequestId(3), WaitRequest("session-1", "1", 1)
            )
            await host.wait_completed(3, yielded("1"))


async def test_wait_cancelled_twice_sends_exactly_one_cancel(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        with trio.CancelScope() as outer, trio.CancelScope() as inner:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(session.wait, "1", yield_time_ms=60_000))
                assert (await host.receive_a(OperationRequest)).id == 3
                inner.cancel()
                await trio.testing.wait_all_tasks_blocked()
                outer.cancel()
        assert await host.receive() == OperationCancel(RequestId(3))
        await host.assert_quiet()
        await host.reply_error(3, "code-mode request cancelled")
        await host.assert_quiet()
        assert conn.alive
        assert conn.statistics().pending_requests == 0


async def test_late_wait_result_after_cancel_is_dropped_and_the_next_wait_follows_it(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        outcomes: list[cm.WaitOutcome] = []
        async with trio.open_nursery() as nursery:
            first = trio.CancelScope()

            async def first_wait() -> None:
                with first:
                    outcomes.append(await session.wait("1", yield_time_ms=60_000))

            async def second_wait() -> None:
                outcomes.append(await session.wait("1", yield_time_ms=5))

            nursery.start_soon(first_wait)
            assert (await host.receive_a(OperationRequest)).id == 3
            first.cancel()
            assert await host.receive() == OperationCancel(RequestId(3))
            nursery.start_soon(second_wait)
            await host.assert_quiet()  # held back behind the cancelled wait
            assert conn.statistics().deferred_waits == 1

            # The host answers the cancelled wait with a result after all: it is dropped, and
            # only now does the next wait go out.
            await host.wait_completed(3, yielded_text("1", "late"))
            assert await host.receive() == OperationRequest(
                RequestId(4), WaitRequest("session-1", "1", 5)
            )
            await host.assert_quiet()
            await host.wait_completed(4, result("1", "b"))
        assert outcomes == [cm.WaitOutcome(True, result("1", "b"))]
        assert conn.alive


async def test_deferred_wait_cancelled_while_held_is_never_sent(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await wait_then_cancel(host, session, "1", 3)
        assert await host.receive() == OperationCancel(RequestId(3))

        held = trio.CancelScope()
        async with trio.open_nursery() as nursery:

            async def deferred() -> None:
                with held:
                    await session.wait("1", yield_time_ms=5)

            nursery.start_soon(deferred)
            await host.assert_quiet()
            held.cancel()
        assert held.cancelled_caught
        await host.assert_quiet()  # a held wait has no request id: nothing to cancel

        await host.reply_error(3, "code-mode request cancelled")
        await host.assert_quiet()  # the abandoned held wait is dropped, not sent
        stats = conn.statistics()
        assert (stats.pending_requests, stats.deferred_waits) == (0, 0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(session.wait, "1", yield_time_ms=1))
            assert await host.receive() == OperationRequest(
                RequestId(4), WaitRequest("session-1", "1", 1)
            )
            await host.wait_completed(4, yielded("1"))
        assert conn.alive


async def test_terminate_is_not_held_back_by_a_cancelled_wait(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await wait_then_cancel(host, session, "1", 3)
        assert await host.receive() == OperationCancel(RequestId(3))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.terminate, "1")
            assert await host.receive() == OperationRequest(
                RequestId(4), TerminateRequest("session-1", "1")
            )
            await host.wait_completed(4, terminated("1"))
            await host.reply_error(3, "code-mode request cancelled")
        await host.assert_quiet()
        assert conn.alive


async def test_connection_failure_fails_a_held_back_wait(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await wait_then_cancel(host, session, "1", 3)
        assert await host.receive() == OperationCancel(RequestId(3))
        async with trio.open_nursery() as nursery:

            async def held_wait() -> None:
                with pytest.raises(cm.ConnectionFailed) as info:
                    await session.wait("1", yield_time_ms=5)
                assert info.value.reason.startswith("code-mode host closed its stdout")

            nursery.start_soon(held_wait)
            await host.assert_quiet()
            assert conn.statistics().deferred_waits == 1
            await host.close()
        assert conn.statistics().deferred_waits == 0


# --------------------------------------------------------------------------- initial response


async def test_cancelled_initial_response_is_not_lost(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cell = await start_cell(host, session, 2, "1")
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cell.initial_response)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        await host.assert_quiet()  # an initial response is not a request: nothing to cancel

        await host.initial(2, yielded_text("1", "first"))
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(1):
            assert await cell.initial_response() == yielded_text("1", "first")
            # And again: the value is kept.
            assert await cell.initial_response() == yielded_text("1", "first")
        await host.assert_quiet()
        assert conn.alive


async def test_initial_response_error_is_kept_for_every_await(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cell = await start_cell(host, session, 2, "1")
        await host.send(cm.protocol.InitialResponse(RequestId(2), WireError("exec runtime failed")))
        for _ in range(2):
            with pytest.raises(cm.HostError, match="^exec runtime failed$"):
                await cell.initial_response()
        assert conn.alive


# --------------------------------------------------------------------------- deadlines


async def test_initial_response_deadline_fails_the_connection(
    autojump_clock: trio.testing.MockClock, recording: RecordingDelegate
) -> None:
    reason = "code-mode host timed out waiting for initial response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cell = await start_cell(host, session, 2, "1")  # yield_time_ms=1
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
            await cell.initial_response()
        # yield_time_ms + 1 s grace + 60 s transport allowance.
        assert trio.current_time() - start == pytest.approx(61.001)
        assert conn.failure == reason
        with trio.fail_after(1):
            await session.wait_cleaned_up()
        assert recording.closed_cells == ["1"]


async def test_initial_response_deadline_uses_the_default_yield_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reason = "code-mode host timed out waiting for initial response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.start, 2, "1")
            cell = await session.execute("await new Promise(() => {})")
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
            await cell.initial_response()
        assert trio.current_time() - start == pytest.approx(10 + 1 + 60)
        assert conn.failure == reason


async def test_execute_deadline_fails_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reason = "code-mode host timed out waiting for execute response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
            await session.execute("text(1)")
        assert trio.current_time() - start == pytest.approx(60.0)
        assert (await host.receive_a(OperationRequest)).id == 2
        await host.assert_quiet()  # no operation/cancel after the connection failed
        assert conn.failure == reason


async def test_open_deadline_fails_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reason = "code-mode host timed out waiting for open-session response"
    async with open_fake_connection() as (host, conn):
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
            await conn.start_session(session_id="session-1")
        assert trio.current_time() - start == pytest.approx(60.0)
        assert (await host.receive_a(OperationRequest)).id == 1
        await host.assert_quiet()
        assert conn.failure == reason


async def test_shutdown_deadline_fails_the_connection(
    autojump_clock: trio.testing.MockClock, recording: RecordingDelegate
) -> None:
    reason = "code-mode host timed out waiting for shutdown response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        start = trio.current_time()
        with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
            await session.aclose()
        assert trio.current_time() - start == pytest.approx(60.0)
        assert await host.receive() == OperationRequest(RequestId(3), ShutdownRequest("session-1"))
        assert conn.failure == reason
        with trio.fail_after(1):
            await session.wait_cleaned_up()
        assert recording.closed_cells == ["1"]


# --------------------------------------------------------------------------- aclose


async def test_aclose_is_idempotent_and_sends_one_shutdown_even_when_cancelled() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        with trio.CancelScope() as scope:
            scope.cancel()
            await session.aclose()
        assert scope.cancelled_caught
        assert await host.receive() == OperationRequest(RequestId(2), ShutdownRequest("session-1"))
        await host.assert_quiet()

        closed: list[str] = []
        async with trio.open_nursery() as nursery:

            async def close_again(name: str) -> None:
                await session.aclose()  # waits for the first shutdown to finish
                closed.append(name)

            nursery.start_soon(close_again, "a")
            nursery.start_soon(close_again, "b")
            await host.assert_quiet()
            assert closed == []
            await host.session_closed(2, "session-1")
        assert sorted(closed) == ["a", "b"]

        await session.aclose()
        async with session:
            pass
        await host.assert_quiet()
        assert session.cleaned_up
        # The session layer's wording (CLIENT §4: no hyphen, unlike the driver's reply).
        with pytest.raises(cm.SessionClosed, match="^code mode session is shutting down$"):
            await session.execute("text(1)")
        assert conn.alive


async def test_concurrent_aclose_sends_one_shutdown() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.aclose)
            nursery.start_soon(session.aclose)
            assert await host.receive() == OperationRequest(
                RequestId(2), ShutdownRequest("session-1")
            )
            await host.assert_quiet()
            await host.session_closed(2, "session-1")
        await host.assert_quiet()
        assert conn.alive


async def test_concurrent_aclose_callers_share_the_shutdown_result() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        errors: list[str] = []

        async def close() -> None:
            with pytest.raises(cm.CodeModeError) as info:
                await session.aclose()
            errors.append(str(info.value))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close)
            nursery.start_soon(close)
            assert await host.receive() == OperationRequest(
                RequestId(2), ShutdownRequest("session-1")
            )
            await host.assert_quiet()
            await host.reply_error(2, "shutdown went wrong")
        assert errors == ["shutdown went wrong", "shutdown went wrong"]
        assert conn.failure == "shutdown went wrong"
