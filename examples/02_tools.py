"""02 tools: Python functions behind ``tools.NAME``; a tool's error is a rejected promise.

Concept: every tool call the host sends is its own task, so calls run concurrently, and what a
tool raises is an *answer* to the host, not an exception in your program.

Rust/tokio: the driver ``tokio::spawn``s one future per ``delegate/request`` plus a watcher
that joins it and turns its result, or its panic, into a ``DelegateCompleted`` event.

Trio: the connection starts one task per call in its delegate nursery. ``ToolRegistry`` runs
the function; ``raise cm.ToolError(msg)`` rejects the JavaScript promise with exactly ``msg``;
any other exception is a bug in the tool and rejects it with ``code-mode delegate task
failed: ...``. Either way the connection and every other call carry on.

Watch: three tool-call tasks start at the same instant and the batch takes one call's time;
the caught rejection is a plain string (``typeof`` is ``string``, not an ``Error``); the
uncaught bug becomes the cell's ``error_text``, and the traceback on stderr is the library
logging that bug: the host only gets the message.

Try this: replace ``cm.ToolError`` by ``ValueError`` in ``lookup`` and predict the caught text.
Then see the three calls overlap: run this file with ``CODEMODE_TRIO_TRANSCRIPT=/tmp/02.cbor``
and open ``codemode-trio transcript show --html /tmp/02.html /tmp/02.cbor`` (see
docs/structured-concurrency.md, "Seeing it").
"""

from __future__ import annotations

import trio
from _check import Checks
from _trace import trace_tasks

import codemode_trio as cm

tools = cm.ToolRegistry()
STOCK = {"apple": 12, "pear": 3}


@tools.function(description="Square a number, slowly")
async def slow_square(x: int) -> int:
    await trio.sleep(0.3)
    return x * x


@tools.function(description="How many of an item are in stock")
async def lookup(item: str) -> int:
    if item not in STOCK:
        raise cm.ToolError(f"unknown item {item!r}")
    return STOCK[item]


@tools.function(description="A tool with a bug")
async def buggy(item: str) -> int:
    return {"apple": 1}[item]  # KeyError for anything else


CONCURRENT = "text(await Promise.all([1, 2, 3].map((x) => tools.slow_square({x}))))"
CAUGHT = """
try { await tools.lookup({item: 'kiwi'}); }
catch (e) { text(`caught ${typeof e}: ${e}`); }
text(`apple: ${await tools.lookup({item: 'apple'})}`);
"""
UNCAUGHT = "text('before'); await tools.buggy({item: 'kiwi'}); text('never')"


async def main() -> None:
    checks = Checks()
    async with cm.open_host_process() as conn, conn.open_session(tools) as session:
        with trace_tasks() as tree:
            start = trio.current_time()
            result = await session.run(CONCURRENT)
            took = trio.current_time() - start
        print(f"squares: {result.text} in {took:.2f}s from {len(tree.spawned)} tasks")
        checks.expect(result.text == "[1,4,9]", "each call got its own answer")
        checks.expect(took < 0.6, "the three 0.3 s calls overlapped")

        caught = await session.run(CAUGHT)
        print("caught:", caught.text.splitlines())
        checks.expect(
            caught.text.splitlines() == ["caught string: unknown item 'kiwi'", "apple: 12"],
            "ToolError rejected the promise with its message; the script went on",
        )

        failed = await session.run(UNCAUGHT)
        print("uncaught:", failed.kind, repr(failed.text), "error_text:", repr(failed.error_text))
        checks.expect(
            failed.error_text == "tool 'buggy': code-mode delegate task failed: KeyError: 'kiwi'",
            "a tool's bug became the cell's error, named as a delegate failure",
        )
        checks.expect(conn.alive, "the connection survived both errors")
    checks.finish()


if __name__ == "__main__":
    trio.run(main)
