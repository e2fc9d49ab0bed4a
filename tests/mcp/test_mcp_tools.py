"""MCP servers as tools: a real MCP server subprocess (weather_server.py), real hosts, real V8.

The server is written with the SDK's own MCPServer; the client is ``open_mcp_tools``. Cells run
on the host 0.171.0 and on ``codemode-trio serve``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import codemode_trio as cm

SERVER = [sys.executable, str(Path(__file__).with_name("weather_server.py"))]


class Marks:
    """The server's stderr, through a pipe: the marks its tools print there."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.errlog = os.fdopen(write_fd, "w")
        self._stream = trio.lowlevel.FdStream(read_fd)
        self._seen = b""

    async def expect(self, what: str) -> None:
        """Wait (at most 10 s) for the server to print ``mark: what``."""
        line = f"mark: {what}\n".encode()
        with trio.fail_after(10):
            while line not in self._seen:
                chunk = await self._stream.receive_some()
                assert chunk, "the server's stderr closed"
                self._seen += chunk

    async def aclose(self) -> None:
        self.errlog.close()
        await self._stream.aclose()


@pytest.fixture
async def marks() -> AsyncIterator[Marks]:
    pipe = Marks()
    yield pipe
    await pipe.aclose()


@pytest.fixture(params=["rust-0.171.0", "serve"])
def host_path(request: pytest.FixtureRequest, rust_host_path: Path, serve_host_path: Path) -> Path:
    return rust_host_path if request.param == "rust-0.171.0" else serve_host_path


def texts(response: cm.RuntimeResponse) -> list[str]:
    return [item.text for item in response.content_items if isinstance(item, cm.TextItem)]


async def test_the_server_s_tools_are_listed_with_its_descriptions_and_schemas() -> None:
    async with cm.open_mcp_tools(SERVER, name="weather") as weather:
        tools = {tool.name: tool for tool in weather.definitions()}
    assert sorted(tools) == [
        "mcp__weather__die",
        "mcp__weather__forecast",
        "mcp__weather__get_map",  # "get-map" on the server: made an identifier
        "mcp__weather__refuse",
        "mcp__weather__slow",
    ]
    forecast = tools["mcp__weather__forecast"]
    # The server's description, then the declaration Codex renders for an MCP tool.
    assert forecast.description == (
        "The forecast for a city\n\nexec tool declaration:\n```ts\n"
        "declare const tools: { mcp__weather__forecast(args: { city: string; }): "
        "Promise<CallToolResult<{ celsius: number; city: string; }>>; };\n```"
    )
    assert forecast.kind == "function"
    assert forecast.input_schema["required"] == ["city"]  # type: ignore[index]
    envelope = forecast.output_schema
    assert isinstance(envelope, dict)
    assert envelope["required"] == ["content"]
    assert envelope["additionalProperties"] is False
    assert sorted(envelope["properties"]) == ["_meta", "content", "isError", "structuredContent"]
    # The server's own output schema is that of structuredContent.
    assert envelope["properties"]["structuredContent"]["required"] == ["city", "celsius"]
    # No output schema from the server: any structured content.
    assert tools["mcp__weather__get_map"].output_schema["properties"]["structuredContent"] == {}  # type: ignore[index]
    # "properties" is always there, even for a tool without parameters.
    assert tools["mcp__weather__die"].input_schema["properties"] == {}  # type: ignore[index]


async def test_cells_call_mcp_tools_and_get_the_result_envelope(
    host_path: Path,
) -> None:
    tools = cm.ToolRegistry()
    source = """
        const f = await tools.mcp__weather__forecast({city: "Oslo"});
        text(JSON.stringify(f));
        const m = await tools.mcp__weather__get_map({city: "Oslo"});
        text(m.content[0].text);
        image(m.content[1]);
        try {
            await tools.mcp__weather__refuse({reason: "no"});
            text("not rejected");
        } catch (e) {
            text("rejected: " + (e instanceof Error ? e.message : String(e)));
        }
    """
    async with cm.open_mcp_tools(SERVER, name="weather") as weather:
        tools.include(weather)
        async with cm.open_host_process(host_path) as conn, conn.open_session(tools) as session:
            response = await session.run(source)
    assert response.kind == "result", response
    assert response.error_text is None
    out = texts(response)
    assert json.loads(out[0]) == {
        "content": [{"type": "text", "text": '{\n  "city": "Oslo",\n  "celsius": 21.5\n}'}],
        "structuredContent": {"city": "Oslo", "celsius": 21.5},
        "isError": False,
    }
    assert out[1] == "map of Oslo"
    assert out[2] == "rejected: refused: no"
    images = [item for item in response.content_items if isinstance(item, cm.ImageItem)]
    assert len(images) == 1
    assert images[0].image_url.startswith("data:image/png;base64,iVBORw0KGgo")


