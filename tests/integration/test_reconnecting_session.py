"""open_reconnecting_session against the real host: a killed host, then generation 2."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import codemode_trio as cm
from codemode_trio.grpc.calls import GrpcChannel
from codemode_trio.grpc.connection import SERVICE
from codemode_trio.grpc.http2 import open_http2_connection

from .conftest import Recorder, grpc_host, raw_lease


@pytest.mark.parametrize("transport", ["stdio", "grpc"])
async def test_after_a_host_dies_the_next_call_runs_on_generation_2(
    transport: str, host_path: Path, rust_host_path: Path, recorder: Recorder
) -> None:
    opened: list[Any] = []
    if transport == "grpc":
        host_path = rust_host_path  # the reference host speaks the stdio protocol only

    def opener() -> AbstractAsyncContextManager[Any]:
        opened.append(transport)
        if transport == "grpc":
            return cm.open_host_process(host_path, transport="grpc")
        return cm.open_host_process(host_path)

    with trio.fail_after(60):
        async with cm.open_reconnecting_session(opener, delegate=recorder.tools) as rs:
            first = await rs.run("text(await tools.echo({value: 1}))")
            assert (first.cell_id, rs.generation) == ("1", 1)
            connection = rs.connection
            assert connection is not None and connection.process is not None
            os.kill(connection.process.pid, signal.SIGKILL)
            await connection.wait_failed()
            # The failure reaches one call; the next one opens generation 2.
            with pytest.raises(cm.ConnectionFailed):
                await rs.run("text(2)")
            second = await rs.run("text(JSON.stringify(await tools.echo({value: 2})))")
            assert (second.cell_id, second.text, rs.generation) == ("g2:1", '{"echo":2}', 2)
            cell = await rs.execute("text('x'); await new Promise(() => {})", yield_time_ms=0)
            assert cell.cell_id == "g2:2"
            assert (await cell.initial_response()).cell_id == "g2:2"
            with pytest.raises(
                cm.SessionClosed, match="generation 1, but the session is on generation 2"
            ):
                await rs.wait("1")
            terminated = await rs.terminate(cell.cell_id)
            assert (terminated.live, terminated.response.cell_id) == (True, "g2:2")
            await recorder.wait_for(lambda r: "g2:2" in r.closed)
        with pytest.raises(cm.SessionClosed):
            await rs.run("1")
    assert opened == [transport, transport]
    # The delegate saw public ids; generation 1's cell closed when its host died.
    assert recorder.closed[:1] == ["1"] and "g2:1" in recorder.closed


@asynccontextmanager
async def attached_to_a_lease_held_elsewhere(
    host_path: Path, recorder: Recorder
) -> AsyncIterator[tuple[cm.ReconnectingSession, str]]:
    """A host on a port, a bare connection holding a session's lease (it does not subscribe),
    and a reconnecting session attached to that session; yields it and the session id."""
    async with grpc_host(host_path) as (_, target):
        host, port = target.removeprefix("grpc://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        async with open_http2_connection(stream) as http2:
            channel = GrpcChannel(http2, authority=f"{host}:{port}", service=SERVICE)
            async with (
                raw_lease(channel) as session_id,
                cm.open_reconnecting_session(
                    lambda: cm.open_grpc_connection(target),
                    delegate=recorder.tools,
                    session_id=session_id,
                ) as rs,
            ):
                yield rs, session_id


async def drop_connection(rs: cm.ReconnectingSession) -> cm.GrpcConnection:
    """Close only the session's current connection (the host lives on); return it."""
    connection = rs.connection
    assert isinstance(connection, cm.GrpcConnection)
    await connection.aclose()
    return connection


async def test_over_grpc_the_host_ends_a_lease_with_its_connection_so_generation_2_begins(
    rust_host_path: Path, recorder: Recorder
) -> None:
    # Only our connection drops (the host lives on), but 0.171.0 ends a session when the
    # connection holding its OpenSession stream goes: reattaching finds it gone.
    with trio.fail_after(60):
        async with grpc_host(rust_host_path) as (_, target):
            opener = lambda: cm.open_grpc_connection(target)  # noqa: E731
            async with cm.open_reconnecting_session(opener, delegate=recorder.tools) as rs:
                first = await rs.execute("await new Promise(() => {})", yield_time_ms=0)
                lost = rs.session_id
                await drop_connection(rs)
                with pytest.raises(cm.ConnectionFailed):
                    await rs.wait(first.cell_id)
                again = await rs.run("text(JSON.stringify(await tools.echo({value: 2})))")
                assert (again.cell_id, again.text) == ("g2:1", '{"echo":2}')
                assert (rs.generation, rs.reattachments) == (2, 0)
                assert rs.session_id != lost


