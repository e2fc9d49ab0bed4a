"""Bad caller arguments are refused locally with UsageError: nothing sent, connection alive.

The host exits (killing every session) over frames these would produce, so each is refused at
the public boundary, once, with a message naming the argument.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import codemode_trio as cm
from codemode_trio.testing import open_fake_connection

from .conftest import open_session, start_cell


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


CASES: list[tuple[str, Callable[[cm.Session], Awaitable[object]], str]] = [
    (
        "unknown tool kind",
        lambda s: s.execute("x", tools=[cm.ToolDefinition("t", kind="mcp")]),
        "tools[0].kind must be 'function' or 'freeform', not 'mcp'",
    ),
    (
        "non-string description",
        lambda s: s.execute("x", tools=[cm.ToolDefinition("t", description=None)]),  # type: ignore[arg-type]
        "tools[0].description must be a string, not None",
    ),
    (
        "non-string name",
        lambda s: s.execute("x", tools=[cm.ToolDefinition(1)]),  # type: ignore[arg-type]
        "tools[0].name must be a string, not 1",
    ),
    (
        "schema deeper than the host's limit",
        lambda s: s.execute("x", tools=[cm.ToolDefinition("t", input_schema=deep_schema(70))]),
        "tools[0].input_schema nests deeper than",
    ),
    (
        "not a tool definition",
        lambda s: s.execute("x", tools=[{"name": "t"}]),  # type: ignore[list-item]
        "tools[0] must be a ToolDefinition, not {'name': 't'}",
    ),
    ("no source", lambda s: s.execute(None), "source must be a string, not None"),  # type: ignore[arg-type]
    ("bytes source", lambda s: s.execute(b"x"), "source must be a string, not b'x'"),  # type: ignore[arg-type]
    (
        "non-string tool_call_id",
        lambda s: s.execute("x", tool_call_id=5),  # type: ignore[arg-type]
        "tool_call_id must be a string, not 5",
    ),
    ("wait on a numeric cell", lambda s: s.wait(1), "cell_id must be a string, not 1"),  # type: ignore[arg-type]
    (
        "terminate a numeric cell",
        lambda s: s.terminate(1),  # type: ignore[arg-type]
        "cell_id must be a string, not 1",
    ),
    (
        "wait without a yield time",
        lambda s: s.wait("1", yield_time_ms=None),  # type: ignore[arg-type]
        "yield_time_ms must be an integer from 0 to 2**64-1, not None",
    ),
    (
        "negative yield time",
        lambda s: s.execute("x", yield_time_ms=-1),
        "yield_time_ms must be an integer from 0 to 2**64-1, not -1",
    ),
]


@pytest.mark.parametrize(("what", "call", "message"), CASES, ids=[case[0] for case in CASES])
async def test_bad_arguments_are_refused_before_anything_is_sent(
    what: str, call: Callable[[cm.Session], Awaitable[object]], message: str
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        await start_cell(host, session, 2, "1")
        with pytest.raises(cm.UsageError) as info:
            await call(session)
        assert str(info.value).startswith(message), str(info.value)
        await host.assert_quiet()
        assert conn.alive
        # The connection carries on: the next request gets the next id.
        await start_cell(host, session, 3, "2")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"session_id": 5}, "session_id must be a string, not 5"),
        ({"session_id": " "}, "session_id: identifier must not be empty"),
        ({"limits": {"max_yield_time_ms": 5}}, "limits must be a CellLimits"),
        ({"delegate": object()}, "delegate must have async invoke_tool(call)"),
        ({"tools": cm.ToolRegistry()}, "open_session() takes the session's delegate as delegate="),
    ],
)
async def test_bad_open_session_arguments_are_refused_locally(
    kwargs: dict[str, Any], message: str
) -> None:
    async with open_fake_connection() as (host, conn):
        with pytest.raises(cm.UsageError) as info:
            async with conn.open_session(**kwargs):
                pass
        assert str(info.value).startswith(message), str(info.value)
        await host.assert_quiet()
        assert conn.alive
