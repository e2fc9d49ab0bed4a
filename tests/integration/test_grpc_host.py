"""The gRPC transport against the real host 0.171.0: ``grpc://`` (TCP) and ``grpc+stdio://``.

The scenarios whose behaviour is the same on every transport are in test_session_api.py, which
runs them over both gRPC listeners too; here are the gRPC-specific ones, and the probes of
the host's gRPC behaviour (docs/host-behaviour-grpc.md) talk to it one call at a time through
:class:`~codemode_trio.grpc.calls.GrpcChannel`.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from trio_util import AsyncValue

import codemode_trio as cm
from codemode_trio.grpc import GrpcSettings, StatusCode
from codemode_trio.grpc import codemode_pb2 as pb
from codemode_trio.grpc.calls import GrpcChannel
from codemode_trio.grpc.connection import SERVICE
from codemode_trio.grpc.http2 import open_http2_connection
from codemode_trio.transport.process import spawn_host

from .conftest import Recorder, grpc_host, raw_lease

TRANSPORTS = ["grpc", "grpc+stdio"]


@asynccontextmanager
async def open_conn(
    transport: str,
    host_path: Path,
    settings: GrpcSettings | None = None,
    config: cm.ConnectionConfig = cm.DEFAULT_CONFIG,
) -> AsyncIterator[cm.GrpcConnection]:
    if transport == "grpc":
        async with (
            grpc_host(host_path) as (host, target),
            cm.open_grpc_connection(target, settings=settings, config=config) as conn,
        ):
            conn.process = host.process  # as open_host_process sets it, for signalling tests
            yield conn
    else:
        assert settings is None
        async with cm.open_host_process(host_path, transport="grpc", config=config) as conn:
            yield conn


@asynccontextmanager
async def raw_channel(host_path: Path) -> AsyncIterator[GrpcChannel]:
    """One gRPC call at a time, for probing the host's answers directly."""
    async with (
        spawn_host(host_path, args=["--listen", "grpc+stdio://"]) as host,
        open_http2_connection(host.stream) as http2,
    ):
        yield GrpcChannel(http2, authority="localhost", service=SERVICE)


@pytest.fixture
def host_path(rust_host_path: Path) -> Path:
    """The Rust host 0.171.0 only: gRPC is its API; the reference host speaks stdio."""
    return rust_host_path


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


# --------------------------------------------------------------------------- scenarios


async def test_notifications_reach_the_delegate_in_order_and_the_cell_does_not_wait(
    transport: str, host_path: Path
) -> None:
    release = trio.Event()
    notes: list[cm.Notification] = []
    arrived = AsyncValue(0)
    tools = cm.ToolRegistry()

    @tools.on_notification
    async def on_note(note: cm.Notification) -> None:
        notes.append(note)
        arrived.value += 1
        await release.wait()  # the acknowledgement waits for this; the cell does not

    with trio.fail_after(30):
        async with open_conn(transport, host_path) as conn, conn.open_session(tools) as s:
            cell = await s.execute("notify('one'); notify(2); text('done')", tool_call_id="c-7")
            response = await cell.initial_response()
            assert response.text == "done"
            await arrived.wait_value(1)
            # The second waits for the first to return, so the delegate sees them in order.
            assert conn.statistics().active_delegates == 2
            release.set()
            await arrived.wait_value(2)
    assert [(n.text, n.call_id, n.cell_id) for n in notes] == [
        ("one", "c-7", cell.cell_id),
        ("2", "c-7", cell.cell_id),
    ]


async def test_the_host_never_waits_on_our_delegates_so_no_deadline_pauses_for_them(
    transport: str, host_path: Path
) -> None:
    # A yield comes on time while a tool call is pending, and CloseSession returns at once
    # while the delegate is still busy (shielded from its revocation): the host is never
    # kept waiting by us, so a short transport timeout must not fire.
    release = trio.Event()
    started = trio.Event()
    answered: list[int] = []
    tools = cm.ToolRegistry()

    @tools.function(description="waits for the test")
    async def busy() -> int:
        started.set()
        with trio.CancelScope(shield=True):
            await release.wait()
        answered.append(1)
        return 1

    config = cm.ConnectionConfig(transport_timeout=1.0, yield_grace=0.5)
    with trio.fail_after(30):
        async with open_conn(transport, host_path, config=config) as conn:
            session = await conn.start_session(tools)
            cell = await session.execute("await tools.busy({})", yield_time_ms=100)
            assert (await cell.initial_response()).kind == "yielded"
            assert started.is_set() and not release.is_set()
            await session.aclose()
            assert session.cleaned_up and conn.alive
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert answered == [1] and conn.alive
            assert conn.statistics().active_delegates == 0


