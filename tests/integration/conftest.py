"""Fixtures for tests against the real ``codex-code-mode-host``.

These tests are part of the normal suite: if the host binary is missing they FAIL with the
command that installs it (``codemode-trio host fetch``), they are never skipped.
"""

from __future__ import annotations

import functools
import math
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest
import trio
from trio_util import AsyncValue

import codemode_trio as cm
from codemode_trio.grpc import codemode_pb2 as pb
from codemode_trio.grpc.calls import GrpcChannel
from codemode_trio.transport.process import HostProcess, spawn_host


class Recorder:
    """A ToolRegistry plus a record of everything the host asked of it."""

    def __init__(self) -> None:
        self.tools = cm.ToolRegistry()
        self.notes: list[cm.Notification] = []
        self.closed: list[str] = []
        self.cancelled: list[str] = []
        # Bumped on every cell_closed / cancelled tool call, so tests can wait without polling.
        self.changes = AsyncValue(0)
        self.started_send, self.started = trio.open_memory_channel[Any](math.inf)
        self.in_flight = 0
        self.max_in_flight = 0
        tools = self.tools

        @tools.function(description="Echo the input back")
        async def echo(value: Any = None) -> Any:
            return {"echo": value}

        @tools.function(description="Add two integers")
        async def add(a: int, b: int) -> int:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await trio.sleep(0.05)  # overlap concurrent calls
            self.in_flight -= 1
            return a + b

        @tools.function(description="Never returns until cancelled")
        async def hang(tag: str = "") -> None:
            self.started_send.send_nowait(tag)
            try:
                await trio.sleep_forever()
            finally:
                self.cancelled.append(tag)
                self.changes.value += 1

        @tools.function(description="Fails")
        async def explode(message: str) -> None:
            raise cm.ToolError(message)

        @tools.on_notification
        async def on_note(note: cm.Notification) -> None:
            self.notes.append(note)

        @tools.on_cell_closed
        def on_closed(cell_id: str) -> None:
            self.closed.append(cell_id)
            self.changes.value += 1

    async def wait_for(self, predicate: Any) -> None:
        """Wait (at most 5 s) until ``predicate(self)`` holds after some change."""
        with trio.fail_after(5):
            await self.changes.wait_value(lambda _: predicate(self))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@asynccontextmanager
async def grpc_host(host_path: Path) -> AsyncIterator[tuple[HostProcess, str]]:
    """A host listening on a loopback port; yields it and its ``grpc://`` target."""
    async with spawn_host(host_path, args=["--listen", "grpc://127.0.0.1:0"]) as host:
        line = b""
        while not line.endswith(b"\n"):
            chunk = await host.stream.receive_some(1)
            assert chunk, "the host exited before printing its address"
            line += chunk
        url = line.decode().strip()
        assert url.startswith("http://127.0.0.1:")  # the host's first stdout line
        yield host, url.replace("http://", "grpc://", 1)


@asynccontextmanager
async def raw_lease(channel: GrpcChannel) -> AsyncIterator[str]:
    """Open a session on a raw channel, holding only its lease; leaving cancels the lease."""
    async with channel.server_stream(
        "OpenSession", pb.OpenSessionRequest(), pb.SessionEvent
    ) as events:
        first = await events.receive()
        assert first is not None and first.WhichOneof("event") == "opened"
        yield first.opened.session_id


#: Every way our client reaches a host, for the scenarios whose behaviour must not depend on it.
ENDPOINTS = ("rust-0.171.0", "serve", "rust-0.171.0 grpc", "rust-0.171.0 grpc+stdio")


class Connect(Protocol):
    """Open a connection to the endpoint under test (``connect(limits=...)`` and the like)."""

    def __call__(self, **options: Any) -> AbstractAsyncContextManager[Any]: ...


@pytest.fixture(params=ENDPOINTS)
def connect(request: pytest.FixtureRequest, rust_host_path: Path, serve_host_path: Path) -> Connect:
    """Each endpoint in turn: the stdio protocol to 0.171.0 and to ``codemode-trio serve``, and
    the host's gRPC API (``grpc://`` on a loopback port, and ``grpc+stdio://``) to 0.171.0."""
    endpoint: str = request.param
    if endpoint == "serve":
        return functools.partial(cm.open_host_process, serve_host_path)
    if endpoint.endswith("grpc+stdio"):
        return functools.partial(cm.open_host_process, rust_host_path, transport="grpc")
    if endpoint.endswith("grpc"):

        @asynccontextmanager
        async def over_tcp(**options: Any) -> AsyncIterator[cm.GrpcConnection]:
            async with (
                grpc_host(rust_host_path) as (host, target),
                cm.open_grpc_connection(target, **options) as conn,
            ):
                conn.process = host.process  # as open_host_process sets it
                yield conn

        return over_tcp
    return functools.partial(cm.open_host_process, rust_host_path)
