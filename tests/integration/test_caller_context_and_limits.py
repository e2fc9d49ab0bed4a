"""The caller's context and the builder's limits, on every transport against real hosts.

Each cell's tool calls and notifications must see the :mod:`contextvars` of the task that ran
the cell, however the connection's reader started them; the tool-call budget, the per-tool
timeout and the concurrency cap must hold as they do against the FakeHost.
"""

from __future__ import annotations

import contextvars

import pytest
import trio

import codemode_trio as cm

from .conftest import OpenEndpoint

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")


def texts(response: cm.RuntimeResponse) -> list[str]:
    return [item.text for item in response.content_items if isinstance(item, cm.TextItem)]


async def test_two_concurrent_runs_each_see_their_own_context(endpoint: OpenEndpoint) -> None:
    tools = cm.ToolRegistry()
    notes: list[tuple[str, str]] = []
    both_called = trio.Event()
    both_noted = trio.Event()
    calls = 0

    @tools.function
    async def whoami() -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            both_called.set()
        # Both cells are in a call at once: neither context can be the other's leftover.
        with trio.fail_after(10):
            await both_called.wait()
        return request_var.get()

    @tools.on_notification
    async def on_note(note: cm.Notification) -> None:
        notes.append((note.text, request_var.get()))
        if len(notes) == 2:
            both_noted.set()

    source = """
        notify("start");
        const a = await tools.whoami({});
        const b = await tools.whoami({});
        text(a + "," + b);
    """
    results: dict[str, list[str]] = {}
    request_var.set("connection opener")
    async with endpoint() as ep, ep.open_session(tools) as session:

        async def run_as(value: str) -> None:
            request_var.set(value)
            results[value] = texts(await session.run(source))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_as, "request A")
            nursery.start_soon(run_as, "request B")
        # Notifications are not awaited by the cell on every host: let them arrive.
        with trio.fail_after(10):
            await both_noted.wait()
    assert results == {
        "request A": ["request A,request A"],
        "request B": ["request B,request B"],
    }
    assert sorted(notes) == [("start", "request A"), ("start", "request B")]


async def test_the_budget_the_timeout_and_the_cap_hold_on_a_real_host(
    endpoint: OpenEndpoint,
) -> None:
    tools = cm.ToolRegistry()
    running = 0
    peak = 0

    @tools.function(max_concurrency=2)
    async def capped() -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.05)
        running -= 1
        return peak

    @tools.function(timeout=0.2)
    async def slow() -> str:
        await trio.sleep(30)
        return "never"

    source = """
        const got = await Promise.all([1, 2, 3, 4].map(() => tools.capped({})));
        text("capped " + Math.max(...got));
        const why = (e) => String(e instanceof Error ? e.message : e);
        try { await tools.slow({}); } catch (e) { text(why(e)); }
        try { await tools.capped({}); } catch (e) { text(why(e)); }
        text("still running");
    """
    async with endpoint() as ep, ep.open_session(tools) as session:
        with pytest.raises(cm.UsageError, match="^max_tool_calls must be 0 or more, not -1$"):
            await session.run(source, max_tool_calls=-1)
        with trio.fail_after(20):
            response = await session.run(source, max_tool_calls=5)
        assert not ep.failures()
        # The next cell has its own budget.
        again = await session.run("text(String(await tools.capped({})))", max_tool_calls=1)
    assert response.kind == "result" and response.error_text is None, response
    assert texts(response) == [
        "capped 2",
        "tool 'slow' timed out: it ran past its timeout=0.2 s",
        "tools.capped: refused, this cell has made its max_tool_calls=5 tool calls",
        "still running",
    ]
    assert again.error_text is None and len(texts(again)) == 1
