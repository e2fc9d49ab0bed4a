"""The client rules of docs/protocol/client.md, one behaviour per test, over a FakeHost.

The seed suite (``test_driver_seed.py``) covers the reference driver tests; these cover the
remaining rules: the handshake, fatal host mistakes with their exact texts, request-id
allocation, capability gating, the outgoing queue, delegate replies, failure propagation,
exception shapes, the ToolRegistry and ``Session.run``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Optional

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.client.connection import open_connection
from codemode_trio.protocol import (
    ALL_CAPABILITIES,
    CellClosed,
    CellLimits,
    ConnectionHello,
    ConnectionReady,
    ConnectionRejected,
    DelegateRequestId,
    DelegateResponse,
    ExecuteRequest,
    ExecutionStarted,
    InvalidHello,
    MissingRequiredCapability,
    NoCompatibleVersion,
    NotificationDelivered,
    OpenSessionRequest,
    OperationCancel,
    OperationRequest,
    OperationYield,
    RequestId,
    SessionClosedResponse,
    SessionReady,
    ShutdownRequest,
    TerminateRequest,
    ToolResult,
    WaitCompleted,
    WaitRequest,
    WireError,
    WireOk,
)
from codemode_trio.protocol.handshake import (
    BOUNDED_OUTPUT,
    SESSION_LIMITS,
    TOOL_CATALOG_REVISION,
    YIELD_OBSERVATION,
)
from codemode_trio.testing import FakeHost, open_fake_connection

from .conftest import RecordingDelegate, open_session, start_cell, terminated, yielded

LIMITS_UNSUPPORTED = (
    "code-mode host does not support session resource limits: "
    "missing `session-cell-execution-resource-limits` capability"
)


def result(cell_id: str, *texts: str) -> cm.RuntimeResponse:
    items = tuple(cm.TextItem(text) for text in texts)
    return cm.RuntimeResponse("result", cell_id, items, code_mode_host_duration_ns=0)


def yielded_text(cell_id: str, *texts: str) -> cm.RuntimeResponse:
    items = tuple(cm.TextItem(text) for text in texts)
    return cm.RuntimeResponse("yielded", cell_id, items, code_mode_host_duration_ns=0)


@asynccontextmanager
async def raw_host() -> AsyncIterator[tuple[FakeHost, trio.abc.Stream, trio.Nursery]]:
    """A FakeHost whose handshake the test drives, and the client's end of the stream."""
    client_stream, host_stream = trio.testing.memory_stream_pair()
    host = FakeHost(host_stream)
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run_reader)
        yield host, client_stream, nursery
        nursery.cancel_scope.cancel()


async def expect_failure(conn: cm.Connection, reason: str) -> None:
    with trio.fail_after(1):
        assert await conn.wait_failed() == reason
    assert not conn.alive
    assert conn.failure == reason


# --------------------------------------------------------------------------- handshake


async def test_hello_offers_every_capability_optionally_and_requires_none() -> None:
    async with open_fake_connection() as (host, conn):
        hello = host.log[0]
        assert hello == ConnectionHello((1,), (), ALL_CAPABILITIES)
        assert hello.to_wire() == {
            "type": "connection/hello",
            "supportedVersions": [1],
            "requiredCapabilities": [],
            "optionalCapabilities": list(ALL_CAPABILITIES),
        }
        assert conn.capabilities == frozenset(ALL_CAPABILITIES)
        assert conn.protocol_version == 1


async def test_handshake_keeps_only_the_granted_capabilities() -> None:
    async with open_fake_connection(capabilities=[SESSION_LIMITS]) as (_host, conn):
        assert conn.capabilities == frozenset({SESSION_LIMITS})


@pytest.mark.parametrize(
    "reason",
    [
        NoCompatibleVersion((2,)),
        MissingRequiredCapability("x-required"),
        InvalidHello("identifier must not be empty"),
    ],
)
async def test_handshake_rejection_raises_handshake_rejected(reason: Any) -> None:
    async with raw_host() as (host, stream, nursery):

        async def host_side() -> None:
            await host.receive_a(ConnectionHello)
            await host.send(ConnectionRejected(reason))

        nursery.start_soon(host_side)
        with pytest.raises(cm.HandshakeRejected) as info:
            async with open_connection(stream):
                pytest.fail("the handshake must not succeed")  # pragma: no cover
        assert str(info.value).startswith("code-mode host rejected the handshake: ")
        assert info.value.reason == reason
        assert not isinstance(info.value, BaseExceptionGroup)


@pytest.mark.parametrize(
    "answer",
    [
        ConnectionReady(2, ()),
        CellClosed("session-1", "1"),
        cm.protocol.OperationResponse(RequestId(1), WireOk(SessionReady("session-1"))),
    ],
)
async def test_handshake_other_first_message_is_an_invalid_response(answer: Any) -> None:
    async with raw_host() as (host, stream, nursery):

        async def host_side() -> None:
            await host.receive_a(ConnectionHello)
            await host.send(answer)

        nursery.start_soon(host_side)
        with pytest.raises(cm.HandshakeError) as info:
            async with open_connection(stream):
                pytest.fail("the handshake must not succeed")  # pragma: no cover
        assert str(info.value).startswith("code-mode host returned an invalid handshake response")
        assert not isinstance(info.value, cm.HandshakeRejected)


async def test_handshake_eof_is_exited_during_handshake() -> None:
    async with raw_host() as (host, stream, nursery):

        async def host_side() -> None:
            await host.receive_a(ConnectionHello)
            await host.close()

        nursery.start_soon(host_side)
        with pytest.raises(cm.ConnectionFailed, match="^code-mode host exited during handshake$"):
            async with open_connection(stream):
                pytest.fail("the handshake must not succeed")  # pragma: no cover