async def test_an_attached_session_reattaches_after_its_connection_drops_and_its_cells_go_on(
    rust_host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(60):
        async with attached_to_a_lease_held_elsewhere(rust_host_path, recorder) as (rs, sid):
            cell = await rs.execute(
                "text('before'); await new Promise(r => setTimeout(r, 60000))",
                yield_time_ms=0,
            )
            assert (await cell.initial_response()).kind == "yielded"
            connection = await drop_connection(rs)  # no tool call is pending on it
            with pytest.raises(cm.ConnectionFailed):
                await rs.wait(cell.cell_id)
            # The same session on a new connection: the cell is still running, same id.
            outcome = await rs.wait(cell.cell_id, yield_time_ms=100)
            assert outcome.live and outcome.response.kind == "yielded"
            assert (rs.generation, rs.reattachments, rs.session_id) == (1, 1, sid)
            assert rs.connection is not connection
            echoed = await rs.run("text(JSON.stringify(await tools.echo({value: 3})))")
            assert echoed.text == '{"echo":3}'
            terminated = await rs.terminate(cell.cell_id)
            assert terminated.live and terminated.response.kind == "terminated"


async def test_a_drop_with_a_tool_call_pending_ends_the_leased_session_on_the_host(
    rust_host_path: Path, recorder: Recorder
) -> None:
    # 0.171.0 closes a session whose tool call was pending on a subscription that went away,
    # even while another connection holds the lease: reattaching then finds it gone.
    with trio.fail_after(60):
        async with attached_to_a_lease_held_elsewhere(rust_host_path, recorder) as (rs, sid):
            await rs.execute("await tools.hang({tag: 'pending'})", yield_time_ms=0)
            assert await recorder.started.receive() == "pending"
            await drop_connection(rs)
            with pytest.raises(cm.ConnectionFailed):
                await rs.run("1")
            with pytest.raises(cm.SessionClosed, match=f"leased code-mode session {sid} is gone"):
                await rs.run("1")


async def test_attaching_needs_a_grpc_connection_and_no_limits(host_path: Path) -> None:
    with pytest.raises(cm.UsageError, match="limits belong to the session's opener"):
        async with cm.open_reconnecting_session(
            lambda: cm.open_host_process(host_path),
            session_id="00000000-0000-4000-8000-000000000001",
            limits=cm.CellLimits(max_yield_time_ms=10),
        ):
            pass
    with trio.fail_after(30):
        with pytest.raises(cm.UsageError, match="only a gRPC connection can attach"):
            async with cm.open_reconnecting_session(
                lambda: cm.open_host_process(host_path),
                session_id="00000000-0000-4000-8000-000000000001",
            ):
                pass


def test_public_ids_round_trip() -> None:
    from codemode_trio.reconnect import public_cell_id, split_cell_id

    assert public_cell_id(1, "7") == "7"
    assert public_cell_id(3, "7") == "g3:7"
    assert split_cell_id("g3:7") == (3, "7")
    assert split_cell_id("7") == (1, "7")
    assert split_cell_id("g1:7") == (1, "g1:7")  # never produced: generation 1 is unprefixed
    assert split_cell_id("gx:7") == (1, "gx:7")


async def test_every_session_option_reaches_the_host(rust_host_path: Path) -> None:
    """catalog_revision and max_output_tokens of execute, wait and terminate are passed on."""
    listed = "text(ALL_TOOLS.map((t) => t.name).join(','))"
    long_text = "text('word '.repeat(5000))"
    echo = cm.ToolDefinition("echo", "Echo the input back", {"type": "object"})
    with trio.fail_after(30):
        async with cm.open_reconnecting_session(
            lambda: cm.open_host_process(rust_host_path), output_truncation="server"
        ) as rs:
            first = await rs.execute(listed, tools=[echo], catalog_revision=1)
            assert (await first.initial_response()).text == "echo"
            # The same revision without tools: the host reuses the catalog it was given.
            again = await rs.execute(listed, tools=[], catalog_revision=1)
            assert (await again.initial_response()).text == "echo"
            bounded = await rs.execute(long_text, max_output_tokens=10)
            assert len((await bounded.initial_response()).text) < 1_000
            source = f"{long_text}; yield_control(); {long_text}; await new Promise(() => {{}})"
            cell = await rs.execute(source, yield_time_ms=0)
            await cell.initial_response()
            waited = await rs.wait(cell.cell_id, yield_time_ms=100, max_output_tokens=10)
            assert waited.live and 0 < len(waited.response.text) < 1_000
            cell = await rs.execute(f"{long_text}; await new Promise(() => {{}})", yield_time_ms=0)
            await cell.initial_response()  # at once, before the text: it is left for terminate
            ended = await rs.terminate(cell.cell_id, max_output_tokens=10)
            assert ended.response.kind == "terminated"
            assert 0 < len(ended.response.text) < 1_000
