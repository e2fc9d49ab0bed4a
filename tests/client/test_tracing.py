"""OpenTelemetry spans of cells and delegate calls, read back from the SDK's in-memory exporter.

The stdio side runs against the FakeHost (each frame scripted); the gRPC side against the real
host 0.171.0, whose tool calls carry a ``traceparent`` when its own exporter is on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import codemode_trio as cm
from codemode_trio import tracing
from codemode_trio.protocol import DelegateResponse, ExecuteRequest, OperationRequest
from codemode_trio.testing import open_fake_connection

from .conftest import open_session


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.instrument(provider)
    yield provider, exporter
    tracing.uninstrument()


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    spans = exporter.get_finished_spans()
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_cell_s_span_is_under_its_caller_s_and_its_calls_under_it(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer_provider, exporter = provider
    tracer = tracer_provider.get_tracer("app")
    tools = cm.ToolRegistry()

    @tools.function
    async def lookup(key: str) -> str:
        with tracer.start_as_current_span("app.inner"):
            return key.upper()

    @tools.function
    async def broken() -> None:
        raise cm.ToolError("no such thing")

    @tools.function
    async def stuck() -> None:
        await trio.sleep_forever()

    @tools.on_notification
    async def on_note(note: cm.Notification) -> None:
        pass

    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)

        async def host_side() -> None:
            request = await host.receive_a(OperationRequest)
            assert isinstance(request.request, ExecuteRequest)
            await host.start(request.id, "7")
            await host.invoke(1, "session-1", "7", "lookup", {"key": "a"})
            await host.invoke(2, "session-1", "7", "broken", {}, call_id="tool-2")
            await host.invoke(3, "session-1", "7", "stuck", {}, call_id="tool-3")
            await host.notify(4, "session-1", "7", "hello")
            for _ in range(3):
                await host.receive_a(DelegateResponse)
            await host.cancel_delegate(3)
            await host.initial(request.id, cm.RuntimeResponse("result", "7", ()))
            await host.cell_closed("session-1", "7")

        with tracer.start_as_current_span("app.request") as request_span:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host_side)
                response = await session.run("x")
        assert response.kind == "result"
        await trio.testing.wait_all_tasks_blocked()

    spans = by_name(exporter)
    assert sorted(spans) == [
        "app.inner",
        "app.request",
        "codemode.cell",
        "codemode.notify",
        "codemode.tool broken",
        "codemode.tool lookup",
        "codemode.tool stuck",
    ]
    cell = spans["codemode.cell"]
    assert parent_of(cell) == request_span.get_span_context().span_id
    assert cell.context.trace_id == request_span.get_span_context().trace_id
    assert dict(cell.attributes or {}) == {
        "codemode.session_id": "session-1",
        "codemode.cell_id": "7",
        "codemode.outcome": "result",
    }
    outcomes: dict[str, Any] = {}
    for name in ("codemode.tool lookup", "codemode.tool broken", "codemode.tool stuck"):
        span = spans[name]
        assert parent_of(span) == cell.context.span_id
        attributes = dict(span.attributes or {})
        assert attributes["codemode.cell_id"] == "7"
        assert attributes["codemode.tool.name"] == name.split()[-1]
        outcomes[name] = attributes["codemode.outcome"]
    assert outcomes == {
        "codemode.tool lookup": "ok",
        "codemode.tool broken": "error",
        "codemode.tool stuck": "cancelled",
    }
    assert spans["codemode.tool broken"].status.status_code is StatusCode.ERROR
    assert spans["codemode.tool broken"].status.description == "no such thing"
    assert parent_of(spans["app.inner"]) == spans["codemode.tool lookup"].context.span_id
    note = spans["codemode.notify"]
    assert parent_of(note) == cell.context.span_id
    assert dict(note.attributes or {}) == {"codemode.cell_id": "7", "codemode.outcome": "ok"}


async def test_a_cell_that_fails_and_one_never_started_end_their_spans(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    _, exporter = provider
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)

        async def host_side() -> None:
            first = await host.receive_a(OperationRequest)
            await host.start(first.id, "1")
            await host.initial(first.id, cm.RuntimeResponse("result", "1", (), error_text="boom"))
            second = await host.receive_a(OperationRequest)
            await host.reply_error(second.id, "no room")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(host_side)
            response = await session.run("x")
            assert response.error_text == "boom"
            with pytest.raises(cm.HostError):
                await session.execute("y")
    spans = exporter.get_finished_spans()
    assert [dict(span.attributes or {}).get("codemode.outcome") for span in spans] == [
        "error",
        "closed",
    ]
    assert spans[0].status.description == "boom"


async def test_tracing_is_off_until_instrumented() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.start_cell("s") is None
    assert tracing.current_traceparent() is None
    tracing.instrument(provider)
    try:
        trace = tracing.start_cell("s")
        assert trace is not None
        assert tracing.current_traceparent() is None  # no span is current here
        traceparent = trace.traceparent()
        assert traceparent is not None and traceparent.startswith("00-")
        trace.closed()
    finally:
        tracing.uninstrument()
    assert tracing.start_cell("s") is None
    assert [span.name for span in exporter.get_finished_spans()] == ["codemode.cell"]


@pytest.mark.parametrize("host_exports", [False, True], ids=["plain", "host-exporter"])
async def test_over_grpc_a_tool_span_has_the_host_s_span_as_parent_when_it_sends_one(
    host_exports: bool,
    provider: tuple[TracerProvider, InMemorySpanExporter],
    rust_host_path: Path,
) -> None:
    tracer_provider, exporter = provider
    tracer = tracer_provider.get_tracer("app")
    seen: list[str | None] = []
    tools = cm.ToolRegistry()

    @tools.function
    async def ping() -> str:
        return "pong"

    class Spy:
        """The registry, recording each call's traceparent."""

        async def invoke_tool(self, call: cm.ToolCall) -> Any:
            seen.append(call.traceparent)
            return await tools.invoke_tool(call)

        async def notify(self, note: cm.Notification) -> None:
            pass

        def cell_closed(self, cell_id: str) -> None:
            pass

        def definitions(self) -> tuple[cm.ToolDefinition, ...]:
            return tools.definitions()

    # Port 9 on loopback: nothing listens, so the host's exports fail quietly; it still traces.
    args = ["--otel-trace-exporter", "http://127.0.0.1:9/v1/traces"] if host_exports else []
    async with cm.open_host_process(rust_host_path, transport="grpc", args=args) as conn:
        with tracer.start_as_current_span("app.request"):
            async with conn.open_session(Spy()) as session:
                response = await session.run("text(await tools.ping({}))")
    assert [item.text for item in response.content_items] == ["pong"]  # type: ignore[union-attr]
    spans = by_name(exporter)
    cell, tool = spans["codemode.cell"], spans["codemode.tool ping"]
    assert parent_of(cell) == spans["app.request"].context.span_id
    assert dict(cell.attributes or {})["codemode.outcome"] == "result"
    if not host_exports:
        assert seen == [None]
        assert parent_of(tool) == cell.context.span_id
        assert not tool.links
        return
    # 0.171.0 sends its invoke_tool span's traceparent: our span is its child, linked to the cell.
    (traceparent,) = seen
    assert traceparent is not None
    _, trace_id, span_id, _ = traceparent.split("-")
    assert tool.parent is not None and tool.parent.is_remote
    assert format(tool.parent.span_id, "016x") == span_id
    assert format(tool.context.trace_id, "032x") == trace_id
    assert [link.context.span_id for link in tool.links] == [cell.context.span_id]


def test_a_malformed_traceparent_from_the_host_leaves_the_span_under_the_cell(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    _, exporter = provider
    trace = tracing.start_cell("s")
    assert trace is not None
    with trace.start_call("codemode.tool t", "1", "00-not-a-trace-01", "t"):
        pass
    trace.closed()
    spans = by_name(exporter)
    assert parent_of(spans["codemode.tool t"]) == spans["codemode.cell"].context.span_id
