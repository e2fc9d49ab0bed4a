"""01 hello: one connection, one session, one cell, and the tasks that serve them.

Concept: an ``async with`` block owns every task it starts. Nothing it started outlives it.

Rust/tokio: the client spawns a reader, a writer, a driver and a supervisor with
``tokio::spawn``, keeps their ``JoinHandle``s, and ties their lifetime to a
``CancellationToken`` that ``Drop`` cancels; the child process is killed by another guard.

Trio: ``open_host_process()`` is an async context manager. Entering it starts the host and a
nursery holding the reader, the writer and the delegate nursery; leaving it cancels that
nursery, which cannot finish until every task in it has exited, then reaps the host. The
task tree below is printed by ``examples/_trace.py`` (a ``trio.abc.Instrument``).

Watch: every ``start`` line has its ``exit`` line before "after the block", and the host's
exit status is known by then.

Try this: move the ``print(result...)`` line below the ``async with`` and keep using
``session``: you get ``SessionClosed``, because the session died with its block.
"""

from __future__ import annotations

import trio
from _check import Checks
from _trace import stamp, trace_tasks

import codemode_trio as cm


async def main() -> None:
    checks = Checks()
    with trace_tasks() as tree:
        async with cm.open_host_process() as conn:
            print(stamp(), "connected, host pid", conn.process.pid if conn.process else None)
            async with conn.open_session() as session:
                print(stamp(), "session", session.session_id, "open")
                result = await session.run("text('hello from V8, ' + (6 * 7))")
                print(stamp(), "cell", result.cell_id, result.kind, repr(result.text))
        print(stamp(), "after the block: tasks still alive:", tree.alive())

    checks.expect(result.kind == "result", "the cell ran to its result")
    checks.expect(result.text == "hello from V8, 42", "its output arrived")
    checks.expect(not tree.alive(), "no task outlived the async with")
    returncode = conn.process.returncode if conn.process else None
    checks.expect(returncode is not None, f"the host was reaped (exit status {returncode})")
    checks.expect(not conn.alive, f"the connection is closed: {conn.failure!r}")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
