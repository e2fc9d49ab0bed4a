"""The host-side hook: our own host shell served through a FaultyHostStream, our client on it."""

from __future__ import annotations

import io

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.faults import FaultyHostStream, parse_faults

from ..host.conftest import ScriptRuntime


async def _session_then_cell(
    spec: str,
) -> tuple[BaseException | None, int | None, FaultyHostStream]:
    client_stream, host_stream = trio.testing.memory_stream_pair()
    faulty = FaultyHostStream(host_stream, parse_faults(spec))
    runtime = ScriptRuntime()

    @runtime.script
    async def hello(hooks: cm.CellHooks, tools: object) -> None:
        hooks.emit(cm.TextItem("hi"))

    status: list[int] = []
    stopped = trio.Event()
    failure: BaseException | None = None

    async def host() -> None:
        status.append(await cm.serve_connection(faulty, runtime, stderr=io.StringIO()))
        stopped.set()
        await faulty.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        try:
            async with (
                cm.open_connection(client_stream) as conn,
                conn.open_session() as session,
            ):
                await session.run("hello")
        except cm.ConnectionFailed as exc:
            failure = exc
        # A host behind a stalled stream never ends by itself (that is the stall): give it
        # a moment, then stop it.
        with trio.move_on_after(5):
            await stopped.wait()
        nursery.cancel_scope.cancel()
    return failure, status[0] if status else None, faulty


async def test_a_clean_plan_changes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    failure, status, faulty = await _session_then_cell("slow=10")
    assert failure is None
    assert status == 0
    assert faulty.injected == []
    assert faulty.ended_by is None


@pytest.mark.parametrize(
    ("spec", "exited"), [("drop-after=2", False), ("silent-exit-after=2", True)]
)
async def test_the_stream_tells_which_fault_ended_it_and_how(
    autojump_clock: trio.testing.MockClock, spec: str, exited: bool
) -> None:
    # serve --fault reads these to choose its exit: status 0 and silence, or a report.
    failure, _status, faulty = await _session_then_cell(spec)
    assert isinstance(failure, cm.ConnectionFailed)
    assert "code-mode host closed" in str(failure)
    assert str(faulty.ended_by) == spec
    assert faulty.exited is exited


async def test_a_rewriting_fault_does_not_end_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _failure, _status, faulty = await _session_then_cell("wrong-response-id=2")
    assert [str(fault) for fault in faulty.injected] == ["wrong-response-id=2"]
    assert faulty.ended_by is None


@pytest.mark.parametrize(
    ("spec", "clue"),
    [
        ("drop-after=2", "code-mode host closed"),
        ("wrong-response-id=2", "unknown request ID RequestId(1000002)"),
        ("garbage-after=2", "failed to decode code-mode IPC frame"),
    ],
)
async def test_the_client_of_a_faulty_host_fails_naming_it(
    autojump_clock: trio.testing.MockClock, spec: str, clue: str
) -> None:
    failure, _status, faulty = await _session_then_cell(spec)
    assert isinstance(failure, cm.ConnectionFailed)
    assert clue in str(failure)
    assert [str(fault) for fault in faulty.injected] == [spec]