@pytest.mark.parametrize("how", ["terminate", "shutdown"])
async def test_ending_the_cell_cancels_the_request_on_the_server(
    how: str, rust_host_path: Path, marks: Marks
) -> None:
    async with cm.open_mcp_tools(SERVER, name="weather", errlog=marks.errlog) as weather:
        async with cm.open_host_process(rust_host_path) as conn:
            async with conn.open_session(weather) as session:
                cell = await session.execute(
                    "text(await tools.mcp__weather__slow({seconds: 60}))", yield_time_ms=100
                )
                await marks.expect("slow-started")
                if how == "terminate":
                    await session.terminate(cell.cell_id)
            # Left the session block: a shutdown, for the cell still running.
            await marks.expect("slow-cancelled")
            assert conn.alive
        # The server is still serving after the cancellation.
        result = await weather.invoke_tool(
            cm.ToolCall("x", "tool-1", "mcp__weather__forecast", input={"city": "Rome"})
        )
        assert result["structuredContent"] == {"city": "Rome", "celsius": 21.5}  # type: ignore[index]


async def test_a_server_that_dies_fails_its_own_calls_and_nothing_else(
    rust_host_path: Path,
) -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def local() -> str:
        return "still here"

    source = """
        for (const call of [
            () => tools.mcp__weather__die({}),
            () => tools.mcp__weather__forecast({city: "Oslo"}),
            () => tools.local({}),
        ]) {
            try { text(JSON.stringify(await call())); }
            catch (e) { text("rejected: " + (e instanceof Error ? e.message : String(e))); }
        }
    """
    async with cm.open_mcp_tools(SERVER, name="weather") as weather:
        tools.include(weather)
        async with (
            cm.open_host_process(rust_host_path) as conn,
            conn.open_session(tools) as session,
        ):
            response = await session.run(source)
            assert conn.alive
            again = await session.run("text(await tools.local({}))")
    assert response.kind == "result" and response.error_text is None, response
    assert texts(response) == [
        "rejected: MCP server 'weather', tool 'die': Connection closed",
        "rejected: MCP server 'weather', tool 'forecast': Connection closed",
        '"still here"',
    ]
    assert texts(again) == ["still here"]


async def test_tools_outliving_their_block_say_so() -> None:
    tools = cm.ToolRegistry()
    async with cm.open_mcp_tools(SERVER, name="weather") as weather:
        tools.include(weather)
    with pytest.raises(cm.ToolError, match=r"^MCP server 'weather' is closed"):
        await tools.invoke_tool(cm.ToolCall("x", "tool-1", "mcp__weather__forecast", input={}))


async def test_tool_limits_apply_to_mcp_tools(marks: Marks) -> None:
    async with cm.open_mcp_tools(
        SERVER, name="weather", timeout=0.5, errlog=marks.errlog
    ) as weather:
        with pytest.raises(cm.ToolError) as info:
            await weather.invoke_tool(
                cm.ToolCall("x", "tool-1", "mcp__weather__slow", input={"seconds": 60})
            )
        assert str(info.value) == (
            "tool 'mcp__weather__slow' timed out: it ran past its timeout=0.5 s"
        )
        await marks.expect("slow-cancelled")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cm.open_mcp_tools(["x"], name="we ather"), "name must be 1 to 64"),
        (lambda: cm.open_mcp_tools(["x"], name=""), "name must be 1 to 64"),
        (lambda: cm.open_mcp_tools([], name="w"), "server must be a non-empty argv list"),
        (lambda: cm.open_mcp_tools("ls -l", name="w"), "server must be an argv list"),
        (lambda: cm.open_mcp_tools([b"x"], name="w"), "server must be a non-empty argv list"),
        (
            lambda: cm.open_mcp_tools(["x"], name="w", max_concurrency=0),
            "max_concurrency must be 1 or more",
        ),
    ],
)
async def test_mistakes_are_usage_errors_before_any_server_starts(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(cm.UsageError, match=f"^{message}"):
        async with call():
            pass


def test_importing_the_package_imports_neither_mcp_nor_opentelemetry() -> None:
    probe = """
import sys
import codemode_trio as cm
import codemode_trio.tracing
import codemode_trio.mcp
for name in ("ToolRegistry", "Session", "GrpcSession", "open_mcp_tools", "open_connection"):
    getattr(cm, name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "opentelemetry", "anyio"))
print(loaded)
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


# The SDK's HTTP client (httpx2) leaves its response iterators to the garbage collector, which
# Trio reports as ResourceWarnings of async generators: the SDK's quirk, not a failed call.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_streamable_http_server_is_opened_by_its_url() -> None:
    with socket.socket() as probe:  # a free loopback port for the server
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await trio.lowlevel.open_process(
        [*SERVER, "--http", str(port)], stderr=subprocess.PIPE
    )
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(30):
            while b"Uvicorn running on" not in seen:
                chunk = await process.stderr.receive_some()
                assert chunk, seen
                seen += chunk
        url = f"http://127.0.0.1:{port}/mcp"
        async with cm.open_mcp_tools(url, name="weather") as weather:
            result = await weather.invoke_tool(
                cm.ToolCall("x", "tool-1", "mcp__weather__forecast", input={"city": "Lima"})
            )
        assert result["structuredContent"] == {"city": "Lima", "celsius": 21.5}  # type: ignore[index]
    finally:
        process.kill()
        with trio.move_on_after(10, shield=True):
            await process.wait()
