"""A cell's delegate calls run in its execute caller's context, under the limits it was given.

Against the FakeHost: the host's side is scripted frame by frame, so which cell a call belongs
to, and when it arrives, is exact. Timing runs on Trio's autojump clock.
"""

from __future__ import annotations

import contextvars
import math
from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import (
    DelegateResponse,
    ExecuteRequest,
    OperationRequest,
    WireError,
    WireOk,
)
from codemode_trio.testing import FakeHost, open_fake_connection

from .conftest import open_session

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")


async def execute_in(
    host: FakeHost, session: cm.Session, value: str, request_id: int, cell_id: str, **kw: Any
) -> cm.StartedCell:
    """Execute from a task whose ``request_var`` is ``value``; the host starts ``cell_id``."""
    started: list[cm.StartedCell] = []

    async def caller() -> None:
        request_var.set(value)
        started.append(await session.execute("x", yield_time_ms=1, **kw))
        request_var.set(value + " (changed after execute)")

    async def host_side() -> None:
        request = await host.receive_a(OperationRequest)
        assert request.id == request_id and isinstance(request.request, ExecuteRequest)
        await host.start(request_id, cell_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host_side)
        nursery.start_soon(caller)
    return started[0]


async def replies(host: FakeHost, count: int) -> dict[int, Any]:
    """The next ``count`` delegate responses, by delegate id: a result or ``("error", text)``."""
    out: dict[int, Any] = {}
    with trio.fail_after(5):
        while len(out) < count:
            reply = await host.receive_a(DelegateResponse)
            result = reply.result
            if isinstance(result, WireError):
                out[int(reply.id)] = ("error", result.message)
            else:
                assert isinstance(result, WireOk)
                out[int(reply.id)] = result.value
    return out


def value_of(reply: Any) -> Any:
    """The JSON a tool returned, from a delegate response's result."""
    return getattr(reply, "result", reply)


async def test_each_cell_s_calls_see_the_context_of_its_own_execute_caller() -> None:
    seen: list[tuple[str, str]] = []
    tools = cm.ToolRegistry()

    @tools.function
    async def whoami(tag: str) -> str:
        seen.append((tag, request_var.get()))
        return request_var.get()

    @tools.on_notification
    async def on_note(note: cm.Notification) -> None:
        seen.append((note.text, request_var.get()))

    request_var.set("connection opener")
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await execute_in(host, session, "request A", 2, "1")
        await execute_in(host, session, "request B", 3, "2")
        await host.invoke(1, "session-1", "2", "whoami", {"tag": "b"})
        await host.invoke(2, "session-1", "1", "whoami", {"tag": "a"})
        await host.notify(3, "session-1", "1", "note a")
        await host.notify(4, "session-1", "2", "note b")
        await replies(host, 4)
    assert sorted(seen) == [
        ("a", "request A"),
        ("b", "request B"),
        ("note a", "request A"),
        ("note b", "request B"),
    ]


async def test_a_call_past_the_cell_s_budget_is_refused_and_the_cell_goes_on() -> None:
    tools = cm.ToolRegistry()

    @tools.function
    async def ping() -> str:
        return "pong"

    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await execute_in(host, session, "x", 2, "1", max_tool_calls=2)
        await execute_in(host, session, "y", 3, "2")  # no budget
        for delegate_id in (1, 2, 3):
            await host.invoke(delegate_id, "session-1", "1", "ping", call_id=f"tool-{delegate_id}")
        got = await replies(host, 3)
        refused = [reply for reply in got.values() if isinstance(reply, tuple)]
        assert refused == [
            ("error", "tools.ping: refused, this cell has made its max_tool_calls=2 tool calls")
        ]
        assert sum(1 for reply in got.values() if not isinstance(reply, tuple)) == 2
        # Notifications do not count; another cell has its own (no) budget.
        await host.notify(4, "session-1", "1", "still going")
        for delegate_id in (5, 6, 7):
            await host.invoke(delegate_id, "session-1", "2", "ping")
        got = await replies(host, 4)
        assert not any(isinstance(reply, tuple) for reply in got.values())
        # The refused cell is alive: its next call is refused as well, not the connection.
        await host.invoke(8, "session-1", "1", "ping")
        assert isinstance((await replies(host, 1))[8], tuple)
        assert conn.alive


