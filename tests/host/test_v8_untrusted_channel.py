"""What Python reads from a cell's channel is untrusted: a malformed message ends that cell.

The prelude never writes one, so these tests run real V8 with the real prelude plus a hook in
``text()`` that writes whatever the cell asks for into the channel: ``RAW:`` + a message,
``SYNC:`` + a synchronous request, or ``HUGE``, a header claiming more than the buffer holds.
The cell ends with an error naming the problem; the shell's hooks never see the message, and
the next cell runs as usual.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import codemode_trio as cm
from codemode_trio.host import v8
from codemode_trio.host.runtime import MISSING, CellOutcome
from codemode_trio.host.v8 import V8CellRuntime
from codemode_trio.protocol.content import TextItem

TEXT = """  function text(...args) {
    emitText(textOf(arg(args, 0), text));
  }"""

HOOKED_TEXT = """  function text(...args) {
    const value = arg(args, 0);
    if (typeof value === "string" && startsWith(value, "RAW:")) return post(stringSlice(value, 4));
    if (typeof value === "string" && startsWith(value, "SYNC:")) {
      return request(stringSlice(value, 5));
    }
    if (value === "HUGE") {
      units[0] = 91; // "["
      header[0] = 0xffffffff;
      header[1] = 0;
      return native();
    }
    emitText(textOf(value, text));
  }"""


@pytest.fixture
def hooked_prelude(monkeypatch: pytest.MonkeyPatch) -> None:
    prelude = v8._prelude()
    assert prelude.count(TEXT) == 1
    monkeypatch.setattr(v8, "_PRELUDE", prelude.replace(TEXT, HOOKED_TEXT))


class Hooks:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def emit(self, item: Any) -> None:
        self.seen.append(item)

    def yield_control(self) -> None:
        self.seen.append("yield")

    def notify(self, text: str) -> None:
        self.seen.append(("notify", text))

    async def call_tool(self, binding: str, input: Any) -> Any:
        self.seen.append(("call", binding, input))
        return input

    def store(self, key: str, value: Any) -> None:
        self.seen.append(("store", key, value))

    def load(self, key: str) -> Any:
        self.seen.append(("load", key))
        return MISSING


async def run(runtime: V8CellRuntime, source: str) -> tuple[CellOutcome, Hooks]:
    hooks = Hooks()
    with trio.fail_after(30):
        outcome = await runtime.run(
            source, (cm.ToolDefinition("echo", "e"),), hooks, max_heap_size_bytes=None
        )
    return outcome, hooks


BRIDGE = "code-mode host: the cell's bridge sent "


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('text("RAW:not json")', "not JSON"),
        ('text("RAW:{}")', "not an array starting with a kind"),
        ('text("RAW:[\\"launch\\"]")', "unknown kind 'launch'"),
        ('text("RAW:[\\"emit\\",{\\"type\\":\\"input_text\\"}]")', "an output item of the wrong"),
        ('text("RAW:[\\"emit\\",{\\"type\\":\\"input_file\\",\\"text\\":\\"x\\"}]")', "an output"),
        ('text("RAW:[\\"call\\",\\"1\\",\\"echo\\",\\"{}\\"]")', "a 'call' message of the wrong"),
        ('text("RAW:[\\"call\\",true,\\"echo\\",\\"{}\\"]")', "a 'call' message of the wrong"),
        ('text("RAW:[\\"store\\",\\"k\\",\\"{bad\\"]")', "a 'store' message with a bad value"),
        ('text("RAW:[\\"store\\",\\"k\\",\\"" + "[".repeat(100000) + "\\"]")', "a 'store' message"),
        ('text("RAW:[\\"done\\",1]")', "a 'done' message of the wrong shape"),
        ('text("SYNC:[\\"exec\\",\\"rm\\"]")', "not a notify or load request"),
        ('text("SYNC:nonsense")', "not JSON"),
        ('text("HUGE")', "not JSON"),
    ],
)
async def test_a_malformed_message_ends_only_its_cell(
    hooked_prelude: None, source: str, problem: str
) -> None:
    runtime = V8CellRuntime()
    outcome, hooks = await run(runtime, f'text("before"); {source}; text("after")')
    assert outcome.error_text is not None
    assert outcome.error_text.startswith(BRIDGE + problem), outcome.error_text
    assert hooks.seen == [TextItem("before")]
    # The runtime, its thread and V8 are fine: the next cell runs.
    outcome, hooks = await run(runtime, 'text("next"); text(String(await tools.echo(4)))')
    assert outcome.error_text is None
    assert hooks.seen == [TextItem("next"), ("call", "echo", 4), TextItem("4")]


async def test_well_formed_raw_messages_are_handled(hooked_prelude: None) -> None:
    # The hook itself is sound: a message as the prelude writes it goes through.
    outcome, hooks = await run(
        V8CellRuntime(),
        'text("RAW:[\\"emit\\",{\\"type\\":\\"input_text\\",\\"text\\":\\"hi\\"}]")',
    )
    assert outcome.error_text is None
    assert hooks.seen == [TextItem("hi")]