async def test_handshake_times_out_after_thirty_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with raw_host() as (host, stream, _nursery):
        start = trio.current_time()
        with pytest.raises(
            cm.ConnectionFailed, match="^timed out negotiating with the code-mode host$"
        ):
            async with open_connection(stream):
                pytest.fail("the handshake must not succeed")  # pragma: no cover
        assert trio.current_time() - start == pytest.approx(30.0)
        assert isinstance(await host.receive(), ConnectionHello)


@pytest.mark.parametrize(
    "message", [ConnectionReady(1, ()), ConnectionRejected(InvalidHello("again"))]
)
async def test_second_handshake_response_fails_the_connection(message: Any) -> None:
    async with open_fake_connection() as (host, conn):
        await host.send(message)
        await expect_failure(conn, "code-mode host sent a second handshake response")


async def test_second_handshake_response_in_the_same_read_as_ready_fails() -> None:
    async with raw_host() as (host, stream, nursery):

        async def host_side() -> None:
            await host.receive_a(ConnectionHello)
            ready = cm.protocol.encode_host_frame(ConnectionReady(1, ()))
            await host.send_bytes(ready + ready)  # one write: the client reads both at once

        nursery.start_soon(host_side)
        async with open_connection(stream) as conn:
            await expect_failure(conn, "code-mode host sent a second handshake response")


# --------------------------------------------------------------------------- fatal host mistakes


async def test_response_for_unknown_request_id_fails_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        await host.reply(99, SessionReady("session-1"))
        await expect_failure(conn, "code-mode host returned unknown request ID RequestId(99)")


async def test_initial_response_for_unknown_request_id_fails_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        await open_session(host, conn)
        await host.initial(5, yielded("1"))
        await expect_failure(
            conn, "code-mode host returned initial response for unknown request ID RequestId(5)"
        )


async def test_initial_response_before_execution_started_fails_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        async with trio.open_nursery() as nursery:

            async def execute() -> None:
                with pytest.raises(cm.ConnectionFailed, match=r"RequestId\(2\)$"):
                    await session.execute("text('early')")

            nursery.start_soon(execute)
            assert (await host.receive_a(OperationRequest)).id == 2
            await host.initial(2, yielded("1"))
        await expect_failure(
            conn, "code-mode host returned initial response for unknown request ID RequestId(2)"
        )


async def test_execution_started_reusing_a_live_cell_fails_the_connection(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        reason = "code-mode host reused live cell 1 in session session-1"
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                assert (await host.receive_a(OperationRequest)).id == 3
                await host.start(3, "1")

            nursery.start_soon(host_side)
            with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
                await session.execute("text('again')")
        await expect_failure(conn, reason)
        assert recording.closed_cells == ["1"]


async def test_shutdown_answered_with_an_error_fails_the_caller_and_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                request = await host.receive_a(OperationRequest)
                assert request == OperationRequest(RequestId(2), ShutdownRequest("session-1"))
                await host.reply_error(2, "shutdown went wrong")

            nursery.start_soon(host_side)
            with pytest.raises(cm.CodeModeError, match="^shutdown went wrong$"):
                await session.aclose()
        await expect_failure(conn, "shutdown went wrong")


async def test_open_answered_with_an_error_fails_only_the_caller() -> None:
    async with open_fake_connection() as (host, conn):
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                assert (await host.receive_a(OperationRequest)).id == 1
                await host.reply_error(1, "no more sessions")

            nursery.start_soon(host_side)
            with pytest.raises(cm.HostError, match="^no more sessions$"):
                await conn.start_session(session_id="session-1")
        assert conn.alive
        # The id is free again: a second open of it is sent (as request 2).
        await open_session(host, conn)
        assert host.log[-1] == OperationRequest(RequestId(2), OpenSessionRequest("session-1"))
        assert conn.alive


@pytest.mark.parametrize(
    "value",
    [ExecutionStarted("1"), SessionReady("session-2"), SessionClosedResponse("session-1")],
)
async def test_invalid_open_session_response_fails_the_connection(value: Any) -> None:
    reason = "code-mode host returned an invalid open-session response"
    async with open_fake_connection() as (host, conn):
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                assert (await host.receive_a(OperationRequest)).id == 1
                await host.reply(1, value)

            nursery.start_soon(host_side)
            with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
                await conn.start_session(session_id="session-1")
        await expect_failure(conn, reason)


@pytest.mark.parametrize(
    "value",
    [SessionReady("session-1"), WaitCompleted(cm.WaitOutcome(True, yielded("1")))],
)
async def test_invalid_execute_response_fails_the_connection(value: Any) -> None:
    reason = "code-mode host returned an invalid execute response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                assert (await host.receive_a(OperationRequest)).id == 2
                await host.reply(2, value)

            nursery.start_soon(host_side)
            with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
                await session.execute("text('x')")
        await expect_failure(conn, reason)


@pytest.mark.parametrize("operation", ["wait", "terminate"])
@pytest.mark.parametrize("value", [SessionReady("session-1"), ExecutionStarted("1")])
async def test_invalid_cell_response_fails_the_connection(operation: str, value: Any) -> None:
    reason = "code-mode host returned an invalid cell response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, RecordingDelegate())
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                assert (await host.receive_a(OperationRequest)).id == 3
                await host.reply(3, value)

            nursery.start_soon(host_side)
            call = (
                partial(session.wait, "1", yield_time_ms=1)
                if operation == "wait"
                else partial(session.terminate, "1")
            )
            with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
                await call()
        await expect_failure(conn, reason)


@pytest.mark.parametrize(
    "value",
    [
        SessionReady("session-1"),
        SessionClosedResponse("session-2"),
        WaitCompleted(cm.WaitOutcome(False, terminated("1"))),
    ],
)
async def test_invalid_shutdown_response_fails_the_connection(value: Any) -> None:
    reason = "code-mode host returned an invalid shutdown response"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        async with trio.open_nursery() as nursery:

            async def host_side() -> None:
                assert (await host.receive_a(OperationRequest)).id == 2
                await host.reply(2, value)

            nursery.start_soon(host_side)
            with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
                await session.aclose()
        await expect_failure(conn, reason)


async def test_cell_closed_for_unknown_session_fails_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        await open_session(host, conn)
        await host.cell_closed("session-9", "X")
        await expect_failure(conn, "code-mode host closed cell X in unknown session session-9")


async def test_cell_closed_for_unknown_cell_fails_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        await open_session(host, conn)
        await host.cell_closed("session-1", "never-started")
        await expect_failure(conn, "code-mode host closed unknown cell in session session-1")


async def test_duplicate_cell_closed_fails_the_connection(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive
        await host.cell_closed("session-1", "1")
        await expect_failure(conn, "code-mode host closed unknown cell in session session-1")
        assert recording.closed_cells == ["1"]


async def test_cell_closed_after_session_closed_names_an_unknown_session(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.aclose)
            assert (await host.receive_a(OperationRequest)).id == 3
            await host.session_closed(3, "session-1")
        assert recording.closed_cells == ["1"]
        await host.cell_closed("session-1", "1")
        await expect_failure(conn, "code-mode host closed cell 1 in unknown session session-1")
        assert recording.closed_cells == ["1"]


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (b"not json", "failed to decode code-mode IPC frame: "),
        (b'{"type":"bogus"}', "failed to decode code-mode IPC frame: unknown variant `bogus`"),
    ],
)
async def test_undecodable_host_frame_fails_the_connection(payload: bytes, detail: str) -> None:
    async with open_fake_connection() as (host, conn):
        await host.send_payload(payload)
        with trio.fail_after(1):
            reason = await conn.wait_failed()
        assert reason.startswith(f"failed to read code-mode host message: {detail}")


