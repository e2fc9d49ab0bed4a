"""An MCP server's tools as a :class:`~codemode_trio.ToolRegistry`.

.. code-block:: python

    async with cm.open_mcp_tools(["weather-server", "--stdio"], name="weather") as weather:
        registry.include(weather)  # cells call tools.mcp__weather__forecast({...})

The official ``mcp`` SDK runs on anyio, so it runs on Trio as it is: the client session lives in
a task of this context manager, and each tool call is one ``tools/call`` request made from the
cell's own delegate task. Cancelling that task (the cell was terminated, the host cancelled the
call, the session shut down) cancels the request, and the SDK tells the server so. A call
returns the MCP result envelope ``{content, structuredContent, isError, _meta}`` (the keys the
server left out are absent), as Codex gives MCP results to code mode; ``isError`` rejects the
call with the server's text instead.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

import trio

from ..client.delegates import ToolError, safe_str
from ..client.registry import ToolRegistry, check_tool_limits
from ..errors import UsageError
from ..protocol.content import ToolDefinition
from ..protocol.values import JSON

if TYPE_CHECKING:
    from mcp import ClientSession, StdioServerParameters
    from mcp.types import CallToolResult, Tool

__all__ = ["open_mcp_tools"]

logger = logging.getLogger("codemode_trio.mcp")

# A server name goes into every tool name: keep it a plain identifier part.
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# What a JavaScript identifier part may hold of a tool's own name; anything else becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
# A hostile server could page its tool list forever.
_MAX_PAGES = 100

Streams = AbstractAsyncContextManager[Any]


@asynccontextmanager
async def open_mcp_tools(
    server: Sequence[str] | str | StdioServerParameters,
    *,
    name: str,
    # Each tool call's limit, handed to the registry: not a deadline of this function.
    timeout: float | None = None,  # noqa: ASYNC109
    max_concurrency: int | None = None,
    errlog: TextIO | None = None,
) -> AsyncIterator[ToolRegistry]:
    """Connect to an MCP server and yield its tools as a :class:`~codemode_trio.ToolRegistry`.

    ``server`` is the argv of a stdio server (``["python", "server.py"]``), the SDK's own
    :class:`mcp.StdioServerParameters`, or the ``http://``/``https://`` URL of a streamable-HTTP
    server. Each tool is named ``mcp__{name}__{tool}`` (characters other than letters, digits
    and ``_`` in the server's tool name become ``_``), with the server's description and input
    schema; its output schema is the result envelope around the server's output schema.
    ``timeout`` and ``max_concurrency`` apply to each tool as in
    :meth:`ToolRegistry.function`. A stdio server's stderr goes to ``errlog`` (default
    ``sys.stderr``).

    The server is stopped when the block ends; the tools, if included in another registry,
    then fail with a clear message. A server that dies fails its own calls, nothing else.
    Raises :class:`~codemode_trio.UsageError` for a bad ``name`` or ``server``, and ``ImportError``
    without the ``mcp`` SDK (``pip install 'codemode-trio[mcp]'``).
    """
    if not isinstance(name, str) or not _SERVER_NAME.fullmatch(name):
        raise UsageError(f"name must be 1 to 64 letters, digits, '_' or '-', not {name!r}")
    check_tool_limits(timeout, max_concurrency)
    streams = _streams(server, errlog)
    link = _ServerLink(name)
    async with trio.open_nursery() as nursery:
        await nursery.start(link._run, streams)
        try:
            registry = ToolRegistry()
            for tool in await link.list_tools():
                definition = _definition(name, tool)
                if definition.name in registry:
                    logger.warning(
                        "MCP server %r: tool %r is named like another once made an identifier; "
                        "left out",
                        name,
                        tool.name,
                    )
                    continue
                registry.add_tool(
                    definition,
                    link.caller(tool.name),
                    timeout=timeout,
                    max_concurrency=max_concurrency,
                )
            yield registry
        finally:
            link.stop()
            nursery.cancel_scope.cancel()


def _streams(server: object, errlog: TextIO | None) -> Callable[[], Streams]:
    """The SDK transport for ``server``, to be entered in the link's task."""
    from mcp import StdioServerParameters

    if isinstance(server, str):
        if not server.startswith(("http://", "https://")):
            raise UsageError(
                "server must be an argv list, StdioServerParameters or an http(s):// URL, "
                f"not {server!r}"
            )
        from mcp.client.streamable_http import streamable_http_client

        return lambda: streamable_http_client(server)
    if isinstance(server, StdioServerParameters):
        parameters = server
    elif isinstance(server, Sequence) and server and all(isinstance(part, str) for part in server):
        argv = [str(part) for part in server]
        parameters = StdioServerParameters(command=argv[0], args=argv[1:])
    else:
        raise UsageError(
            "server must be a non-empty argv list of strings, StdioServerParameters or an "
            f"http(s):// URL, not {server!r:.80}"
        )
    from mcp.client.stdio import stdio_client

    log = errlog if errlog is not None else sys.stderr
    return lambda: stdio_client(parameters, errlog=log)


