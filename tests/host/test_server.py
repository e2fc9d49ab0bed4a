"""The reference host shell, driven by our own client over memory streams, on a virtual clock."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.host.runtime import MISSING, CellHooks, ToolCallRejected
from codemode_trio.host.server import CELL_BURST_LIMIT, serve_connection
from codemode_trio.protocol import (
    ConnectionHello,
    ConnectionReady,
    FrameDecoder,
    OperationRequest,
    RequestId,
    ShutdownRequest,
    TextItem,
    ToolDefinition,
    decode_host_message,
    encode_client_frame,
    encode_frame,
)

from .conftest import Served, connect

Tools = Sequence[ToolDefinition]


def registry(log: list[Any] | None = None) -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function(description="Echo the input back")
    async def echo(value: Any = None) -> Any:
        return {"echo": value}

    @tools.function(description="Fails")
    async def explode(message: str) -> None:
        raise cm.ToolError(message)

    @tools.function(description="Never returns until cancelled")
    async def hang() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if log is not None:
                log.append("hang cancelled")

    return tools


async def test_a_cell_result_carries_output_and_timing(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def hello(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem("hi"))
        await trio.sleep(2)
        hooks.emit(TextItem("there"))
        return None

    async with connect(served) as conn, conn.open_session() as session:
        cell = await session.execute("hello", yield_time_ms=5_000)
        response = await cell.initial_response()
    assert (response.kind, response.text, response.error_text) == ("result", "hi\nthere", None)
    assert response.code_mode_host_duration_ns == 2_000_000_000
    assert response.result_buffered_for_ns == 0
    assert served.status == 0


async def test_tool_calls_round_trip_and_errors_reject_the_call(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def calls(hooks: CellHooks, tools: Tools) -> str | None:
        first = await hooks.call_tool("echo", {"value": 1})
        hooks.emit(TextItem(repr(first)))
        try:
            await hooks.call_tool("explode", {"message": "tool exploded"})
        except ToolCallRejected as exc:
            hooks.emit(TextItem(exc.message))
        return "done"

    async with connect(served) as conn, conn.open_session(registry()) as session:
        response = await session.run("calls")
    assert response.text == "{'echo': 1}\ntool exploded"
    assert response.error_text == "done"


async def test_a_deadline_yields_and_a_wait_collects_the_buffered_result(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def slow(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem("early"))
        await trio.sleep(3)
        hooks.emit(TextItem("late"))
        return None

    async with connect(served) as conn, conn.open_session() as session:
        start = trio.current_time()
        cell = await session.execute("slow", yield_time_ms=500)
        first = await cell.initial_response()
        assert (first.kind, first.text) == ("yielded", "early")
        assert trio.current_time() - start == pytest.approx(0.5)
        await trio.sleep(5)
        outcome = await session.wait(cell.cell_id, yield_time_ms=1_000)
    assert (outcome.response.kind, outcome.response.text) == ("result", "late")
    assert outcome.response.result_buffered_for_ns == pytest.approx(2_500_000_000, rel=1e-6)


async def test_max_yield_time_caps_every_deadline_and_long_ones_fire_a_second_late(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def forever(hooks: CellHooks, tools: Tools) -> str | None:
        await trio.sleep_forever()
        return None

    limits = cm.CellLimits(max_yield_time_ms=300, max_heap_size_bytes=1 << 24)
    async with connect(served) as conn:
        async with conn.open_session(limits=limits) as capped:
            start = trio.current_time()
            cell = await capped.execute("forever", yield_time_ms=5_000)
            assert (await cell.initial_response()).kind == "yielded"
            assert trio.current_time() - start == pytest.approx(0.3)
        async with conn.open_session() as plain:
            start = trio.current_time()
            cell = await plain.execute("forever")
            assert (await cell.initial_response()).kind == "yielded"
            assert trio.current_time() - start == pytest.approx(11.0)
        async with conn.open_session(limits=cm.CellLimits(max_yield_time_ms=10_000)) as c:
            start = trio.current_time()
            cell = await c.execute("forever", yield_time_ms=10_000)
            assert (await cell.initial_response()).kind == "yielded"
            assert trio.current_time() - start == pytest.approx(10.0)  # the cap is on time
    assert served.runtime.heap_limits == [1 << 24, None, None]


async def test_yield_control_answers_now_with_the_output_so_far(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def yields(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem("a"))
        hooks.yield_control()
        hooks.emit(TextItem("x"))
        await trio.sleep(1)
        return None

    async with connect(served) as conn, conn.open_session() as session:
        cell = await session.execute("yields", yield_time_ms=5_000)
        first = await cell.initial_response()
        outcome = await session.wait(cell.cell_id, yield_time_ms=5_000)
    assert (first.kind, first.text) == ("yielded", "a")
    assert (outcome.response.kind, outcome.response.text) == ("result", "x")


async def test_terminate_stops_the_script_and_cancels_its_pending_call(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[Any] = []

    @served.runtime.script
    async def stuck(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem("before"))
        await hooks.call_tool("hang", {})
        return None

    tools = registry(log)
    closed: list[str] = []
    tools.on_cell_closed(closed.append)
    async with connect(served) as conn, conn.open_session(tools) as session:
        cell = await session.execute("stuck", yield_time_ms=100)
        assert (await cell.initial_response()).text == "before"
        outcome = await session.terminate(cell.cell_id)
        assert outcome.live
        assert outcome.response.kind == "terminated"
        await trio.testing.wait_all_tasks_blocked()
    assert served.runtime.cancelled == ["stuck"]
    assert log == ["hang cancelled"]
    assert closed == [cell.cell_id]


async def test_an_unacknowledged_notification_holds_the_result(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def notes(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.notify("hello")
        hooks.emit(TextItem("done"))
        return None

    tools = cm.ToolRegistry()
    seen: list[str] = []

    @tools.on_notification
    async def slow_ack(note: cm.Notification) -> None:
        seen.append(note.text)
        await trio.sleep(20)

    async with connect(served) as conn, conn.open_session(tools) as session:
        start = trio.current_time()
        cell = await session.execute("notes", yield_time_ms=1_000, tool_call_id="call-3")
        response = await cell.initial_response()
    assert seen == ["hello"]
    assert response.kind == "result"
    assert trio.current_time() - start == pytest.approx(20)


async def test_a_cancelled_wait_leaves_the_cell_and_its_output_for_the_next(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def drip(hooks: CellHooks, tools: Tools) -> str | None:
        await trio.sleep(1)
        hooks.emit(TextItem("one"))
        await trio.sleep(10)
        return None

    async with connect(served) as conn, conn.open_session() as session:
        cell = await session.execute("drip", yield_time_ms=0)
        assert (await cell.initial_response()).content_items == ()
        with trio.move_on_after(2):
            await session.wait(cell.cell_id, yield_time_ms=60_000)
        outcome = await session.wait(cell.cell_id, yield_time_ms=60_000)
    assert (outcome.response.kind, outcome.response.text) == ("result", "one")


async def test_cells_of_several_sessions_run_concurrently(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def nap(hooks: CellHooks, tools: Tools) -> str | None:
        await trio.sleep(5)
        hooks.emit(TextItem("rested"))
        return None

    results: list[str] = []

    async def one(conn: cm.Connection) -> None:
        async with conn.open_session() as session:
            cells = [await session.execute("nap", yield_time_ms=9_000) for _ in range(3)]
            for cell in cells:
                results.append((await cell.initial_response()).text)

    async with connect(served) as conn:
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(one, conn)
        assert trio.current_time() - start == pytest.approx(5)
    assert results == ["rested"] * 12


async def test_store_is_per_session_and_copies_values(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def put(hooks: CellHooks, tools: Tools) -> str | None:
        value = {"n": 1}
        hooks.store("k", value)
        value["n"] = 2
        return None

    @served.runtime.script
    async def get(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem(repr(hooks.load("k"))))
        return None

    async with connect(served) as conn:
        async with conn.open_session() as first:
            await first.run("put")
            assert (await first.run("get")).text == "{'n': 1}"
        async with conn.open_session() as second:
            assert (await second.run("get")).text == repr(MISSING)


async def test_shutdown_terminates_running_cells(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def forever(hooks: CellHooks, tools: Tools) -> str | None:
        await trio.sleep_forever()
        return None

    async with connect(served) as conn, conn.open_session() as session:
        cell = await session.execute("forever", yield_time_ms=0)
        await cell.initial_response()
        await session.execute("forever")  # its initial response is still pending
    assert served.runtime.cancelled == ["forever", "forever"]


async def test_server_truncation_bounds_output_and_reports_script_errors(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def noisy(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem("x" * 1000))
        return None

    @served.runtime.script
    async def fails(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.emit(TextItem("hi"))
        return "Error: boom"

    async with connect(served) as conn, conn.open_session(output_truncation="server") as s:
        cell = await s.execute("noisy", max_output_tokens=10)
        truncated = await cell.initial_response()
        failed = await (await s.execute("fails")).initial_response()
    assert truncated.text == (
        "Warning: truncated output (original token count: 250)\nTotal output lines: 1\n\n"
        + "x" * 20
        + "\u2026240 tokens truncated\u2026"
        + "x" * 20
    )
    assert failed.content_items == (TextItem("hi"), TextItem("Script error:\nError: boom"))
    assert failed.error_text == "Error: boom"


# ----------------------------------------------------------------------------- raw stream


async def raw_host(served: Served, data: bytes, *, close: bool = True) -> bytes:
    client, host = trio.testing.memory_stream_pair()
    received = bytearray()
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            served.status = await serve_connection(host, served.runtime, stderr=served.stderr)
            await host.aclose()

        nursery.start_soon(run)
        await client.send_all(data)
        if close:
            await client.send_eof()
        while chunk := await client.receive_some():
            received += chunk
    return bytes(received)


async def test_a_bad_frame_is_fatal_with_the_reference_report(served: Served) -> None:
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    with trio.fail_after(5):
        out = await raw_host(served, hello + encode_frame(b"[]"), close=False)
    (ready,) = FrameDecoder().feed(out)  # the hello's answer still goes out, nothing more
    assert decode_host_message(ready) == ConnectionReady(1, ())
    assert served.status == 1
    assert served.stderr.getvalue().startswith(
        "Error: failed to read code-mode client message\n\nCaused by:\n"
        "    failed to decode code-mode IPC frame: "
    )


async def test_a_reused_request_id_is_fatal(served: Served) -> None:
    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    again = encode_client_frame(OperationRequest(RequestId(4), ShutdownRequest("s")))
    with trio.fail_after(5):
        await raw_host(served, hello + again + again, close=False)
    assert served.status == 1
    assert served.stderr.getvalue() == "Error: duplicate code-mode request ID RequestId(4)\n"


async def test_a_refused_hello_is_answered_and_the_host_exits_zero(served: Served) -> None:
    hello = encode_client_frame(ConnectionHello((2,), (), ()))
    with trio.fail_after(5):
        out = await raw_host(served, hello, close=False)
    assert b"noCompatibleVersion" in out
    assert served.status == 0


async def test_eof_ends_the_connection_at_once_with_cells_running(served: Served) -> None:
    @served.runtime.script
    async def forever(hooks: CellHooks, tools: Tools) -> str | None:
        await trio.sleep_forever()
        return None

    hello = encode_client_frame(ConnectionHello((1,), (), ()))
    with trio.fail_after(5):
        await raw_host(served, hello)
    assert served.status == 0
    assert served.stderr.getvalue() == ""


async def test_a_burst_of_delegate_calls_drops_the_connection_silently(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def burst(hooks: CellHooks, tools: Tools) -> str | None:
        async with trio.open_nursery() as nursery:
            for _ in range(CELL_BURST_LIMIT + 1):
                nursery.start_soon(hooks.call_tool, "echo", {})
        return None

    failed = False
    try:
        async with connect(served) as conn, conn.open_session(registry()) as session:
            await session.run("burst")
    except* cm.ConnectionFailed:
        failed = True
    assert failed
    assert served.status == 0
    assert served.stderr.getvalue() == ""


async def test_paced_batches_of_delegate_calls_are_not_a_burst(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def paced(hooks: CellHooks, tools: Tools) -> str | None:
        for _ in range(3):
            async with trio.open_nursery() as nursery:
                for _ in range(CELL_BURST_LIMIT):
                    nursery.start_soon(hooks.call_tool, "echo", {})
            await trio.sleep(0.1)
        hooks.emit(TextItem("paced"))
        return None

    async with connect(served) as conn, conn.open_session(registry()) as session:
        assert (await session.run("paced")).text == "paced"


async def test_awaited_calls_one_after_another_are_never_a_burst(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def sequential(hooks: CellHooks, tools: Tools) -> str | None:
        for _ in range(CELL_BURST_LIMIT * 3):
            await hooks.call_tool("echo", {})  # each answered before the next is made
        hooks.emit(TextItem("sequential"))
        return None

    async with connect(served) as conn, conn.open_session(registry()) as session:
        assert (await session.run("sequential")).text == "sequential"


async def test_calls_a_finished_script_left_behind_are_cancelled_newest_first(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def leaves(hooks: CellHooks, tools: Tools) -> str | None:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(hooks.call_tool, "hang", {})
            await trio.sleep(1)
            nursery.cancel_scope.cancel()  # the runtime drops the calls it did not await
        return None

    log: list[Any] = []
    async with connect(served, transcript=None) as conn, conn.open_session(registry(log)) as s:
        cell = await s.execute("leaves", yield_time_ms=0)
        await cell.initial_response()
        await trio.sleep(2)  # the script ended with nobody observing: cancels go out anyway
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["hang cancelled"] * 3
        outcome = await s.wait(cell.cell_id, yield_time_ms=0)
    assert outcome.response.kind == "result"


async def test_terminate_and_the_pending_wait_report_the_same_output(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def parked(hooks: CellHooks, tools: Tools) -> str | None:
        await trio.sleep(1)
        hooks.emit(TextItem("a"))
        await trio.sleep_forever()
        return None

    async with connect(served) as conn, conn.open_session() as session:
        cell = await session.execute("parked", yield_time_ms=0)
        await cell.initial_response()
        async with trio.open_nursery() as nursery:
            waited: list[cm.WaitOutcome] = []

            async def wait() -> None:
                waited.append(await session.wait(cell.cell_id, yield_time_ms=60_000))

            nursery.start_soon(wait)
            await trio.sleep(2)
            terminated = await session.terminate(cell.cell_id)
    assert terminated.response.content_items == (TextItem("a"),)
    assert waited[0].response.kind == "terminated"
    assert waited[0].response.content_items == (TextItem("a"),)


async def test_a_wait_during_an_unacknowledged_notification_finds_no_cell(
    served: Served, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    @served.runtime.script
    async def notes(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.notify("hello")
        hooks.emit(TextItem("x"))
        return None

    tools = cm.ToolRegistry()
    ack = trio.Event()

    @tools.on_notification
    async def held(note: cm.Notification) -> None:
        await ack.wait()

    order: list[str] = []
    transcript = tmp_path / "frames.cbor"
    async with connect(served, transcript=transcript) as conn, conn.open_session(tools) as session:
        cell = await session.execute("notes", yield_time_ms=200)

        async def initial() -> None:
            response = await cell.initial_response()
            order.append(f"initial {response.kind} {response.text}")

        async def wait() -> None:
            await trio.sleep(1)  # past the initial deadline: the cell still has no result
            outcome = await session.wait(cell.cell_id, yield_time_ms=300)
            order.append(f"wait live={outcome.live}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(initial)
            nursery.start_soon(wait)
            await trio.sleep(5)
            assert order == []  # both blocked, past both deadlines
            ack.set()
    # Both answers may arrive in one read, so the two waiting tasks wake in either order; the
    # host's order is the order of the frames: the wait's MissingCell, then the Result.
    assert sorted(order) == ["initial result x", "wait live=False"]
    answers = [
        json.loads(frame.payload)
        for frame in cm.read_transcript(transcript)
        if frame.direction == "host->client"
    ]
    kinds = [
        "missing"
        if a.get("type") == "operation/response" and "MissingCell" in json.dumps(a)
        else "result"
        if a.get("type") == "execute/initialResponse" and "Result" in json.dumps(a)
        else None
        for a in answers
    ]
    assert [kind for kind in kinds if kind] == ["missing", "result"]