async def test_oversize_frame_header_fails_the_connection_at_once() -> None:
    async with open_fake_connection() as (host, conn):
        await host.send_bytes((64 * 1024 * 1024 + 1).to_bytes(4, "little"))
        await expect_failure(
            conn,
            "failed to read code-mode host message: "
            "code-mode IPC frame length 67108865 exceeds 67108864 bytes",
        )


async def test_eof_inside_a_frame_fails_the_connection() -> None:
    async with open_fake_connection() as (host, conn):
        await host.send_bytes((10).to_bytes(4, "little") + b"abc")
        await host.close()
        with trio.fail_after(1):
            reason = await conn.wait_failed()
        assert "early eof" in reason


# --------------------------------------------------------------------------- request ids


async def test_request_ids_increase_across_sessions_and_internal_requests(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        first = await open_session(host, conn, recording, "session-1")
        assert host.log[-1] == OperationRequest(RequestId(1), OpenSessionRequest("session-1"))
        second = await open_session(host, conn, recording, "session-2")
        assert host.log[-1] == OperationRequest(RequestId(2), OpenSessionRequest("session-2"))
        await start_cell(host, second, 3, "1")
        await start_cell(host, first, 4, "1")

        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                outcome = await second.wait("1", yield_time_ms=1)
                assert outcome == cm.WaitOutcome(True, yielded("1"))

            nursery.start_soon(wait)
            request = await host.receive_a(OperationRequest)
            assert request == OperationRequest(RequestId(5), WaitRequest("session-2", "1", 1))
            await host.wait_completed(5, yielded("1"))

        # An execute abandoned before execution/started: cancel 6, internal terminate 7.
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.execute, "await new Promise(() => {})")
                assert (await host.receive_a(OperationRequest)).id == 6
                scope.cancel()
        assert await host.receive() == OperationCancel(RequestId(6))
        await host.start(6, "2")
        assert await host.receive() == OperationRequest(
            RequestId(7), TerminateRequest("session-1", "2")
        )

        # An open abandoned before session/ready: cancel 8, internal shutdown 9.
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(partial(conn.start_session, session_id="session-3"))
                assert await host.receive() == OperationRequest(
                    RequestId(8), OpenSessionRequest("session-3")
                )
                scope.cancel()
        assert await host.receive() == OperationCancel(RequestId(8))
        await host.reply(8, SessionReady("session-3"))
        assert await host.receive() == OperationRequest(RequestId(9), ShutdownRequest("session-3"))

        # A caller's shutdown, then another session's terminate.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.aclose)
            assert await host.receive() == OperationRequest(
                RequestId(10), ShutdownRequest("session-1")
            )
            nursery.start_soon(second.terminate, "1")
            assert await host.receive() == OperationRequest(
                RequestId(11), TerminateRequest("session-2", "1")
            )
            await host.wait_completed(11, terminated("1"))
            await host.session_closed(10, "session-1")
        await host.assert_quiet()
        assert conn.alive


async def test_duplicate_open_is_a_usage_error_and_sends_nothing() -> None:
    async with open_fake_connection() as (host, conn):
        await open_session(host, conn)
        with pytest.raises(cm.UsageError, match="^code-mode session session-1 is already open$"):
            await conn.start_session(session_id="session-1")
        await host.assert_quiet()
        assert conn.alive
        # No request id was consumed by the refused open.
        await open_session(host, conn, session_id="session-2")
        assert host.log[-1] == OperationRequest(RequestId(2), OpenSessionRequest("session-2"))


async def test_open_of_a_session_whose_open_is_pending_is_a_usage_error() -> None:
    async with open_fake_connection() as (host, conn):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(conn.start_session, session_id="session-1"))
            assert (await host.receive_a(OperationRequest)).id == 1
            with pytest.raises(
                cm.UsageError, match="^code-mode session session-1 is already open$"
            ):
                await conn.start_session(session_id="session-1")
            await host.assert_quiet()
            await host.reply(1, SessionReady("session-1"))
        assert conn.alive


async def test_automatic_session_ids_skip_ids_chosen_explicitly() -> None:
    async with open_fake_connection() as (host, conn):
        await open_session(host, conn, session_id="session-1")
        with trio.fail_after(1):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.answer_open)
                session = await conn.start_session()
        assert session.session_id != "session-1"
        assert host.log[-1] == OperationRequest(
            RequestId(2), OpenSessionRequest(session.session_id)
        )
        assert conn.alive