async def test_cancelling_execute_terminates_the_cell(
    transport: str, host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with open_conn(transport, host_path) as conn, conn.open_session(recorder.tools) as s:
            with trio.CancelScope() as early:
                early.cancel()
                await s.execute("await tools.hang({tag: 'never'})")
            # Cancelled before it was sent: no call is open, only the session's own two streams.
            assert conn.statistics().pending_requests == 0
            assert s.standing_streams == 2
            assert conn.process is not None
            outcome: list[str] = []
            scope = trio.CancelScope()

            async def execute() -> None:
                with scope:
                    await s.execute("await tools.hang({tag: 'abandoned'})", yield_time_ms=60_000)
                    outcome.append("returned")
                if scope.cancelled_caught:
                    outcome.append("cancelled")

            # A stopped host cannot answer before the caller gives up.
            os.kill(conn.process.pid, signal.SIGSTOP)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(execute)
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
            finally:
                os.kill(conn.process.pid, signal.SIGCONT)
            assert outcome == ["cancelled"]
            # The host admits the cell anyway; the session terminates it.
            await recorder.wait_for(lambda r: len(r.closed) == 1)
            assert conn.statistics().live_cells == 0
            assert conn.alive


async def test_bounded_output_is_the_sessions_choice(transport: str, host_path: Path) -> None:
    with trio.fail_after(30):
        async with open_conn(transport, host_path) as conn:
            long_text = "text('word '.repeat(5000))"
            async with conn.open_session(output_truncation="server") as s:
                bounded = await (
                    await s.execute(long_text, max_output_tokens=10)
                ).initial_response()
            async with conn.open_session() as s:
                # Without bounded output the host ignores max_output_tokens.
                full = await (await s.execute(long_text, max_output_tokens=10)).initial_response()
    assert len(full.text) == 25_000
    assert len(bounded.text) < 1_000


# The lease stream (cell_closed) and each Execute stream (the cell's start) are read by
# different tasks, so a quick cell's cell_closed is often read before its start: each such
# cell's hook must still run, once.


async def test_every_quick_cell_is_closed_exactly_once(transport: str, host_path: Path) -> None:
    recorder = Recorder()
    with trio.fail_after(60):
        async with open_conn(transport, host_path) as conn:
            async with conn.open_session(recorder.tools) as s:
                ids = [(await s.execute(f"text({i})")).cell_id for i in range(30)]
                for i in range(30):
                    assert (await s.run(f"text({i})")).text == str(i)

                async def quick(i: int) -> None:
                    ids.append((await s.execute(f"text({i})")).cell_id)

                async with trio.open_nursery() as nursery:
                    for i in range(30):
                        nursery.start_soon(quick, i)
            assert s.cleaned_up and conn.alive
    assert len(ids) == len(set(ids)) == 60
    # run's own cells are the 30 ids the list lacks; every one of the 90 closed exactly once.
    assert len(recorder.closed) == len(set(recorder.closed)) == 90
    assert set(ids) <= set(recorder.closed)


async def test_shutdown_closes_live_and_finished_cells_exactly_once(
    transport: str, host_path: Path
) -> None:
    recorder = Recorder()
    with trio.fail_after(30):
        async with open_conn(transport, host_path) as conn:
            async with conn.open_session(recorder.tools) as s:
                live = [
                    await s.execute(f"await tools.hang({{tag: 'c{i}'}})", yield_time_ms=60_000)
                    for i in range(2)
                ]
                for _ in live:
                    await recorder.started.receive()
                done = await s.execute("text('quick')")
            assert s.cleaned_up and conn.alive
            assert sorted(recorder.closed) == sorted(c.cell_id for c in [*live, done])
            await recorder.wait_for(lambda r: sorted(r.cancelled) == ["c0", "c1"])
            assert conn.statistics().live_cells == 0


async def test_a_terminated_cell_is_closed_once(transport: str, host_path: Path) -> None:
    recorder = Recorder()
    with trio.fail_after(30):
        async with open_conn(transport, host_path) as conn:
            async with conn.open_session(recorder.tools) as s:
                cell = await s.execute("await tools.hang({tag: 't'})", yield_time_ms=60_000)
                await recorder.started.receive()
                assert (await s.terminate(cell.cell_id)).response.kind == "terminated"
                # The revoked tool's cleanup runs a moment after the cell closed.
                await recorder.wait_for(
                    lambda r: r.closed == [cell.cell_id] and r.cancelled == ["t"]
                )
            assert recorder.closed == [cell.cell_id]


async def test_a_failed_connection_closes_each_live_cell_once(
    transport: str, host_path: Path
) -> None:
    recorder = Recorder()
    with trio.fail_after(30):
        async with open_conn(transport, host_path) as conn:
            assert conn.process is not None
            async with conn.open_session(recorder.tools) as s:
                cells = [
                    await s.execute(f"await tools.hang({{tag: 'k{i}'}})", yield_time_ms=60_000)
                    for i in range(2)
                ]
                for _ in cells:
                    await recorder.started.receive()
                finished = await s.execute("text('over')")
                assert (await finished.initial_response()).text == "over"
                os.kill(conn.process.pid, signal.SIGKILL)
                await conn.wait_failed()
                await s.wait_cleaned_up()
            assert sorted(recorder.closed) == sorted(c.cell_id for c in [*cells, finished])
            assert sorted(recorder.cancelled) == ["k0", "k1"]


@pytest.mark.parametrize("exception", [KeyboardInterrupt(), SystemExit(3)])
async def test_a_base_exception_from_a_tool_ends_the_connection_and_comes_out_as_itself(
    transport: str, host_path: Path, exception: BaseException
) -> None:
    # The same policy as on stdio: not the call's business, so not an error text for the
    # script; the connection fails, and the opener's block raises what the tool raised.
    recorder = Recorder()

    @recorder.tools.function(description="raises what the test gives it")
    async def interrupt() -> None:
        raise exception

    with trio.fail_after(30), pytest.raises(type(exception)) as info:
        async with open_conn(transport, host_path) as conn, conn.open_session(recorder.tools) as s:
            cell = await s.execute("await tools.interrupt({})", yield_time_ms=60_000)
            reason = await conn.wait_failed()
            await cell.initial_response()
    assert info.value is exception
    assert reason.startswith(f"a delegate raised {type(exception).__name__}")
    assert not conn.alive
    assert recorder.closed == [cell.cell_id]


async def test_host_killed_mid_call_fails_the_connection_with_its_exit(
    host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(host_path, transport="grpc") as conn:
            process = conn.process
            assert process is not None
            async with conn.open_session(recorder.tools) as s:
                cell = await s.execute("await tools.hang({tag: 'killed'})", yield_time_ms=60_000)
                await recorder.started.receive()
                os.kill(process.pid, signal.SIGKILL)
                with pytest.raises(cm.ConnectionFailed) as info:
                    await cell.initial_response()
            reason = await conn.wait_failed()
    assert isinstance(info.value, trio.BrokenResourceError)
    assert reason.startswith("code-mode host closed the connection")
    assert "killed by signal SIGKILL" in reason
    assert recorder.cancelled == ["killed"]
    assert recorder.closed == [cell.cell_id]


async def test_caller_mistakes_raise_usage_errors_and_send_nothing(host_path: Path) -> None:
    with trio.fail_after(30):
        async with open_conn("grpc+stdio", host_path) as conn, conn.open_session() as s:
            before = conn.statistics().frames_sent
            with pytest.raises(cm.UsageError):
                await s.execute("1", yield_time_ms=-1)
            with pytest.raises(cm.UsageError):
                await s.execute("1", max_output_tokens=2**31)
            with pytest.raises(cm.UsageError):
                await s.execute("1", catalog_revision=1)
            with pytest.raises(cm.UsageError):
                await s.wait("1", max_output_tokens=5)
            with pytest.raises(cm.UsageError):
                await s.terminate("1", max_output_tokens=5)
            with pytest.raises(cm.UsageError):
                await conn.start_session(output_truncation="sometimes")
            with pytest.raises(cm.UsageError):
                await conn.start_session(limits=cm.CellLimits(max_yield_time_ms=-1))
            assert conn.statistics().frames_sent == before
            with pytest.raises(cm.UsageError, match="grpc://IP:PORT"):
                async with cm.open_grpc_connection("localhost:80"):
                    pass
            with pytest.raises(cm.ConnectionFailed, match="failed to connect"):
                async with cm.open_grpc_connection("grpc://127.0.0.1:1"):
                    pass


# --------------------------------------------------------------------------- leases


async def test_a_session_is_a_lease_another_connection_can_use_and_close(
    host_path: Path, recorder: Recorder
) -> None:
    other = Recorder()
    with trio.fail_after(30):
        async with (
            grpc_host(host_path) as (_, target),
            cm.open_grpc_connection(target) as owner,
            cm.open_grpc_connection(target) as guest,
        ):
            session = await owner.start_session(recorder.tools)
            uuid.UUID(session.session_id)  # the host's ids are UUIDs
            attached = await guest.start_session(other.tools, session_id=session.session_id)
            # Only the attached subscription knows `add`; its connection answers the call.
            result = await attached.run(
                "text(await tools.add({a: 2, b: 3}))", tools=other.tools.definitions()
            )
            assert result.text == "5"
            await attached.aclose()
            await session.wait_cleaned_up()  # the guest's close ended the owner's lease too
            with pytest.raises(cm.SessionClosed):
                await session.run("1")
            assert owner.alive and guest.alive


async def test_heartbeats_arrive_on_an_idle_subscription(host_path: Path) -> None:
    with trio.fail_after(30):
        async with raw_channel(host_path) as channel, raw_lease(channel) as session_id:
            request = pb.SubscribeToToolCallsRequest(session_id=session_id, heartbeat_interval_s=1)
            async with channel.server_stream("SubscribeToToolCalls", request, pb.ToolCall) as sub:
                await sub.headers()
                start = trio.current_time()
                beats = [await sub.receive(), await sub.receive()]
                elapsed = trio.current_time() - start
    for beat in beats:
        assert beat is not None and beat.HasField("heartbeat")
        assert (beat.session_id, beat.invocation_id) == (session_id, "")
    assert 1.5 < elapsed < 5


async def test_our_client_asks_for_heartbeats_and_keeps_them_from_the_delegate(
    host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        settings = GrpcSettings(heartbeat_interval_s=1)
        async with (
            open_conn("grpc", host_path, settings) as conn,
            conn.open_session(recorder.tools) as s,
        ):
            await trio.sleep(2.5)
            assert s.heartbeats >= 2
            assert (await s.run("text(await tools.add({a: 1, b: 1}))")).text == "2"


# --------------------------------------------------------------------------- statuses


async def test_the_host_reports_mistakes_as_grpc_statuses(host_path: Path) -> None:
    with trio.fail_after(30):
        async with open_conn("grpc", host_path) as conn:
            with pytest.raises(cm.GrpcStatusError) as bad_id:
                await conn.start_session(session_id="not-a-uuid")
            with pytest.raises(cm.GrpcStatusError) as unknown:
                await conn.start_session(session_id=str(uuid.uuid4()))
            async with conn.open_session() as s:
                cell = await s.execute("await new Promise(() => {})", yield_time_ms=0)
                await cell.initial_response()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(s.wait, cell.cell_id)
                    await trio.sleep(0.2)
                    with pytest.raises(cm.GrpcStatusError) as second:
                        await s.wait(cell.cell_id, yield_time_ms=0)
                    s.request_yield(cell.cell_id)
                await s.terminate(cell.cell_id)
            assert conn.alive
    assert isinstance(bad_id.value, cm.HostError)
    assert (bad_id.value.code, str(bad_id.value)) == (
        StatusCode.INVALID_ARGUMENT,
        "code-mode session ID must be a UUID",
    )
    assert unknown.value.code == StatusCode.NOT_FOUND
    assert second.value.code == StatusCode.FAILED_PRECONDITION


async def test_raw_probes_of_the_grpc_api(host_path: Path) -> None:
    with trio.fail_after(30):
        async with raw_channel(host_path) as channel:
            with pytest.raises(cm.GrpcStatusError) as metrics:
                await channel.unary(
                    "GetProcessMetrics", pb.CloseSessionRequest(), pb.CloseSessionResponse
                )
            async with channel.server_stream(
                "OpenSession", pb.OpenSessionRequest(), pb.SessionEvent
            ) as events:
                first = await events.receive()
                assert first is not None and first.WhichOneof("event") == "opened"
                session_id = first.opened.session_id
                # A subscription for another tool: `x` finds no subscriber.
                only_y = pb.SubscribeToToolCallsRequest(
                    session_id=session_id, tool_names=[pb.ToolName(name="y")]
                )
                async with channel.server_stream(
                    "SubscribeToToolCalls", only_y, pb.ToolCall
                ) as sub:
                    await sub.headers()
                    execution_id = str(uuid.uuid4())
                    x = pb.ToolDefinition(name="x", tool_name=pb.ToolName(name="x"), kind=1)
                    execute = pb.ExecuteRequest(
                        session_id=session_id,
                        execution_id=execution_id,
                        tool_call_id="call-1",
                        source="try { await tools.x({}) } catch (e) { text(String(e)) }",
                        enabled_tools=[x],
                    )
                    events_of = await _execute_events(channel, execute)
                    with pytest.raises(cm.GrpcStatusError) as reused:
                        await _execute_events(channel, execute)
                with pytest.raises(cm.GrpcStatusError) as unknown_call:
                    await channel.unary(
                        "CompleteToolCall",
                        pb.CompleteToolCallRequest(
                            session_id=session_id,
                            invocation_id=str(uuid.uuid4()),
                            succeeded=pb.ToolCallSucceeded(output_json=b"1"),
                        ),
                        pb.CompleteToolCallResponse,
                    )
                no_tool_call_id = pb.ExecuteRequest(
                    session_id=session_id, execution_id=str(uuid.uuid4()), source="1"
                )
                with pytest.raises(cm.GrpcStatusError) as empty_call_id:
                    await _execute_events(channel, no_tool_call_id)
            # Cancelling the lease stream (leaving the block sent RST_STREAM) closed it.
            await trio.sleep(0.2)
            with pytest.raises(cm.GrpcStatusError) as after_cancel:
                await channel.unary(
                    "Terminate",
                    pb.TerminateRequest(session_id=session_id, cell_id="1"),
                    pb.WaitResponse,
                )
    assert metrics.value.code == StatusCode.UNIMPLEMENTED
    assert [e.WhichOneof("event") for e in events_of] == ["started", "outcome"]
    assert events_of[1].outcome.content_items[0].text.text == (
        "no code-mode tool subscription matches the requested tool"
    )
    assert reused.value.code == StatusCode.ALREADY_EXISTS
    assert unknown_call.value.code == StatusCode.NOT_FOUND
    assert empty_call_id.value.code == StatusCode.INVALID_ARGUMENT
    assert str(empty_call_id.value) == "code-mode tool call ID must not be empty"
    assert after_cancel.value.code == StatusCode.NOT_FOUND


async def test_at_most_128_subscriptions_per_session(host_path: Path) -> None:
    with trio.fail_after(30):
        async with raw_channel(host_path) as channel, raw_lease(channel) as session_id:
            request = pb.SubscribeToToolCallsRequest(session_id=session_id)
            async with trio.open_nursery() as nursery:
                accepted = 0
                with pytest.raises(cm.GrpcStatusError) as refused:
                    for _ in range(129):
                        await nursery.start(_hold_subscription, channel, request)
                        accepted += 1
                nursery.cancel_scope.cancel()
    assert accepted == 128
    assert refused.value.code == StatusCode.RESOURCE_EXHAUSTED
    assert str(refused.value) == "code-mode session has too many tool subscriptions"


async def _hold_subscription(
    channel: GrpcChannel,
    request: pb.SubscribeToToolCallsRequest,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    async with channel.server_stream("SubscribeToToolCalls", request, pb.ToolCall) as sub:
        await sub.headers()
        task_status.started()
        await trio.sleep_forever()


async def _execute_events(channel: GrpcChannel, request: pb.ExecuteRequest) -> list[Any]:
    async with channel.server_stream("Execute", request, pb.ExecuteEvent) as call:
        events = []
        while (event := await call.receive()) is not None:
            events.append(event)
        return events
