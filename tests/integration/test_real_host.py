"""The client against the real host 0.171.0, over a real subprocess, on the real clock.

The session scenarios every transport shares are in test_session_api.py; here is what belongs
to a host we spawn: its process, its exit and stderr in failure reasons, its globals, and how
it answers limits. Scenarios taking ``connect`` run over the stdio protocol to 0.171.0 and to
``codemode-trio serve``, and 0.171.0's gRPC API over ``grpc://`` and ``grpc+stdio://``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
from pathlib import Path

import pytest
import trio
import trio.testing

import codemode_trio as cm

from .conftest import Connect, Recorder


async def test_heap_size_limit_is_accepted_but_not_enforced(connect: Connect) -> None:
    """Host 0.171.0 accepts maxHeapSizeBytes and ignores it.

    A 16 MiB cap does not stop a cell from holding ~80 MB of small-integer arrays on the V8
    heap. (What does stop a cell is a fixed ~1.39 GB heap ceiling, which kills the whole host;
    that is too expensive to exercise here and is recorded in docs/host-binary.md.) If a later
    host starts enforcing the cap, this test fails and that page must change with it.
    """
    limits = cm.CellLimits(max_heap_size_bytes=16 * 1024 * 1024)
    source = (
        "const keep = [];"
        "for (let i = 0; i < 100; i++) keep.push(new Array(100000).fill(i));"
        "text(keep.length * keep[0].length)"
    )
    with trio.fail_after(30):
        async with connect() as conn, conn.open_session(limits=limits) as s:
            result = await s.run(source)
            assert conn.alive
    assert result.error_text is None
    assert result.text == "10000000"


async def test_cancelling_execute_terminates_the_cell(
    host_path: Path, recorder: Recorder, tmp_path: Path
) -> None:
    transcript = tmp_path / "frames.cbor"
    with trio.fail_after(30):
        async with (
            cm.open_host_process(host_path, transcript=transcript) as conn,
            conn.open_session(recorder.tools) as s,
        ):
            with trio.CancelScope() as scope:
                scope.cancel()
                await s.execute("await tools.hang({tag: 'never'})")
            assert conn.statistics().pending_requests == 0  # cancelled before it was sent

            outcome: list[str] = []
            scope = trio.CancelScope()

            async def execute() -> None:
                with scope:
                    await s.execute("await tools.hang({tag: 'abandoned'})", yield_time_ms=60_000)
                    outcome.append("returned")
                if scope.cancelled_caught:
                    outcome.append("cancelled")

            # Freeze the host, so the cancellation surely comes before it admits the cell.
            assert conn.process is not None
            os.kill(conn.process.pid, signal.SIGSTOP)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(execute)
                    # The execute frame is in the pipe; the host cannot have answered.
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
            finally:
                os.kill(conn.process.pid, signal.SIGCONT)
            assert outcome == ["cancelled"]
            # Two outcomes are the host's to choose. Usually it admits the cell anyway, and the
            # client terminates it; but a cancel that reaches 0.171.0 before the cell starts is
            # sometimes honoured (about one time in three when both frames arrive together):
            # the execute is refused with `code-mode request cancelled` and no cell exists.
            # Either way nothing is left running.
            # A later cell's result comes after the host answered the abandoned execute.
            assert (await s.run("text('after')")).text == "after"
            answer = next(
                message
                for message in (
                    json.loads(frame.payload)
                    for frame in cm.read_transcript(transcript)
                    if frame.direction == "host->client"
                )
                if message.get("type") == "operation/response" and message.get("id") == 2
            )
            if answer["result"]["status"] == "error":
                assert answer["result"]["message"] == "code-mode request cancelled"
                await recorder.wait_for(lambda r: len(r.closed) == 1)  # the later cell only
            else:
                assert answer["result"]["value"]["type"] == "execution/started"
                await recorder.wait_for(lambda r: len(r.closed) == 2)
            assert conn.statistics().live_cells == 0
            assert "never" not in recorder.cancelled
            assert conn.alive


async def test_host_killed_mid_call_fails_once_and_reaps_the_process(
    host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn:
            process = conn.process
            assert process is not None
            async with conn.open_session(recorder.tools) as s:
                cell = await s.execute("await tools.hang({tag: 'killed'})", yield_time_ms=60_000)
                await recorder.started.receive()
                os.kill(process.pid, signal.SIGKILL)
                with pytest.raises(cm.ConnectionFailed) as info:
                    await cell.initial_response()
            reason = await conn.wait_failed()
        assert process.returncode == -signal.SIGKILL
    assert isinstance(info.value, trio.BrokenResourceError)
    assert "code-mode host closed its stdout" in reason
    assert "killed by signal SIGKILL" in reason
    assert "1 delegate call in flight" in reason
    assert recorder.cancelled == ["killed"]
    assert recorder.closed == [cell.cell_id]
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)  # reaped: not even a zombie


async def test_a_host_that_never_answers_the_handshake_times_out(tmp_path: Path) -> None:
    silent = tmp_path / "silent-host"
    silent.write_text("#!/bin/sh\nexec sleep 600\n")
    silent.chmod(silent.stat().st_mode | stat.S_IEXEC)
    config = cm.ConnectionConfig(handshake_timeout=0.5)
    with trio.fail_after(20):
        with pytest.raises(
            cm.ConnectionFailed, match="^timed out negotiating with the code-mode host"
        ):
            async with cm.open_host_process(silent, config=config):
                pytest.fail("the handshake cannot succeed")


async def test_a_path_that_is_not_a_host_fails_with_its_stderr(tmp_path: Path) -> None:
    impostor = tmp_path / "not-a-host"
    impostor.write_text("#!/bin/sh\necho 'usage: not-a-host [FILE]' >&2\nexit 3\n")
    impostor.chmod(impostor.stat().st_mode | stat.S_IEXEC)
    with trio.fail_after(20):
        with pytest.raises(cm.ConnectionFailed) as info:
            async with cm.open_host_process(impostor):
                pytest.fail("the handshake cannot succeed")
    message = str(info.value)
    assert "code-mode host" in message
    assert "exited with status 3" in message
    assert "usage: not-a-host [FILE]" in message


async def test_missing_host_binary_names_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(cm.HostNotFound) as info:
        async with cm.open_host_process(tmp_path / "nothing-here"):
            pytest.fail("unreachable")
    assert str(tmp_path / "nothing-here") in str(info.value)


async def test_a_burst_of_tool_calls_that_kills_the_host_is_explained(host_path: Path) -> None:
    """Host 0.171.0 drops the connection silently (exit 0, no stderr) on a large burst."""
    tools = cm.ToolRegistry()

    @tools.function(description="slow echo")
    async def slow(i: int) -> int:
        await trio.sleep(0.5)
        return i

    burst = "await Promise.all(Array.from({length: 400}, (_, i) => tools.slow({i})))"
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session(tools) as s:

            async def poke() -> None:
                # Sometimes the dying host stalls (even before execution/started) until the
                # next client frame arrives; opening a session is a harmless frame.
                while True:
                    await trio.sleep(1)
                    with contextlib.suppress(cm.CodeModeError):
                        await conn.start_session()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(poke)
                with pytest.raises(cm.ConnectionFailed) as info:
                    cell = await s.execute(burst, yield_time_ms=20_000)
                    await cell.initial_response()
                nursery.cancel_scope.cancel()
            reason = conn.failure
    assert reason is not None
    assert str(info.value) == reason
    assert reason.startswith("code-mode host closed its stdout (host exited with status 0")
    assert "wrote nothing to stderr" in reason
    assert "delegate calls in flight" in reason or "delegate call in flight" in reason


# What 0.171.0 adds to a cell's global scope; everything else is standard ECMAScript.
HOST_GLOBALS = {
    "tools",
    "ALL_TOOLS",
    "text",
    "content",
    "image",
    "audio",
    "generatedImage",
    "store",
    "load",
    "notify",
    "yield_control",
    "exit",
    "setTimeout",
    "clearTimeout",
    "as_settled",
    "stream_settled",
}
ECMASCRIPT_GLOBALS = {
    *("AggregateError", "Array", "ArrayBuffer", "AsyncDisposableStack", "BigInt"),
    *("BigInt64Array", "BigUint64Array", "Boolean", "DataView", "Date", "DisposableStack"),
    *("Error", "EvalError", "FinalizationRegistry", "Float16Array", "Float32Array"),
    *("Float64Array", "Function", "Infinity", "Int16Array", "Int32Array", "Int8Array", "Intl"),
    *("Iterator", "JSON", "Map", "Math", "NaN", "Number", "Object", "Promise", "Proxy"),
    *("RangeError", "ReferenceError", "Reflect", "RegExp", "Set", "String", "SuppressedError"),
    *("Symbol", "SyntaxError", "TypeError", "URIError", "Uint16Array", "Uint32Array"),
    *("Uint8Array", "Uint8ClampedArray", "WeakMap", "WeakRef", "WeakSet", "decodeURI"),
    *("decodeURIComponent", "encodeURI", "encodeURIComponent", "escape", "eval", "globalThis"),
    *("isFinite", "isNaN", "parseFloat", "parseInt", "undefined", "unescape"),
}


async def test_a_cell_sees_exactly_the_reference_globals(host_path: Path) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as s:
            result = await s.run(
                "text(JSON.stringify(Object.getOwnPropertyNames(globalThis)));"
                "text(JSON.stringify(['console', 'process', 'require', 'fetch', 'WebAssembly',"
                " 'SharedArrayBuffer', 'Atomics', 'Temporal', 'queueMicrotask']"
                ".filter(name => typeof globalThis[name] !== 'undefined')));"
            )
    names, present = (json.loads(item.text) for item in result.content_items)
    assert set(names) == HOST_GLOBALS | ECMASCRIPT_GLOBALS
    assert len(names) == len(set(names))
    assert present == []