# --------------------------------------------------------------------------- capability gating


async def test_limits_without_the_capability_are_refused_locally() -> None:
    async with open_fake_connection(capabilities=[]) as (host, conn):
        with pytest.raises(cm.UsageError) as info:
            await conn.start_session(limits=CellLimits(max_yield_time_ms=250))
        assert str(info.value) == LIMITS_UNSUPPORTED
        with pytest.raises(cm.UsageError, match="session resource limits"):
            async with conn.open_session(limits=CellLimits(max_heap_size_bytes=1 << 24)):
                pytest.fail("must not open")  # pragma: no cover
        await host.assert_quiet()
        assert conn.alive
        # The connection is still usable, and no request id was used.
        await open_session(host, conn)
        assert host.log[-1] == OperationRequest(RequestId(1), OpenSessionRequest("session-1"))


async def test_default_limits_need_no_capability_and_are_not_sent() -> None:
    async with open_fake_connection(capabilities=[]) as (host, conn):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.answer_open)
            await conn.start_session(limits=CellLimits(), session_id="session-1")
        request = host.log[-1]
        assert isinstance(request, OperationRequest)
        assert request.request.to_wire() == {"method": "session/open", "sessionId": "session-1"}


async def test_extension_fields_without_their_capabilities_are_refused_locally(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection(capabilities=[]) as (host, conn):
        with pytest.raises(cm.UsageError, match=f"missing `{BOUNDED_OUTPUT}` capability$"):
            await conn.start_session(output_truncation="server")
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        with pytest.raises(cm.UsageError, match=f"missing `{YIELD_OBSERVATION}` capability$"):
            session.request_yield("1")
        with pytest.raises(cm.UsageError, match=f"missing `{BOUNDED_OUTPUT}` capability$"):
            await session.wait("1", max_output_tokens=100)
        with pytest.raises(cm.UsageError, match=f"missing `{BOUNDED_OUTPUT}` capability$"):
            await session.terminate("1", max_output_tokens=100)
        with pytest.raises(cm.UsageError, match=f"missing `{TOOL_CATALOG_REVISION}` capability$"):
            await session.execute("text(1)", catalog_revision=3)
        await host.assert_quiet()
        assert conn.alive
        # Still usable: the next request is id 3.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.terminate, "1")
            assert await host.receive() == OperationRequest(
                RequestId(3), TerminateRequest("session-1", "1")
            )
            await host.wait_completed(3, terminated("1"))


async def test_limits_and_output_truncation_with_capabilities_are_on_the_wire() -> None:
    async with open_fake_connection() as (host, conn):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.answer_open)
            await conn.start_session(
                limits=CellLimits(max_yield_time_ms=250),
                output_truncation="server",
                session_id="session-1",
            )
        request = host.log[-1]
        assert isinstance(request, OperationRequest)
        assert request.to_wire() == {
            "type": "operation/request",
            "id": 1,
            "request": {
                "method": "session/open",
                "sessionId": "session-1",
                "cellExecutionLimits": {"maxYieldTimeMs": 250},
                "outputTruncation": "server",
            },
        }