def _definition(server: str, tool: Tool) -> ToolDefinition:
    input_schema: dict[str, Any] = dict(tool.input_schema)
    if input_schema.get("properties") is None:
        # Models expect "properties" on an object schema; some servers leave it out.
        input_schema["properties"] = {}
    output_schema = {
        "type": "object",
        "properties": {
            "content": {"type": "array", "items": {"type": "object"}},
            "structuredContent": dict(tool.output_schema) if tool.output_schema is not None else {},
            "isError": {"type": "boolean"},
            "_meta": {"type": "object"},
        },
        "required": ["content"],
        "additionalProperties": False,
    }
    return ToolDefinition(
        f"mcp__{server}__{_UNSAFE.sub('_', tool.name)}",
        tool.description or "",
        input_schema=input_schema,
        output_schema=output_schema,
    )


def envelope(result: CallToolResult) -> dict[str, JSON]:
    """The JSON of an MCP ``CallToolResult``: its wire keys, those the server left out absent."""
    out: dict[str, JSON] = {
        "content": [
            item.model_dump(by_alias=True, mode="json", exclude_none=True)
            for item in result.content
        ]
    }
    if result.structured_content is not None:
        out["structuredContent"] = result.structured_content
    if result.is_error is not None:
        out["isError"] = result.is_error
    if result.meta is not None:
        out["_meta"] = dict(result.meta)
    return out


class _ServerLink:
    """The client session of one server, run in a task; its tools call through it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._session: ClientSession | None = None
        # Why the session is unusable, once it is (the block ended, or it failed).
        self._gone: str | None = None

    async def _run(
        self, streams: Callable[[], Streams], *, task_status: trio.TaskStatus[None]
    ) -> None:
        from mcp import ClientSession

        started = False
        try:
            async with streams() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self._session = session
                task_status.started()
                started = True
                await trio.sleep_forever()
        except Exception as exc:
            if not started:
                raise
            # After the start the failure is the tools' business only: their calls say so.
            self._gone = f"MCP server {self.name!r} failed: {safe_str(exc)}"
            logger.warning("%s", self._gone)

    def stop(self) -> None:
        if self._gone is None:
            self._gone = f"MCP server {self.name!r} is closed (its open_mcp_tools block ended)"

    async def list_tools(self) -> list[Tool]:
        from mcp.types import PaginatedRequestParams

        session = self._require()
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _require(self) -> ClientSession:
        if self._gone is not None or self._session is None:
            raise ToolError(self._gone or f"MCP server {self.name!r} is not connected")
        return self._session

    def caller(self, tool: str) -> Callable[[JSON], Awaitable[JSON]]:
        """The handler of one tool: a ``tools/call`` per call, its envelope as the result."""
        import anyio
        from mcp import MCPError
        from mcp.types import TextContent

        async def call(arguments: JSON) -> JSON:
            if arguments is not None and not isinstance(arguments, dict):
                raise ToolError(f"MCP tool {tool!r} takes an object, not {arguments!r:.60}")
            session = self._require()
            try:
                result = await session.call_tool(tool, arguments)
            except MCPError as exc:
                # "Connection closed" when the server died: the message says which server.
                detail = safe_str(exc)
                raise ToolError(f"MCP server {self.name!r}, tool {tool!r}: {detail}") from None
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise ToolError(
                    self._gone or f"MCP server {self.name!r} is gone (its connection closed)"
                ) from None
            if result.is_error:
                texts = (item.text for item in result.content if isinstance(item, TextContent))
                default = f"MCP tool {tool!r} of server {self.name!r} reported an error"
                raise ToolError("\n".join(texts) or default)
            return envelope(result)

        return call
