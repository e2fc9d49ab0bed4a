"""A cell cancelled while its source is still being lexed ends at once, and so does the lexing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import trio

from codemode_trio.host.runtime import MISSING, Missing
from codemode_trio.host.v8 import V8CellRuntime
from codemode_trio.protocol.content import ContentItem, ToolDefinition

TOOLS: Sequence[ToolDefinition] = ()


class Hooks:
    """CellHooks that the cell never reaches: it is cancelled before it runs."""

    def emit(self, item: ContentItem) -> None:
        raise AssertionError(item)

    def yield_control(self) -> None:
        raise AssertionError("yield")

    def notify(self, text: str) -> None:
        raise AssertionError(text)

    async def call_tool(self, binding: str, input: Any) -> Any:
        raise AssertionError(binding)

    def store(self, key: str, value: Any) -> None:
        raise AssertionError(key)

    def load(self, key: str) -> Any | Missing:
        return MISSING


async def test_cancelling_a_cell_does_not_wait_for_its_lexing(
    autojump_clock: trio.abc.Clock,
) -> None:
    # 35 MB of import( takes the lexer many seconds; the cell is cancelled as soon as Trio's
    # (mock) clock may move, and run() returns without waiting for the worker thread, which
    # stops at its next checkpoint.
    source = "import(" * 5_000_000
    started = time.monotonic()
    with trio.move_on_after(1) as scope:
        await V8CellRuntime().run(source, TOOLS, Hooks(), max_heap_size_bytes=None)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 3
