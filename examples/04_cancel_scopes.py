"""04 cancel scopes: a caller gives up on a wait; the protocol stays consistent.

Concept: a cancel scope is how a caller says "I no longer care". The library turns that into
exactly one ``operation/cancel``, and the cell, which nobody cancelled, runs on.

Rust/tokio: dropping a future is silent, so each call carries a ``CallerCancellation`` guard
whose ``Drop`` cancels a ``CancellationToken``; a watcher task and a sweep in the driver turn
that into the cancel frame, and a flag makes sure it goes out at most once.

Trio: ``trio.move_on_after(0.2)`` cancels the ``await session.wait(...)``. The instant it is
cancelled, the wait is abandoned synchronously, inside the ``cancel()`` itself (no await is
possible there). The next wait on that cell is held back until the host has answered the
cancelled one: the host must never see two observers of one cell. Nothing is lost: output
that arrived meanwhile goes to the next wait.

``yield_time_ms`` is not a timeout: it tells the *host* how long to collect output before
answering ``yielded``; the cell keeps running either way.

Watch: in the frames, one ``OperationCancel`` right after the first wait; the host's answer to
it (``code-mode request cancelled``) comes before the second wait is sent.

Try this: wrap the second wait in ``move_on_after(0.2)`` too and predict how many cancels go
out and where ``tick 2`` ends up.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio
from _check import Checks
from _trace import stamp

import codemode_trio as cm
from codemode_trio.transcript_view import format_transcript

SCRIPT = """
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
text('tick 1'); await pause(400); text('tick 2'); await pause(400); text('done');
"""


async def main() -> None:
    checks = Checks()
    closed = trio.Event()
    tools = cm.ToolRegistry()
    tools.on_cell_closed(lambda cell_id: closed.set())
    frames = Path(tempfile.mkdtemp()) / "frames.cbor"
    seen: list[str] = []
    async with cm.open_host_process(transcript=frames) as conn, conn.open_session(tools) as session:
        cell = await session.execute(SCRIPT, yield_time_ms=0)
        first = await cell.initial_response()
        seen.append(first.text)
        print(stamp(), "initial:", first.kind, repr(first.text))
        with trio.move_on_after(0.2) as scope:
            await session.wait(cell.cell_id, yield_time_ms=10_000)
        print(stamp(), "first wait abandoned:", scope.cancelled_caught)
        response = first
        while response.kind == "yielded":
            response = (await session.wait(cell.cell_id, yield_time_ms=2_000)).response
            seen.append(response.text)
            print(stamp(), f"{response.kind}: {response.text!r}")
        # cell/closed is the host's next frame after the final result, not part of it:
        # until it arrives the cell still counts as live, so wait for it.
        print(stamp(), "live cells right after the result:", conn.statistics().live_cells)
        with trio.fail_after(5):
            await closed.wait()
        print(stamp(), "live cells after cell/closed:", conn.statistics().live_cells)
        checks.expect(conn.statistics().live_cells == 0, "no cell left behind")

    lines = list(format_transcript(frames))
    print("\n".join(lines[2:]))  # the handshake frames are left out
    kinds = [line.split()[2] for line in lines]
    cancels = [i for i, kind in enumerate(kinds) if kind == "OperationCancel"]
    answered = next(i for i, line in enumerate(lines) if "code-mode request cancelled" in line)
    waits = [i for i, line in enumerate(lines) if '"session/wait"' in line]
    checks.expect(scope.cancelled_caught, "the caller's scope caught the cancellation")
    checks.expect(len(cancels) == 1, "operation/cancel went out exactly once")
    checks.expect(answered < waits[1], "the next wait waited for the cancelled one to retire")
    checks.expect(
        " ".join(seen).split() == ["tick", "1", "tick", "2", "done"], "no output was lost"
    )
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