async def test_a_budget_of_zero_refuses_the_first_call() -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, cm.ToolRegistry())
        await execute_in(host, session, "x", 2, "1", max_tool_calls=0)
        await host.invoke(1, "session-1", "1", "anything")
        reply = (await replies(host, 1))[1]
        assert reply == (
            "error",
            "tools.anything: refused, this cell has made its max_tool_calls=0 tool calls",
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "max_tool_calls must be 0 or more, not -1"),
        (1.5, "max_tool_calls must be an int or None, not float"),
        (True, "max_tool_calls must be an int or None, not bool"),
        ("3", "max_tool_calls must be an int or None, not str"),
    ],
)
async def test_a_bad_budget_is_refused_before_anything_is_sent(value: Any, message: str) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn)
        with pytest.raises(cm.UsageError, match=f"^{message}$"):
            await session.execute("x", max_tool_calls=value)
        with pytest.raises(cm.UsageError, match=f"^{message}$"):
            await session.run("x", max_tool_calls=value)
        await host.assert_quiet()
        assert conn.alive


async def test_a_call_past_its_timeout_is_rejected_with_one_line_and_others_go_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tools = cm.ToolRegistry()
    cancelled: list[str] = []

    @tools.function(timeout=2.5)
    async def slow(seconds: float) -> str:
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            cancelled.append("slow")
            raise
        return "done"

    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await execute_in(host, session, "x", 2, "1")
        start = trio.current_time()
        await host.invoke(1, "session-1", "1", "slow", {"seconds": 60})
        await host.invoke(2, "session-1", "1", "slow", {"seconds": 1}, call_id="tool-2")
        got = await replies(host, 1)
        assert value_of(got[2]) == "done"
        got = await replies(host, 1)
        assert got[1] == ("error", "tool 'slow' timed out: it ran past its timeout=2.5 s")
        assert trio.current_time() - start == pytest.approx(2.5)
        assert cancelled == ["slow"]
        assert conn.alive


async def test_calls_over_the_cap_wait_in_their_own_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tools = cm.ToolRegistry()
    running = 0
    peak = 0
    order: list[int] = []

    @tools.function(max_concurrency=2, timeout=10)
    async def work(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        order.append(n)
        await trio.sleep(1)
        running -= 1
        return n

    @tools.function
    async def quick() -> str:
        return "quick"

    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await execute_in(host, session, "x", 2, "1")
        for n in range(1, 6):
            await host.invoke(n, "session-1", "1", "work", {"n": n}, call_id=f"tool-{n}")
        # While five wait for two places, the reader is free: another call is answered at once.
        start = trio.current_time()
        await host.invoke(9, "session-1", "1", "quick", call_id="tool-9")
        assert value_of((await replies(host, 1))[9]) == "quick"
        assert trio.current_time() == start
        got = await replies(host, 5)
        assert sorted(value_of(v) for v in got.values()) == [1, 2, 3, 4, 5]
        # Two at a time, one second each: three rounds; the timeout counts running time only.
        assert trio.current_time() - start == pytest.approx(3)
        assert peak == 2
        assert sorted(order) == [1, 2, 3, 4, 5]


async def test_a_waiting_call_that_is_cancelled_leaves_the_queue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tools = cm.ToolRegistry()
    release = trio.Event()
    ran: list[int] = []

    @tools.function(max_concurrency=1)
    async def gate(n: int) -> int:
        ran.append(n)
        if n == 1:
            await release.wait()
        return n

    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await execute_in(host, session, "x", 2, "1")
        for n in (1, 2, 3):
            await host.invoke(n, "session-1", "1", "gate", {"n": n}, call_id=f"tool-{n}")
        await trio.sleep(1)
        await host.cancel_delegate(2)
        await trio.sleep(1)
        release.set()
        got = await replies(host, 2)
        assert sorted(got) == [1, 3]
        assert ran == [1, 3]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be more than 0 seconds, not 0"),
        ({"timeout": -1.5}, "timeout must be more than 0 seconds, not -1.5"),
        ({"timeout": math.nan}, "timeout must be more than 0 seconds, not nan"),
        ({"timeout": "5"}, "timeout must be a number of seconds, not str"),
        ({"timeout": True}, "timeout must be a number of seconds, not bool"),
        ({"max_concurrency": 0}, "max_concurrency must be 1 or more, not 0"),
        ({"max_concurrency": 2.0}, "max_concurrency must be an int, not float"),
    ],
)
def test_bad_tool_limits_are_usage_errors_at_registration(
    options: dict[str, Any], message: str
) -> None:
    tools = cm.ToolRegistry()

    async def tool() -> None:
        pass

    with pytest.raises(cm.UsageError, match=f"^{message}$"):
        tools.function(tool, **options)
    assert "tool" not in tools
