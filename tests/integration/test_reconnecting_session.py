"""open_reconnecting_session against the real host: a killed host, then generation 2."""

from __future__ import annotations

import os
import signal
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio

import codemode_trio as cm

from .conftest import Recorder


@pytest.mark.parametrize("transport", ["stdio", "grpc"])
async def test_after_a_host_dies_the_next_call_runs_on_generation_2(
    transport: str, host_path: Path, rust_host_path: Path, recorder: Recorder
) -> None:
    opened: list[Any] = []
    if transport == "grpc":
        host_path = rust_host_path  # the reference host speaks the stdio protocol only

    def opener() -> AbstractAsyncContextManager[Any]:
        opened.append(transport)
        if transport == "grpc":
            return cm.open_host_process(host_path, transport="grpc")
        return cm.open_host_process(host_path)

    with trio.fail_after(60):
        async with cm.open_reconnecting_session(opener, delegate=recorder.tools) as rs:
            first = await rs.run("text(await tools.echo({value: 1}))")
            assert (first.cell_id, rs.generation) == ("1", 1)
            connection = rs.connection
            assert connection is not None and connection.process is not None
            os.kill(connection.process.pid, signal.SIGKILL)
            await connection.wait_failed()
            # The failure reaches one call; the next one opens generation 2.
            with pytest.raises(cm.ConnectionFailed):
                await rs.run("text(2)")
            second = await rs.run("text(JSON.stringify(await tools.echo({value: 2})))")
            assert (second.cell_id, second.text, rs.generation) == ("g2:1", '{"echo":2}', 2)
            cell = await rs.execute("text('x'); await new Promise(() => {})", yield_time_ms=0)
            assert cell.cell_id == "g2:2"
            assert (await cell.initial_response()).cell_id == "g2:2"
            with pytest.raises(
                cm.SessionClosed, match="generation 1, but the session is on generation 2"
            ):
                await rs.wait("1")
            terminated = await rs.terminate(cell.cell_id)
            assert (terminated.live, terminated.response.cell_id) == (True, "g2:2")
            await recorder.wait_for(lambda r: "g2:2" in r.closed)
        with pytest.raises(cm.SessionClosed):
            await rs.run("1")
    assert opened == [transport, transport]
    # The delegate saw public ids; generation 1's cell closed when its host died.
    assert recorder.closed[:1] == ["1"] and "g2:1" in recorder.closed


def test_public_ids_round_trip() -> None:
    from codemode_trio.reconnect import public_cell_id, split_cell_id

    assert public_cell_id(1, "7") == "7"
    assert public_cell_id(3, "7") == "g3:7"
    assert split_cell_id("g3:7") == (3, "7")
    assert split_cell_id("7") == (1, "7")
    assert split_cell_id("g1:7") == (1, "g1:7")  # never produced: generation 1 is unprefixed
    assert split_cell_id("gx:7") == (1, "gx:7")
