"""06 deadlines: our ``fail_after`` around a call, versus the protocol's own deadlines.

Concept: three different clocks, three different outcomes. The host's yield deadline is data
(``yielded``, the cell runs on). *Our* deadline cancels our call and only that. The
connection's transport deadline means "the host is hung" and fails the whole connection.

Rust/tokio: ``tokio::time::timeout(d, fut)`` drops the future, and a guard has to notice;
the client's own deadlines are more ``timeout`` wrappers, each mapped to an error string.

Trio: no ``timeout=`` parameters. ``trio.fail_after(s)`` raises ``trio.TooSlowError`` in *our*
task; ``session.run`` reacts to the cancellation by terminating its cell. The protocol's
deadlines live in one frozen ``cm.ConnectionConfig`` (wait: ``yield_time_ms + yield_grace +
transport_timeout``); shrunk here so a host frozen with SIGSTOP is declared hung quickly.

Watch: the three elapsed times, and which error names whom: ``TooSlowError`` (our choice)
versus ``ConnectionFailed: code-mode host timed out waiting for wait response`` (the host).

Try this: swap ``fail_after`` for ``move_on_after`` and check ``scope.cancelled_caught``.
"""

from __future__ import annotations

import signal

import trio
from _check import Checks
from _trace import stamp
from trio_util import AsyncValue

import codemode_trio as cm

LONG = "text('working'); await new Promise((resolve) => setTimeout(resolve, 3000)); text('end')"
CONFIG = cm.ConnectionConfig(transport_timeout=0.5, yield_grace=0.2)


async def main() -> None:
    checks = Checks()
    closed = AsyncValue(0)  # how many cells have closed so far
    tools = cm.ToolRegistry()
    tools.on_cell_closed(lambda cell_id: setattr(closed, "value", closed.value + 1))
    async with cm.open_host_process(config=CONFIG) as conn, conn.open_session(tools) as session:
        print(stamp(), "1. the host's yield deadline: execute(yield_time_ms=300)")
        cell = await session.execute(LONG, yield_time_ms=300)
        first = await cell.initial_response()
        print(stamp(), f"   -> {first.kind} {first.text!r}; the cell runs on")
        checks.expect(first.kind == "yielded", "a yield deadline is an answer, not an error")
        await session.terminate(cell.cell_id)

        print(stamp(), "2. our deadline: fail_after(0.5) around session.run(...)")
        too_slow = False
        try:
            with trio.fail_after(0.5):
                await session.run(LONG)
        except trio.TooSlowError:
            too_slow = True
            print(stamp(), "   -> TooSlowError, raised by our own scope")
        with trio.fail_after(5):
            await closed.wait_value(2)  # run() terminated its cell as it unwound
        print(stamp(), "   cell closed; connection alive:", conn.alive)
        checks.expect(too_slow and conn.alive, "our deadline cost one call, not the connection")

        print(stamp(), "3. the transport deadline: the host frozen, wait(yield_time_ms=100)")
        cell = await session.execute("await new Promise(() => {})", yield_time_ms=0)
        await cell.initial_response()
        assert conn.process is not None
        conn.process.send_signal(signal.SIGSTOP)
        started, took = trio.current_time(), -1.0
        try:
            await session.wait(cell.cell_id, yield_time_ms=100)
        except cm.ConnectionFailed as exc:
            took = trio.current_time() - started
            print(stamp(), f"   -> after {took:.2f}s: ConnectionFailed: {exc}")
        conn.process.send_signal(signal.SIGCONT)
        checks.expect(
            conn.failure == "code-mode host timed out waiting for wait response",
            "a hung host fails the connection with the reference text",
        )
        checks.expect(0.75 <= took < 2, "after yield_time_ms + yield_grace + transport_timeout")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
