"""The core scenarios against an older host release (0.150.0).

0.150 differs in message shapes (no ``code_mode_host_duration_ns``, no
``result_buffered_for_ns``), offers only ``session-cell-execution-resource-limits`` and kills
the connection on any newer field or message. The client must decode its frames tolerantly
and never send what it did not negotiate.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import codemode_trio as cm

from .conftest import Recorder


async def test_older_host_runs_tools_notifications_and_errors(
    older_host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(older_host_path) as conn:
            assert conn.capabilities == {"session-cell-execution-resource-limits"}
            async with conn.open_session(recorder.tools) as s:
                result = await s.run(
                    "const r = await Promise.all("
                    "[tools.add({a: 1, b: 2}), tools.echo({value: 'x'})]);"
                    "notify('hello'); text(JSON.stringify(r))"
                )
                failed = await s.run("throw new Error('old boom')")
    assert result.text == '[3,{"echo":"x"}]'
    # 0.150 sends neither timing field; tolerant decoding leaves them unset.
    assert result.code_mode_host_duration_ns is None
    assert result.result_buffered_for_ns is None
    assert [n.text for n in recorder.notes] == ["hello"]
    assert failed.error_text is not None and failed.error_text.startswith("Error: old boom")


async def test_older_host_yield_wait_and_terminate(older_host_path: Path) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(older_host_path) as conn:
            async with conn.open_session(limits=cm.CellLimits(max_yield_time_ms=200)) as s:
                cell = await s.execute("text('a'); await new Promise(() => {})")
                first = await cell.initial_response()
                assert (first.kind, first.text) == ("yielded", "a")
                outcome = await s.wait(cell.cell_id, yield_time_ms=50)
                assert outcome.live and outcome.response.kind == "yielded"
                stopped = await s.terminate(cell.cell_id)
                assert stopped.response.kind == "terminated"
                assert stopped.response.host_duration_ns is None
            assert conn.alive


async def test_newer_features_are_refused_locally_on_the_older_host(
    older_host_path: Path,
) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(older_host_path) as conn:
            with pytest.raises(cm.UsageError, match="bounded-output-v1"):
                await conn.start_session(output_truncation="server")
            async with conn.open_session() as s:
                cell = await s.execute("await new Promise(() => {})", yield_time_ms=0)
                await cell.initial_response()
                # Each of these would kill a 0.150 connection if it reached the wire.
                with pytest.raises(cm.UsageError, match="yield-observation"):
                    s.request_yield(cell.cell_id)
                with pytest.raises(cm.UsageError, match="bounded-output-v1"):
                    await s.wait(cell.cell_id, yield_time_ms=0, max_output_tokens=10)
                with pytest.raises(cm.UsageError, match="tool-catalog-revision-v1"):
                    await s.execute("text(1)", catalog_revision=1)
                result = await s.run("text('still alive')")
                assert result.text == "still alive"
                await s.terminate(cell.cell_id)
            assert conn.alive


async def test_older_host_session_shutdown_closes_live_cells(
    older_host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(older_host_path) as conn:
            async with conn.open_session(recorder.tools) as s:
                cell = await s.execute("await tools.hang({tag: 'old'})", yield_time_ms=60_000)
                assert await recorder.started.receive() == "old"
            assert recorder.closed == [cell.cell_id]
            # Revoked, not awaited: the tool's cleanup runs a moment after the shutdown.
            await recorder.wait_for(lambda r: r.cancelled == ["old"])
            assert conn.alive
