"""A scripted stand-in for the V8 runtime, and a client connected to the host shell over memory.

A "script" here is a Python coroutine function ``(hooks, tools) -> error_text | None``; the
cell's source names it. The host shell cannot tell it from JavaScript: it sees the same hook
calls, the same completion and the same cancellation on terminate.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.host.runtime import CellHooks, CellOutcome
from codemode_trio.host.server import serve_connection
from codemode_trio.protocol import ToolDefinition

Script = Callable[[CellHooks, Sequence[ToolDefinition]], Awaitable[str | None]]


class ScriptRuntime:
    """Runs the registered Python script named by a cell's source."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.heap_limits: list[int | None] = []
        self.cancelled: list[str] = []

    def script(self, function: Script) -> Script:
        self.scripts[function.__name__] = function
        return function

    async def run(
        self,
        source: str,
        tools: Sequence[ToolDefinition],
        hooks: CellHooks,
        *,
        max_heap_size_bytes: int | None,
    ) -> CellOutcome:
        self.heap_limits.append(max_heap_size_bytes)
        try:
            return CellOutcome(await self.scripts[source](hooks, tools))
        except trio.Cancelled:
            self.cancelled.append(source)
            raise


class Served:
    """The host side of a test: its runtime, its stderr and its exit status."""

    def __init__(self) -> None:
        self.runtime = ScriptRuntime()
        self.stderr = io.StringIO()
        self.status: int | None = None
        self.stopped = trio.Event()


@pytest.fixture
def served() -> Served:
    return Served()


@asynccontextmanager
async def connect(served: Served, **kwargs: Any) -> AsyncIterator[cm.Connection]:
    """A client Connection to the host shell over an in-memory stream pair."""
    client_stream, host_stream = trio.testing.memory_stream_pair()

    async def host() -> None:
        served.status = await serve_connection(host_stream, served.runtime, stderr=served.stderr)
        served.stopped.set()
        await host_stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        async with cm.open_connection(client_stream, **kwargs) as conn:
            yield conn
        with trio.fail_after(5):
            await served.stopped.wait()
