"""05 delegate cancellation: terminating a cell cancels its tool call without awaiting it.

Concept: a revoked call is cancelled *and forgotten*. The protocol does not wait for the tool;
its ``finally`` runs in its own time, and whatever it returns is never sent.

Rust/tokio: the driver cancels the call's ``CancellationToken`` and marks it revoked; the
spawned future runs on until it looks at the token; the watcher joining it drops its result.

Trio: each call runs in its own ``trio.CancelScope``. On ``delegate/cancel`` (sent by the host
when the cell is terminated) the client calls ``scope.cancel()`` and forgets the call in the
same synchronous step. The tool's ``await`` raises ``trio.Cancelled`` the next time it runs.

Watch: ``terminate`` returns while the tool's ``finally`` is still busy (a slow, shielded
cleanup, see 10), ``active delegates`` is already 0, and the frames hold a ``DelegateCancel``
but no ``DelegateResponse``. We wait for the ``finally`` with an event it sets, never with a
sleep: a sleep only guesses how long a cancelled task needs.

Try this: catch ``trio.Cancelled`` in ``fetch`` and ``return "late"``; will the host see it?
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio
from _check import Checks
from _trace import stamp, trace_tasks

import codemode_trio as cm
from codemode_trio.transcript_view import format_transcript

tools = cm.ToolRegistry()
started, cleaned_up = trio.Event(), trio.Event()


@tools.function(description="Fetch something that never arrives")
async def fetch(url: str) -> str:
    started.set()
    try:
        await trio.sleep_forever()
    finally:
        print(stamp(), f"fetch({url!r}) cancelled: finally starts")
        with trio.move_on_after(0.3, shield=True):  # cleanup that takes a while
            await trio.sleep(0.3)
        print(stamp(), f"fetch({url!r}): finally done")
        cleaned_up.set()
    return "never"


async def main() -> None:
    checks = Checks()
    frames = Path(tempfile.mkdtemp()) / "frames.cbor"
    with trace_tasks() as tree:
        async with cm.open_host_process(transcript=frames) as conn, conn.open_session(tools) as s:
            cell = await s.execute("text(await tools.fetch({url: 'slow://x'}))")
            await started.wait()
            print(stamp(), "tool running; terminating the cell")
            outcome = await s.terminate(cell.cell_id)
            active, done_then = conn.statistics().active_delegates, cleaned_up.is_set()
            print(
                stamp(), f"terminate returned {outcome.response.kind!r}; active delegates {active}"
            )
            with trio.fail_after(5):
                await cleaned_up.wait()
        print(stamp(), "tasks alive after the block:", tree.alive())

    lines = list(format_transcript(frames))
    print("\n".join(line[:100] for line in lines if "Delegate" in line))
    kinds = [line.split()[2] for line in lines]
    checks.expect(outcome.response.kind == "terminated", "the cell was terminated")
    checks.expect(active == 0, "the client forgot the call at once")
    checks.expect(not done_then, "terminate returned before the tool's finally was done")
    checks.expect(cleaned_up.is_set(), "the tool's finally ran to its end")
    checks.expect("DelegateCancel" in kinds, "the host cancelled the call")
    checks.expect("DelegateResponse" not in kinds, "no reply was sent for it")
    checks.expect(not tree.alive(), "the cancelled task did not outlive the connection")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
