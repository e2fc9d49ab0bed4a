"""03 notifications: ``notify(text)`` from JavaScript reaches Python while the cell runs.

Concept: the host calls *us* while we are waiting on it. Our waiting task is not involved:
a different task answers, and the two meet only through the protocol state machine.

Rust/tokio: ``notify`` is a ``delegate/request`` like a tool call; the driver spawns a task
for the delegate's ``notify`` future and a watcher that reports when it is done.

Trio: the same task per call in the connection's delegate nursery, running the registry's
``on_notification`` handler. In JavaScript ``notify`` is fire-and-forget, but the host does
not finish the cell until every notification is acknowledged, so a slow handler delays the
cell's result (and its ``host_duration_ns``), never the script.

Watch: the notifications are printed with their arrival times, *before* ``run`` returns; the
slow handler's 0.5 s shows up in the result's time and in the host's duration.

Try this: make ``on_note`` sleep 1 s for *every* note and predict the arrival times: does the
script wait for each acknowledgement, or only its result?
"""

from __future__ import annotations

import trio
from _check import Checks
from _trace import stamp

import codemode_trio as cm

tools = cm.ToolRegistry()
HANDLER_DELAY = 0.5
arrivals: list[tuple[str, float]] = []


@tools.on_notification
async def on_note(note: cm.Notification) -> None:
    arrivals.append((note.text, trio.current_time()))
    print(stamp(), f"notify from cell {note.cell_id}: {note.text}")
    if note.text == "last":
        await trio.sleep(HANDLER_DELAY)  # the cell's result waits for this acknowledgement


SCRIPT = """
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
for (const step of ['first', 'second', 'third']) { notify(step); await pause(200); }
notify('last');
text('script finished');
"""


async def main() -> None:
    checks = Checks()
    async with cm.open_host_process() as conn, conn.open_session(tools) as session:
        print(stamp(), "run() starts")
        result = await session.run(SCRIPT)
        done = trio.current_time()
        host_s = (result.host_duration_ns or 0) / 1e9
        print(stamp(), f"run() returns {result.text!r} (host duration {host_s:.2f}s)")

    names = [text for text, _ in arrivals]
    checks.expect(names == ["first", "second", "third", "last"], "notifications came in order")
    checks.expect(
        all(at < done for _, at in arrivals), "each arrived while run() was still waiting"
    )
    checks.expect(
        done - arrivals[-1][1] >= HANDLER_DELAY, "the result waited for the slow acknowledgement"
    )
    checks.expect(host_s >= 0.6 + HANDLER_DELAY, "the host counted that wait in its duration")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