async def test_request_yield_targets_the_in_flight_wait(recording: RecordingDelegate) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cell = await start_cell(host, session, 2, "1")
        await host.initial(2, yielded("1"))
        assert await cell.initial_response() == yielded("1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.wait, "1")
            assert (await host.receive_a(OperationRequest)).id == 3
            session.request_yield("1")
            message = await host.receive()
            assert message == OperationYield(RequestId(3))
            assert message.to_wire() == {"type": "operation/yield", "id": 3}
            await host.wait_completed(3, yielded("1"))
        # No observation in flight: nothing is sent.
        session.request_yield("1")
        await host.assert_quiet()
        assert conn.alive


async def test_request_yield_targets_the_pending_initial_response(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        session.request_yield("1")
        assert await host.receive() == OperationYield(RequestId(2))
        await host.assert_quiet()


async def test_bounded_output_and_catalog_revision_with_capabilities_are_on_the_wire(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(session.execute, "text(1)", tool_call_id="call-1", catalog_revision=3)
            )
            execute = await host.receive_a(OperationRequest)
            assert execute.to_wire()["request"] == {
                "method": "session/execute",
                "sessionId": "session-1",
                "request": {
                    "catalog_revision": 3,
                    "tool_call_id": "call-1",
                    "enabled_tools": [],
                    "source": "text(1)",
                    "yield_time_ms": None,
                    "max_output_tokens": None,
                },
            }
            await host.start(2, "1")

            nursery.start_soon(partial(session.wait, "1", yield_time_ms=5, max_output_tokens=100))
            wait = await host.receive_a(OperationRequest)
            assert wait.to_wire()["request"] == {
                "method": "session/wait",
                "sessionId": "session-1",
                "request": {"cell_id": "1", "yield_time_ms": 5},
                "maxOutputTokens": 100,
            }
            await host.wait_completed(3, yielded("1"))

            nursery.start_soon(partial(session.terminate, "1", max_output_tokens=7))
            terminate = await host.receive_a(OperationRequest)
            assert terminate.to_wire()["request"] == {
                "method": "session/terminate",
                "sessionId": "session-1",
                "cellId": "1",
                "maxOutputTokens": 7,
            }
            await host.wait_completed(4, terminated("1"))
        assert conn.alive


async def test_oversize_execute_request_is_refused_without_sending(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        with pytest.raises(cm.CodeModeError) as info:
            await session.execute("x" * (64 * 1024 * 1024))
        assert str(info.value).startswith(
            "code-mode execute request exceeds the IPC frame limit: code-mode IPC frame length "
        )
        assert str(info.value).endswith(" exceeds 67108864 bytes")
        assert not isinstance(info.value, cm.ConnectionFailed)
        await host.assert_quiet()
        assert conn.alive
        # Still usable. (Whether the refused request used up an id does not matter: ids only
        # have to increase.)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.execute, "text(1)")
            request = await host.receive_a(OperationRequest)
            assert isinstance(request.request, ExecuteRequest)
            await host.start(request.id, "1")


async def test_max_output_tokens_beyond_i32_is_refused_without_sending() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        with pytest.raises(cm.UsageError, match="^failed to encode code-mode execute request: "):
            await session.execute("text(1)", max_output_tokens=2**31)
        await host.assert_quiet()
        assert conn.alive


@pytest.mark.parametrize(
    "limits",
    [CellLimits(max_heap_size_bytes=2**64), CellLimits(max_yield_time_ms=-1)],
)
async def test_limits_that_do_not_fit_the_wire_are_refused_without_sending(
    limits: CellLimits,
) -> None:
    async with open_fake_connection() as (host, conn):
        with trio.fail_after(1), pytest.raises(cm.CodeModeError) as info:
            await conn.start_session(limits=limits, session_id="session-1")
        assert str(info.value).startswith("failed to encode code-mode session execution limits: ")
        await host.assert_quiet()
        assert conn.alive
        await open_session(host, conn)


@pytest.mark.parametrize("yield_time_ms", [-1, 2**64])
async def test_yield_times_that_do_not_fit_u64_are_refused_without_sending(
    yield_time_ms: int, recording: RecordingDelegate
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        with trio.fail_after(1), pytest.raises(cm.UsageError):
            await session.execute("text(1)", yield_time_ms=yield_time_ms)
        await host.assert_quiet()
        await start_cell(host, session, 2, "1")
        with trio.fail_after(1), pytest.raises(cm.UsageError):
            await session.wait("1", yield_time_ms=yield_time_ms)
        await host.assert_quiet()
        assert conn.alive


async def test_extension_values_that_do_not_fit_u64_are_refused_without_sending(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        with trio.fail_after(1), pytest.raises(cm.UsageError):
            await session.execute("text(1)", catalog_revision=-1)
        await host.assert_quiet()
        await start_cell(host, session, 2, "1")
        with trio.fail_after(1), pytest.raises(cm.UsageError):
            await session.wait("1", yield_time_ms=1, max_output_tokens=-1)
        with trio.fail_after(1), pytest.raises(cm.UsageError):
            await session.terminate("1", max_output_tokens=-1)
        await host.assert_quiet()
        assert conn.alive


# --------------------------------------------------------------------------- outgoing queue


class StallingStream(trio.abc.Stream):
    """A stream whose writes block forever once ``stalled`` is set (a host that stopped reading)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.stalled = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.stalled:
            await trio.sleep_forever()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_full_outgoing_queue_fails_the_connection() -> None:
    reason = "code-mode host outgoing queue is full"
    async with raw_host() as (host, stream, nursery):
        stalling = StallingStream(stream)
        nursery.start_soon(host.handshake)
        config = cm.ConnectionConfig(outgoing_capacity=2)
        async with open_connection(stalling, config=config) as conn:
            session = await open_session(host, conn)
            stalling.stalled = True
            errors: list[str] = []

            async def execute() -> None:
                with pytest.raises(cm.ConnectionFailed) as info:
                    await session.execute("text(1)")
                errors.append(str(info.value))

            async with trio.open_nursery() as callers:
                callers.start_soon(execute)  # taken by the writer, which then blocks
                await trio.testing.wait_all_tasks_blocked()
                assert conn.statistics().outgoing_queued == 0
                callers.start_soon(execute)
                callers.start_soon(execute)
                await trio.testing.wait_all_tasks_blocked()
                assert conn.statistics().outgoing_queued == 2
                assert conn.alive
                callers.start_soon(execute)  # no room: the driver must not wait
            await expect_failure(conn, reason)
            assert errors == [reason] * 4


class BreakingStream(StallingStream):
    """A stream whose writes fail like a socket's once ``stalled`` is set: no message of its
    own, the OS error as the cause."""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.stalled:
            await trio.lowlevel.checkpoint()
            raise trio.BrokenResourceError from BrokenPipeError(32, "Broken pipe")
        await self.inner.send_all(data)


async def test_a_write_error_is_reported_with_the_os_error_in_the_reference_form(
    autojump_clock: trio.testing.MockClock,
) -> None:
    reason = "failed to write code-mode host message: Broken pipe (os error 32)"
    async with raw_host() as (host, stream, nursery):
        breaking = BreakingStream(stream)
        nursery.start_soon(host.handshake)
        async with open_connection(breaking, config=cm.ConnectionConfig()) as conn:
            session = await open_session(host, conn)
            breaking.stalled = True
            with pytest.raises(cm.ConnectionFailed, match=re.escape(reason)):
                await session.execute("text(1)")
            with trio.fail_after(60):  # the writer first gives the reader's EOF a chance
                assert await conn.wait_failed() == reason


# --------------------------------------------------------------------------- delegate replies


class ResultDelegate(RecordingDelegate):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        self.invocations += 1
        return self.value


@pytest.mark.parametrize("value", [{1, 2}, float("nan"), object(), {"nested": b"bytes"}])
async def test_non_json_tool_result_becomes_an_error_reply(value: Any) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, ResultDelegate(value))
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "tool")
        with trio.fail_after(1):
            response = await host.receive_a(DelegateResponse)
        assert response.id == DelegateRequestId(7)
        assert isinstance(response.result, WireError)
        assert response.result.message.startswith("code-mode delegate")
        await host.assert_quiet()
        assert conn.alive


async def test_oversize_tool_result_becomes_the_frame_limit_error_reply() -> None:
    big = "x" * (65 * 1024 * 1024)
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, ResultDelegate(big))
        await start_cell(host, session, 2, "1")
        await host.invoke(7, "session-1", "1", "tool")
        with trio.fail_after(10):
            response = await host.receive_a(DelegateResponse)
        assert response.id == DelegateRequestId(7)
        assert isinstance(response.result, WireError)
        prefix = "code-mode delegate response exceeds the IPC frame limit: "
        assert response.result.message.startswith(prefix)
        assert "exceeds 67108864 bytes" in response.result.message
        await host.assert_quiet()
        assert conn.alive
        # Still usable.
        await host.notify(8, "session-1", "1", "hi")
        assert await host.receive() == DelegateResponse(
            DelegateRequestId(8), WireOk(NotificationDelivered())
        )


class FragileDelegate(RecordingDelegate):
    """``cell_closed`` records, then raises, for the cells named in ``fragile``."""

    def __init__(self, *fragile: str) -> None:
        super().__init__()
        self.fragile = set(fragile)

    def cell_closed(self, cell_id: str) -> None:
        self.closed_cells.append(cell_id)
        if cell_id in self.fragile:
            raise RuntimeError(f"cell_closed({cell_id}) broke")


async def test_raising_cell_closed_hook_is_logged_and_swallowed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    delegate = FragileDelegate("1", "2")
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        await start_cell(host, session, 2, "1")
        await start_cell(host, session, 3, "2")
        await start_cell(host, session, 4, "3")
        with caplog.at_level(logging.ERROR, logger="codemode_trio.driver"):
            await host.cell_closed("session-1", "1")
            await host.assert_quiet()
            assert conn.alive
            # The session's shutdown closes the others; the broken hook stops none of them.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.aclose)
                assert (await host.receive_a(OperationRequest)).id == 5
                await host.session_closed(5, "session-1")
        assert delegate.closed_cells == ["1", "2", "3"]
        raised = [r for r in caplog.records if r.exc_info and "broke" in str(r.exc_info[1])]
        assert len(raised) == 2
        await host.assert_quiet()
        assert conn.alive
        # A new session works afterwards.
        await open_session(host, conn, delegate, "session-2")
        assert conn.alive


async def test_raising_cell_closed_hook_does_not_stop_failure_cleanup() -> None:
    delegate = FragileDelegate("1", "2", "3")
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        for request_id, cell_id in ((2, "1"), (3, "2"), (4, "3")):
            await start_cell(host, session, request_id, cell_id)
        await host.close()
        with trio.fail_after(1):
            await session.wait_cleaned_up()
        assert sorted(delegate.closed_cells) == ["1", "2", "3"]
        assert conn.failure is not None
        assert conn.failure.startswith("code-mode host closed its stdout")


# --------------------------------------------------------------------------- failure propagation


async def test_connection_failure_fails_every_waiter_with_the_first_reason(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        await start_cell(host, session, 3, "2")
        pending = await start_cell(host, session, 4, "3")
        reasons: list[str] = []

        async def wait(cell_id: str) -> None:
            with pytest.raises(cm.ConnectionFailed) as info:
                await session.wait(cell_id, yield_time_ms=60_000)
            reasons.append(info.value.reason)

        async def initial() -> None:
            with pytest.raises(cm.ConnectionFailed) as info:
                await pending.initial_response()
            reasons.append(info.value.reason)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "1")
            nursery.start_soon(wait, "2")
            nursery.start_soon(initial)
            assert {(await host.receive_a(OperationRequest)).id for _ in range(2)} == {5, 6}
            await host.close()
        first = await conn.wait_failed()
        assert first.startswith("code-mode host closed its stdout")
        assert reasons == [first] * 3
        assert sorted(recording.closed_cells) == ["1", "2", "3"]

        # Later failures never replace the first reason.
        await conn.aclose()
        await trio.testing.wait_all_tasks_blocked()
        assert conn.failure == first
        assert await conn.wait_failed() == first
        assert sorted(recording.closed_cells) == ["1", "2", "3"]


async def test_every_call_after_failure_raises_the_first_reason(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        cell = await start_cell(host, session, 2, "1")
        await host.send(ConnectionReady(1, ()))
        reason = "code-mode host sent a second handshake response"
        await expect_failure(conn, reason)

        calls: list[Any] = [
            lambda: conn.start_session(session_id="session-2"),
            lambda: session.execute("text(1)"),
            lambda: session.wait("1"),
            lambda: session.terminate("1"),
            lambda: session.run("text(1)"),
            cell.initial_response,
        ]
        for call in calls:
            with pytest.raises(cm.ConnectionFailed) as info:
                await call()
            assert info.value.reason == reason
            assert str(info.value) == reason
        with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
            async with conn.open_session():
                pytest.fail("must not open")  # pragma: no cover
        await session.aclose()  # nothing left to shut down on a dead connection
        stats = conn.statistics()
        assert stats.live_cells == 0
        assert stats.pending_requests == 0
        assert stats.pending_initial_responses == 0
        assert stats.sessions == 0
        assert recording.closed_cells == ["1"]
        assert conn.failure == reason


async def test_closing_the_connection_fails_waiters_and_closes_cells(
    recording: RecordingDelegate,
) -> None:
    reason = "code-mode host connection closed"
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        await start_cell(host, session, 2, "1")
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                with pytest.raises(cm.ConnectionFailed, match=f"^{reason}$"):
                    await session.wait("1")

            nursery.start_soon(wait)
            assert (await host.receive_a(OperationRequest)).id == 3
            await conn.aclose()
        assert conn.failure == reason
        assert recording.closed_cells == ["1"]
        await conn.aclose()  # idempotent
        assert conn.failure == reason


async def test_leaving_the_connection_block_closes_every_live_cell_once(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        first = await open_session(host, conn, recording, "session-1")
        second = await open_session(host, conn, recording, "session-2")
        await start_cell(host, first, 3, "1")
        await start_cell(host, second, 4, "1")
        await start_cell(host, second, 5, "2")
    assert sorted(recording.closed_cells) == ["1", "1", "2"]
    assert conn.failure == "code-mode host connection closed"
    assert first.cleaned_up
    assert second.cleaned_up


async def test_cancelled_session_block_still_shuts_the_session_down() -> None:
    async with open_fake_connection() as (host, conn):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.answer_open)
                async with conn.open_session(session_id="session-1"):
                    scope.cancel()
                    await trio.sleep_forever()
        assert scope.cancelled_caught
        assert await host.receive() == OperationRequest(RequestId(2), ShutdownRequest("session-1"))
        await host.session_closed(2, "session-1")
        await host.assert_quiet()
        assert conn.alive


async def test_an_error_in_the_connection_block_escapes_as_itself() -> None:
    async def use_connection() -> None:
        async with open_fake_connection() as (host, conn):
            await open_session(host, conn)
            raise ValueError("user bug")

    with pytest.raises(ValueError, match="^user bug$"):
        await use_connection()


async def test_an_error_in_the_session_block_escapes_as_itself() -> None:
    async with open_fake_connection() as (host, conn):

        async def host_side() -> None:
            await host.answer_open()
            request = await host.receive_a(OperationRequest)
            assert request == OperationRequest(RequestId(2), ShutdownRequest("session-1"))
            await host.session_closed(2, "session-1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(host_side)
            with pytest.raises(KeyError, match="missing"):
                async with conn.open_session(session_id="session-1"):
                    raise KeyError("missing")
        await host.assert_quiet()
        assert conn.alive


async def test_connection_failed_from_a_call_escapes_as_itself() -> None:
    async def use_connection() -> None:
        async with open_fake_connection() as (host, conn):
            session = await open_session(host, conn, RecordingDelegate())
            await start_cell(host, session, 2, "1")
            await host.close()
            await session.wait("1")

    with pytest.raises(cm.ConnectionFailed) as info:
        await use_connection()
    assert not isinstance(info.value, BaseExceptionGroup)
    assert info.value.reason.startswith("code-mode host closed its stdout")
    assert isinstance(info.value, trio.BrokenResourceError)


# --------------------------------------------------------------------------- ToolRegistry


def make_registry() -> tuple[cm.ToolRegistry, list[Any]]:
    tools = cm.ToolRegistry()
    seen: list[Any] = []

    async def add(a: int, b: int) -> int:
        await trio.lowlevel.checkpoint()
        return a + b

    tools.function(description="Add two integers")(add)

    @tools.function
    async def shape(
        count: int,
        name: str,
        ratio: float,
        flag: bool,
        values: list[int],
        maybe: Optional[int] = None,  # noqa: UP045 - the Optional spelling is what is tested
        other: int | None = None,
        default: int = 3,
    ) -> None:
        """Exercise the schema derivation.

        Only the first line is the description.
        """
        await trio.lowlevel.checkpoint()

    @tools.function
    async def refuse() -> None:
        await trio.lowlevel.checkpoint()
        raise cm.ToolError("x")

    @tools.on_notification
    async def notified(note: cm.Notification) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(note)

    @tools.on_cell_closed
    def closed(cell_id: str) -> None:
        seen.append(("closed", cell_id))

    return tools, seen


def test_tool_registry_derives_schemas_from_signatures() -> None:
    tools, _ = make_registry()
    definitions = {d.name: d for d in tools.definitions()}
    assert list(definitions) == ["add", "shape", "refuse"]
    # The tool's own description, then the declaration Codex appends (ALL_TOOLS shows it).
    assert definitions["add"].description == (
        "Add two integers\n\nexec tool declaration:\n```ts\n"
        "declare const tools: { add(args: { a: number; b: number; }): Promise<number>; };\n```"
    )
    assert definitions["add"].output_schema == {"type": "integer"}
    assert definitions["shape"].output_schema is None  # -> None: nothing to declare
    assert definitions["add"].input_schema == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert definitions["shape"].description.startswith(
        "Exercise the schema derivation.\n\nexec tool declaration:\n```ts\n"
        "declare const tools: { shape(args: { count: number; default?: number; flag: boolean; "
    )
    assert definitions["shape"].input_schema == {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "name": {"type": "string"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "values": {"type": "array", "items": {"type": "integer"}},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "other": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "default": {"type": "integer", "default": 3},
        },
        "required": ["count", "name", "ratio", "flag", "values"],
        "additionalProperties": False,
    }
    assert definitions["refuse"].input_schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert definitions["add"].kind == "function"


async def test_tool_registry_answers_tool_calls_over_the_wire() -> None:
    tools, seen = make_registry()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await start_cell(host, session, 2, "1")

        async def call(delegate_id: int, name: str, arguments: Any) -> Any:
            await host.invoke(delegate_id, "session-1", "1", name, arguments)
            with trio.fail_after(1):
                response = await host.receive_a(DelegateResponse)
            assert response.id == DelegateRequestId(delegate_id)
            return response.result

        assert await call(1, "add", {"a": 1, "b": 2}) == WireOk(ToolResult(3))
        assert await call(2, "nope", {}) == WireError("unknown tool 'nope'")
        missing = await call(3, "add", {"a": 1})
        assert isinstance(missing, WireError)
        assert missing.message.startswith("tool 'add'")
        assert "'b'" in missing.message
        extra = await call(4, "add", {"a": 1, "b": 2, "c": 3})
        assert isinstance(extra, WireError)
        assert extra.message.startswith("tool 'add'")
        not_an_object = await call(5, "add", [1, 2])
        assert isinstance(not_an_object, WireError)
        assert not_an_object.message.startswith("tool 'add'")
        assert await call(6, "refuse", None) == WireError("x")
        assert await call(8, "add", {"a": "1", "b": 2}) == WireError(
            "tool 'add': argument 'a': input should be a valid integer"
        )

        await host.notify(7, "session-1", "1", "hello", call_id="call-9")
        assert await host.receive() == DelegateResponse(
            DelegateRequestId(7), WireOk(NotificationDelivered())
        )
        assert seen == [cm.Notification("call-9", "1", "hello")]
        await host.cell_closed("session-1", "1")
        await trio.testing.wait_all_tasks_blocked()
        assert seen[-1] == ("closed", "1")
        await host.assert_quiet()
        assert conn.alive


async def test_tool_registry_is_used_as_the_default_tool_list() -> None:
    tools, _ = make_registry()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.execute, "text(1)")
            request = await host.receive_a(OperationRequest)
            assert isinstance(request.request, ExecuteRequest)
            assert request.request.enabled_tools == tools.definitions()
            assert session.default_tools() == tools.definitions()
            await host.start(2, "1")


def test_tool_registry_accepts_annotations_it_cannot_resolve() -> None:
    # A type defined in a local scope is not resolvable from the function's globals under
    # ``from __future__ import annotations``; the schema must fall back to "anything".
    class Point:
        pass

    tools = cm.ToolRegistry()

    @tools.function
    async def move(point: Point, steps: int) -> None:
        pass

    (definition,) = tools.definitions()
    assert definition.input_schema == {
        "type": "object",
        "properties": {"point": {}, "steps": {"type": "integer"}},
        "required": ["point", "steps"],
        "additionalProperties": False,
    }


def test_tool_registry_tuple_schemas_describe_their_items() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def pairs(homogeneous: tuple[int, ...], mixed: tuple[int, str]) -> None:
        pass

    (definition,) = tools.definitions()
    assert isinstance(definition.input_schema, dict)
    properties = definition.input_schema["properties"]
    # tuple[int, ...] holds only integers.
    assert properties["homogeneous"] == {"type": "array", "items": {"type": "integer"}}
    # tuple[int, str] must not claim that every item is an integer ("b" is valid there).
    mixed = properties["mixed"]
    assert mixed["type"] == "array"
    assert mixed.get("items", {}) in ({}, {"anyOf": [{"type": "integer"}, {"type": "string"}]})
    if "prefixItems" in mixed:
        assert mixed["prefixItems"] == [{"type": "integer"}, {"type": "string"}]


async def test_tool_registry_raw_input_and_registration_errors() -> None:
    tools = cm.ToolRegistry()

    async def echo_raw(value: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return value

    tools.function(echo_raw, name="echo", raw_input=True, description="Echo the raw input")

    (definition,) = tools.definitions()
    assert (definition.name, definition.kind, definition.input_schema) == (
        "echo",
        "freeform",
        None,
    )
    call = cm.ToolCall("1", "tool-1", "echo", None, "freeform", [1, "two"])
    assert await tools.invoke_tool(call) == [1, "two"]
    assert "echo" in tools
    assert len(tools) == 1

    async def again() -> None:
        await trio.lowlevel.checkpoint()

    def not_async() -> None:
        pass

    with pytest.raises(ValueError, match="already registered"):
        tools.function(again, name="echo")
    with pytest.raises(TypeError, match="must be an async function"):
        tools.function(not_async)  # type: ignore[arg-type]
    assert len(tools) == 1


# --------------------------------------------------------------------------- Session.run


async def test_run_waits_through_yields_and_keeps_every_item(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)

        async def host_side() -> None:
            execute = await host.receive_a(OperationRequest)
            assert execute.id == 2
            await host.start(2, "1")
            await host.initial(2, yielded_text("1", "a"))
            wait = await host.receive_a(OperationRequest)
            assert wait == OperationRequest(RequestId(3), WaitRequest("session-1", "1", 10_000))
            await host.wait_completed(3, result("1", "b"))
            await host.cell_closed("session-1", "1")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(host_side)
            response = await session.run("text('a'); await yield_control(); text('b')")
        assert response.kind == "result"
        assert response.cell_id == "1"
        assert response.content_items == (cm.TextItem("a"), cm.TextItem("b"))
        assert response.text == "a\nb"
        await host.assert_quiet()
        assert recording.closed_cells == ["1"]


async def test_cancelled_run_cancels_the_wait_then_terminates_the_cell(
    recording: RecordingDelegate,
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, recording)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(session.run, "await new Promise(() => {})")
                assert (await host.receive_a(OperationRequest)).id == 2
                await host.start(2, "1")
                await host.initial(2, yielded("1"))
                wait = await host.receive_a(OperationRequest)
                assert wait.id == 3
                assert isinstance(wait.request, WaitRequest)
                scope.cancel()
        assert await host.receive() == OperationCancel(RequestId(3))
        assert await host.receive() == OperationRequest(
            RequestId(4), TerminateRequest("session-1", "1")
        )
        await host.assert_quiet()
        await host.reply_error(3, "code-mode request cancelled")
        await host.wait_completed(4, terminated("1"))
        await host.cell_closed("session-1", "1")
        await host.assert_quiet()
        assert conn.alive
        assert recording.closed_cells == ["1"]


async def test_tool_registry_binds_keyword_only_defaults_and_extra_keywords() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def scaled(value: int, *, factor: int = 2) -> int:
        await trio.lowlevel.checkpoint()
        return value * factor

    @tools.function
    async def tagged(name: str, **tags: str) -> dict[str, str]:
        await trio.lowlevel.checkpoint()
        return {"name": name, **tags}

    def call(name: str, arguments: Any) -> cm.ToolCall:
        return cm.ToolCall("1", "tool-1", name, None, "function", arguments)

    assert await tools.invoke_tool(call("scaled", {"value": 3})) == 6
    assert await tools.invoke_tool(call("scaled", {"value": 3, "factor": 5})) == 15
    with pytest.raises(cm.ToolError, match="^tool 'scaled': missing required argument 'value'$"):
        await tools.invoke_tool(call("scaled", {"factor": 5}))
    with pytest.raises(cm.ToolError, match="^tool 'scaled': unexpected argument 'power'$"):
        await tools.invoke_tool(call("scaled", {"value": 3, "power": 5}))
    assert await tools.invoke_tool(call("tagged", {"name": "n", "colour": "red"})) == {
        "name": "n",
        "colour": "red",
    }
    with pytest.raises(cm.ToolError, match="^tool 'tagged': missing required argument 'name'$"):
        await tools.invoke_tool(call("tagged", {"colour": "red"}))
    with pytest.raises(cm.ToolError, match="^tool 'tagged': argument 'colour': input should be a"):
        await tools.invoke_tool(call("tagged", {"name": "n", "colour": 1}))
