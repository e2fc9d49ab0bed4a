"""The public session API, the same scenarios on every transport against real hosts.

Each test takes ``endpoint`` (tests/integration/conftest.py): stdio to 0.171.0 and to
``codemode-trio serve``, 0.171.0's gRPC API over ``grpc://`` and ``grpc+stdio://``, ``serve``
over a WebSocket with one lane and with two, a reconnecting session, and a pool of hosts. The
test code only uses :class:`~codemode_trio.SessionAPI`, as an application that switches
transport would. The delegate contract holds on each: every cell is closed exactly once,
whether it ended with a result, a terminate, its session's shutdown or a connection failure.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm

from .conftest import Endpoint, OpenEndpoint, Recorder

HANG = "await tools.hang({tag: 'pending'})"
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHgg"
    "J/PchI7wAAAABJRU5ErkJggg=="
)


def closed_once(recorder: Recorder, *cell_ids: str) -> bool:
    """Whether exactly ``cell_ids`` were closed, each once."""
    return Counter(recorder.closed) == Counter(cell_ids)


async def settle(endpoint: Endpoint, recorder: Recorder, *cell_ids: str) -> None:
    """Wait until exactly ``cell_ids`` are closed, then check no delegate call is left."""
    await recorder.wait_for(lambda r: closed_once(r, *cell_ids))
    await trio.testing.wait_all_tasks_blocked()  # revoked calls finish in their own tasks
    assert endpoint.active_delegates() == 0


async def test_tools_run_concurrently_and_the_cell_closes_after_its_result(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            result = await s.run(
                "const rs = await Promise.all([1, 2, 3, 4].map(i => tools.add({a: i, b: 10})));"
                "text(rs.join(','));"
            )
            assert (result.kind, result.error_text, result.text) == ("result", None, "11,12,13,14")
            assert recorder.max_in_flight == 4  # all four calls overlapped
            assert result.host_duration_ns is not None and result.host_duration_ns > 0
            echoed = await s.run("text(JSON.stringify(await tools.echo({value: [1, 'x']})))")
            assert echoed.text == '{"echo":[1,"x"]}'
            assert not ep.failures()


async def test_notifications_reach_the_delegate_in_order(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            cell = await s.execute("notify('one'); notify(2); text('done')", tool_call_id="call-7")
            assert (await cell.initial_response()).text == "done"
            await recorder.wait_for(lambda r: len(r.notes) == 2)
    assert [(n.text, n.call_id, n.cell_id) for n in recorder.notes] == [
        ("one", "call-7", cell.cell_id),
        ("2", "call-7", cell.cell_id),
    ]


async def test_yield_wait_and_terminate(endpoint: OpenEndpoint, recorder: Recorder) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            cell = await s.execute(
                "text('first'); yield_control();"
                "await new Promise(r => setTimeout(r, 100)); text('second');"
                "await new Promise(() => {});",
            )
            first = await cell.initial_response()
            assert (first.kind, first.text, first.cell_id) == ("yielded", "first", cell.cell_id)
            outcome = await s.wait(cell.cell_id, yield_time_ms=300)
            assert outcome.live
            assert (outcome.response.kind, outcome.response.text) == ("yielded", "second")
            terminated = await s.terminate(cell.cell_id)
            assert terminated.live and terminated.response.kind == "terminated"
            missing = await s.wait(cell.cell_id, yield_time_ms=0)
            assert not missing.live
            assert missing.response.error_text == f"exec cell {cell.cell_id} not found"
            await settle(ep, recorder, cell.cell_id)


async def test_terminate_with_a_pending_tool_call_revokes_the_delegate(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            cell = await s.execute(HANG, yield_time_ms=60_000)
            assert await recorder.started.receive() == "pending"
            outcome = await s.terminate(cell.cell_id)
            assert outcome.live and outcome.response.kind == "terminated"
            assert (await cell.initial_response()).kind == "terminated"
            await settle(ep, recorder, cell.cell_id)
            await recorder.wait_for(lambda r: r.cancelled == ["pending"])
            assert (await s.run("text('after')")).text == "after"
            assert not ep.failures()


async def test_request_yield_answers_the_pending_observation_now(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            cell = await s.execute(f"text('x'); {HANG}", yield_time_ms=60_000)
            await recorder.started.receive()  # the text is out, the cell waits on its tool
            s.request_yield(cell.cell_id)
            first = await cell.initial_response()
            assert (first.kind, first.text) == ("yielded", "x")
            await s.terminate(cell.cell_id)
            await settle(ep, recorder, cell.cell_id)
            assert not ep.failures()


async def test_images_come_back_as_image_items(endpoint: OpenEndpoint) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session() as s:
            result = await s.run(f"image('{PNG}'); image({{image_url: '{PNG}', detail: 'low'}})")
            assert not ep.failures()
    assert result.content_items == (
        cm.ImageItem(PNG, "high"),  # the runtime fills the default detail
        cm.ImageItem(PNG, "low"),
    )
    assert result.text == ""


async def test_a_cancelled_caller_leaves_nothing_running(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            # A cancelled wait keeps the output for the next one.
            cell = await s.execute(
                "text('a'); await new Promise(r => setTimeout(r, 200)); text('b');"
                "await new Promise(() => {})",
                yield_time_ms=0,
            )
            await cell.initial_response()
            with trio.move_on_after(0.05):
                await s.wait(cell.cell_id, yield_time_ms=10_000)
            outcome = await s.wait(cell.cell_id, yield_time_ms=400)
            assert outcome.live and outcome.response.text in ("a", "b", "a\nb")
            await s.terminate(cell.cell_id)
            # A cancelled run terminates its cell, whose pending tool call is revoked.
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(s.run, HANG)
                    await recorder.started.receive()
                    scope.cancel()
            await recorder.wait_for(lambda r: r.cancelled == ["pending"] and len(r.closed) == 2)
            await settle(ep, recorder, *recorder.closed)
            assert cell.cell_id in recorder.closed
            assert (await s.run("text('after')")).text == "after"


async def test_many_sessions_at_once(endpoint: OpenEndpoint) -> None:
    results: dict[int, list[str]] = {}

    async def worker(ep: Endpoint, n: int) -> None:
        tools = cm.ToolRegistry()

        @tools.function(description="which session")
        async def whoami() -> int:
            await trio.sleep(0.01)
            return n

        async with ep.open_session(tools) as s:
            outs = []
            for i in range(3):
                r = await s.run(f"store('k', {i}); text((await tools.whoami()) + ':' + load('k'))")
                outs.append(r.text)
            results[n] = outs

    with trio.fail_after(60):
        async with endpoint() as ep:
            async with trio.open_nursery() as nursery:
                for n in range(6):
                    nursery.start_soon(worker, ep, n)
            assert not ep.failures()
    assert results == {n: [f"{n}:{i}" for i in range(3)] for n in range(6)}


async def test_every_cell_is_closed_once_after_its_result(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    # Over gRPC the host's cell_closed may overtake the Execute stream's start of a cell that
    # ends at once; 150 results make a lost close all but certain to show.
    ids = []
    with trio.fail_after(60):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            for i in range(150):
                # Results, and every third one a script error: both end the cell.
                result = await s.run(f"text({i})" if i % 3 else f"throw new Error('e{i}')")
                if i % 3:
                    assert (result.text, result.error_text) == (str(i), None)
                else:
                    assert (result.error_text or "").startswith(f"Error: e{i}")
                ids.append(result.cell_id)
        # A closed session has reported every cell of it closed.
        assert len(set(ids)) == 150
        assert closed_once(recorder, *ids)
        assert not ep.failures()


async def test_session_limits_are_the_hosts(endpoint: OpenEndpoint) -> None:
    limits = cm.CellLimits(max_yield_time_ms=300)
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(limits=limits) as s:
            cell = await s.execute("await new Promise(() => {})", yield_time_ms=20_000)
            start = trio.current_time()
            assert (await cell.initial_response()).kind == "yielded"
            assert trio.current_time() - start < 5  # capped at 0.3 s instead of 20 s
            await s.terminate(cell.cell_id)
            assert not ep.failures()


async def test_script_and_tool_errors_become_error_text(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            thrown = await s.run("text('before'); throw new Error('boom')")
            tool_failed = await s.run("await tools.explode({message: 'tool exploded'})")
            caught = await s.run(
                "try { await tools.explode({message: 'nope'}) }"
                " catch (e) { text(typeof e + ':' + e) }"
            )
            syntax = await s.run("this is not javascript")
            mistyped = await s.run("try { await tools.add({a: '1', b: 2}) } catch (e) { text(e) }")
            assert not ep.failures()
    assert thrown.text == "before"
    assert thrown.error_text is not None and thrown.error_text.startswith("Error: boom")
    assert tool_failed.error_text == "tool exploded"
    assert caught.text == "string:nope"  # the host rejects with the message string itself
    assert syntax.error_text is not None and syntax.error_text.startswith("SyntaxError")
    # Checked against the schema derived from `a: int` before the tool runs.
    assert mistyped.text == "tool 'add': argument 'a': input should be a valid integer"


async def test_a_tool_raising_keyboard_interrupt_ends_the_connection_as_itself(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    @recorder.tools.function(description="Interrupts")
    async def interrupt() -> None:
        raise KeyboardInterrupt

    seen: list[Endpoint] = []
    with trio.fail_after(30), pytest.raises(KeyboardInterrupt):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            seen.append(ep)
            await s.run("await tools.interrupt({})")
    assert not any(c.alive for c in seen[0].connections)
    assert len(recorder.closed) == 1  # the cell closed once as the connection went


async def test_shutdown_with_live_cells_closes_each_once(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with endpoint() as ep:
            async with ep.open_session(recorder.tools) as s:
                cells = [
                    await s.execute(f"await tools.hang({{tag: 'c{i}'}})", yield_time_ms=60_000)
                    for i in range(3)
                ]
                for _ in cells:
                    await recorder.started.receive()
            # Leaving the block closed the session and returned once every cell was closed.
            assert s.cleaned_up
            assert closed_once(recorder, *(c.cell_id for c in cells))
            await recorder.wait_for(lambda r: sorted(r.cancelled) == ["c0", "c1", "c2"])
            for cell in cells:
                assert (await cell.initial_response()).kind == "terminated"
            with pytest.raises(cm.SessionClosed):
                await s.run("1")
            await settle(ep, recorder, *(c.cell_id for c in cells))
            assert not ep.failures()
            assert sum(c.statistics().sessions for c in ep.live) == 0


async def test_a_connection_failure_closes_each_live_cell_once(
    endpoint: OpenEndpoint, recorder: Recorder
) -> None:
    caught: list[Any] = []
    with trio.fail_after(30):
        async with endpoint() as ep, ep.open_session(recorder.tools) as s:
            cells = [
                await s.execute(f"await tools.hang({{tag: 'c{i}'}})", yield_time_ms=60_000)
                for i in range(2)
            ]
            for _ in cells:
                await recorder.started.receive()
            await ep.fail()
            for cell in cells:
                with pytest.raises(cm.ConnectionFailed) as info:
                    await cell.initial_response()
                caught.append(info.value)
            await recorder.wait_for(lambda r: closed_once(r, *(c.cell_id for c in cells)))
            await recorder.wait_for(lambda r: sorted(r.cancelled) == ["c0", "c1"])
            if isinstance(s, cm.ReconnectingSession):
                # It lives on: the failure reached its callers, the next call opens a new host.
                assert (await s.run("text(3)")).text == "3"
                assert s.generation == 2
            else:
                await s.wait_cleaned_up()
    assert len(caught) == 2
