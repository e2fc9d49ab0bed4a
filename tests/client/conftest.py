"""Shared delegates and helpers for the driver tests (the Python side of the seed harness)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import pytest
import trio

import codemode_trio as cm
from codemode_trio.protocol import ExecuteRequest, OperationRequest
from codemode_trio.testing import FakeHost


class RecordingDelegate:
    """Counts calls; tool calls wait for cancellation, like the seed's RecordingDelegate."""

    def __init__(self) -> None:
        self.closed_cells: list[str] = []
        self.invocations = 0
        self.notifications = 0
        self.notifications_by_cell: dict[str, int] = {}

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        self.invocations += 1
        await trio.sleep_forever()

    async def notify(self, note: cm.Notification) -> None:
        self.notifications += 1
        self.notifications_by_cell[note.cell_id] = (
            self.notifications_by_cell.get(note.cell_id, 0) + 1
        )

    def cell_closed(self, cell_id: str) -> None:
        self.closed_cells.append(cell_id)


class HeldDelegate:
    """A tool call that reports Started, then Cancelled, then holds until released.

    Its cleanup is shielded (with a deadline), so it keeps running after the driver revoked
    it: exactly what the driver must not wait for.
    """

    def __init__(self) -> None:
        self.events_send, self.events = trio.open_memory_channel[Any](math.inf)
        self.release = trio.Event()

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        self.events_send.send_nowait("started")
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.events_send.send_nowait("cancelled")
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 600):
                await self.release.wait()
            self.events_send.send_nowait("finished")
            raise

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        self.events_send.send_nowait(("cell_closed", cell_id))

    async def next_event(self) -> Any:
        with trio.fail_after(1):
            return await self.events.receive()

    def pending_event(self) -> Any:
        try:
            return self.events.receive_nowait()
        except trio.WouldBlock:
            return None


async def open_session(
    host: FakeHost, conn: cm.Connection, delegate: Any = None, session_id: str = "session-1"
) -> cm.Session:
    """Open a session (request 1 on a fresh connection), the host answering ready."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(host.answer_open)
        session = await conn.start_session(delegate, session_id=session_id)
    return session


async def start_cell(
    host: FakeHost, session: cm.Session, request_id: int, cell_id: str
) -> cm.StartedCell:
    """Execute a never-ending cell; the host answers ``execution/started`` with ``cell_id``."""

    async def host_side() -> None:
        request = await host.receive_a(OperationRequest)
        assert request.id == request_id
        assert isinstance(request.request, ExecuteRequest)
        await host.start(request_id, cell_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host_side)
        cell = await session.execute("await new Promise(() => {})", yield_time_ms=1)
    assert cell.cell_id == cell_id
    return cell


async def execute_then_cancel(host: FakeHost, session: cm.Session, request_id: int) -> None:
    """Start an execute and cancel its caller once the execute frame is on the wire."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.execute, "await new Promise(() => {})")
            assert (await host.receive_a(OperationRequest)).id == request_id
            scope.cancel()


async def wait_then_cancel(
    host: FakeHost, session: cm.Session, cell_id: str, request_id: int
) -> None:
    """Start a long wait and cancel its caller once the wait frame is on the wire."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(session.wait, cell_id, yield_time_ms=60_000))
            assert (await host.receive_a(OperationRequest)).id == request_id
            scope.cancel()


async def assert_connection_stopped(host: FakeHost) -> None:
    """The connection's tasks stopped: the client closed its stream (the host reads EOF)."""
    with trio.fail_after(1):
        while True:
            try:
                await host.receive()
            except trio.EndOfChannel:
                return


def yielded(cell_id: str) -> cm.RuntimeResponse:
    return cm.RuntimeResponse("yielded", cell_id, (), code_mode_host_duration_ns=0)


def terminated(cell_id: str) -> cm.RuntimeResponse:
    return cm.RuntimeResponse("terminated", cell_id, (), code_mode_host_duration_ns=0)


@pytest.fixture
def recording() -> RecordingDelegate:
    return RecordingDelegate()


@pytest.fixture
def held() -> HeldDelegate:
    return HeldDelegate()


class FailingStream(trio.abc.Stream):
    """A client stream whose next read fails with ``error`` once ``armed`` is set."""

    def __init__(self, inner: trio.abc.Stream, error: BaseException) -> None:
        self.inner = inner
        self.error = error
        self.armed = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.armed.is_set():
            raise self.error
        data = await self.inner.receive_some(max_bytes)
        if self.armed.is_set():
            raise self.error
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()
