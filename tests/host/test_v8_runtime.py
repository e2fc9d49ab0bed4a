"""The V8 cell runtime, on real V8: globals, output helpers, errors, tools, timers, termination.

Expected texts are those host 0.171.0 produces for the same script (probed with our client);
``test_globals_equal_the_real_hosts`` checks the global object against the real binary itself.
"""

from __future__ import annotations

import base64
import json
import math
import random
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.host.audio_clip import SHORT_CLIP_TEXT
from codemode_trio.host.runtime import MISSING, CellOutcome, Missing, ToolCallRejected
from codemode_trio.host.v8 import MIN_HEAP_LIMIT_BYTES, V8CellRuntime
from codemode_trio.host.v8_engine import live_isolates
from codemode_trio.protocol.content import (
    AudioItem,
    ContentItem,
    ImageItem,
    TextItem,
    ToolDefinition,
)
from codemode_trio.protocol.toolnames import bind_tools, normalize_identifier

ECHO = ToolDefinition("echo", "Echo the input back")
FAIL = ToolDefinition("fail", "Always rejects")
GATE = ToolDefinition("gate", "Waits until the test opens the gate")
TOOLS = (ECHO, FAIL, GATE)

HOST_GLOBALS = [
    "ALL_TOOLS",
    "as_settled",
    "audio",
    "clearTimeout",
    "content",
    "exit",
    "generatedImage",
    "image",
    "load",
    "notify",
    "setTimeout",
    "store",
    "stream_settled",
    "text",
    "tools",
    "yield_control",
]


class Hooks:
    """A CellHooks double: records everything, answers tools from the test."""

    def __init__(self, store: dict[str, Any] | None = None) -> None:
        self.items: list[ContentItem] = []
        self.events: list[Any] = []
        self.calls: list[tuple[str, Any]] = []
        self.cancelled: list[str] = []
        self.store_data: dict[str, Any] = {} if store is None else store
        self.gate = trio.Event()
        self.call_started = trio.Event()

    @property
    def texts(self) -> list[str]:
        return [item.text for item in self.items if isinstance(item, TextItem)]

    def emit(self, item: ContentItem) -> None:
        self.items.append(item)
        self.events.append(("emit", item))

    def yield_control(self) -> None:
        self.events.append(("yield",))

    def notify(self, text: str) -> None:
        if text == "refuse me":
            raise ToolCallRejected("code-mode host has too many pending delegate calls")
        self.events.append(("notify", text))

    async def call_tool(self, binding: str, input: Any) -> Any:
        self.calls.append((binding, input))
        self.events.append(("call", binding))
        self.call_started.set()
        try:
            if binding == "fail":
                raise ToolCallRejected("tool exploded")
            if binding == "gate":
                await self.gate.wait()
            return {"echo": input}
        except trio.Cancelled:
            self.cancelled.append(binding)
            raise

    def store(self, key: str, value: Any) -> None:
        self.store_data[key] = value

    def load(self, key: str) -> Any | Missing:
        return self.store_data.get(key, MISSING)


async def run(
    source: str,
    hooks: Hooks | None = None,
    *,
    tools: Sequence[ToolDefinition] = TOOLS,
    max_heap_size_bytes: int | None = None,
    runtime: V8CellRuntime | None = None,
) -> tuple[CellOutcome, Hooks]:
    hooks = Hooks() if hooks is None else hooks
    with trio.fail_after(30):
        outcome = await (runtime or V8CellRuntime()).run(
            source, tools, hooks, max_heap_size_bytes=max_heap_size_bytes
        )
    return outcome, hooks


async def texts_of(source: str) -> list[str]:
    outcome, hooks = await run(source)
    assert outcome.error_text is None, outcome.error_text
    return hooks.texts


async def error_of(source: str) -> str | None:
    outcome, _ = await run(source)
    return outcome.error_text


# --------------------------------------------------------------------------- globals


async def test_globals_are_the_ecmascript_builtins_plus_the_hosts() -> None:
    (listing,) = await texts_of("text(JSON.stringify(Object.getOwnPropertyNames(globalThis)))")
    names = set(json.loads(listing))
    assert set(HOST_GLOBALS) <= names
    for absent in ("console", "SharedArrayBuffer", "Atomics", "WebAssembly", "Temporal"):
        assert absent not in names
    assert not [n for n in names if n.startswith("__")]  # nothing of the bridge shows


async def test_the_bridge_is_not_reachable_as_properties_of_the_global_object() -> None:
    texts = await texts_of(
        "text(typeof globalThis.__codemode_push); text(typeof globalThis.__codemode_sync);"
        "text(Object.keys(globalThis).filter(k => k.startsWith('__')).length)"
    )
    assert texts == ["undefined", "undefined", "0"]


@pytest.mark.host
async def test_globals_equal_the_real_hosts(host_path: Path) -> None:
    script = "text(JSON.stringify(Object.getOwnPropertyNames(globalThis).sort()))"
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as session:
            real = await session.run(script)
    (ours,) = await texts_of(script)
    assert json.loads(ours) == json.loads(real.text)


BUILTIN_MEMBERS = """
const out = [];
for (const name of Object.getOwnPropertyNames(globalThis)) {
  const value = globalThis[name];
  if (name === "globalThis" || value === null) continue;
  if (typeof value !== "object" && typeof value !== "function") continue;
  for (const member of Object.getOwnPropertyNames(value)) out.push(`${name}.${member}`);
  if (typeof value === "function" && value.prototype) {
    for (const member of Object.getOwnPropertyNames(value.prototype)) {
      out.push(`${name}.prototype.${member}`);
    }
  }
}
text(JSON.stringify(out.sort()))
"""


@pytest.mark.host
async def test_builtin_members_equal_the_real_hosts(host_path: Path) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as session:
            real = set(json.loads((await session.run(BUILTIN_MEMBERS)).text))
    _, hooks = await run(BUILTIN_MEMBERS, tools=())  # no tools, as in the real session
    (ours,) = hooks.texts
    assert set(json.loads(ours)) == real


async def test_math_sum_precise_is_correctly_rounded() -> None:
    # math.fsum is correctly rounded too; the cases stay clear of its intermediate overflow.
    rng = random.Random(20261201)
    cases = [
        [rng.choice([-1, 1]) * rng.random() * 10.0 ** rng.randint(-320, 300) for _ in range(n)]
        for n in rng.choices(range(1, 40), k=300)
    ]
    cases += [[1e20, 0.1, -1e20], [0.1, 0.2, 0.3, -0.6], [2.0**53, 1.0], [2.0**53, 1.0, 1.0]]
    cases += [[1.7976931348623157e308, 9.979201547673598e291], [5e-324, 5e-324, -1e-310]]
    (got,) = await texts_of(f"text({json.dumps(cases)}.map(c => Math.sumPrecise(c)))")
    assert json.loads(got) == [math.fsum(case) for case in cases]
    texts = await texts_of(
        "text(Object.is(Math.sumPrecise([]), -0)); text(Object.is(Math.sumPrecise([-0, -0]), -0));"
        "text(Object.is(Math.sumPrecise([-0, 0]), 0));"
        "text(Math.sumPrecise([1e308, 1e308, -1e308]));"
        "text(Math.sumPrecise([Infinity, -Infinity])); text(Math.sumPrecise([1e308, 1e308]));"
        "text(Math.sumPrecise(new Set([1, 2])));"
        "text(Math.sumPrecise.name + Math.sumPrecise.length)"
    )
    assert texts == ["true", "true", "true", "1e+308", "NaN", "Infinity", "3", "sumPrecise1"]
    assert await error_of("Math.sumPrecise([1, 'a'])") == (
        "TypeError: Type of 'Iterator value' must be 'number', found 'string'\n"
        "    at Math.sumPrecise (<anonymous>)\n    at exec_main.mjs:1:6"
    )


async def test_iterator_concat() -> None:
    texts = await texts_of(
        "const it = Iterator.concat([1], new Set([2, 3]), ['a']);"
        "text(Object.prototype.toString.call(it)); text([...it])"
    )
    assert texts == ["[object Iterator Helper]", '[1,2,3,"a"]']
    assert await error_of("Iterator.concat('ab')") == (
        "TypeError: Iterator.concat called on non-object\n"
        "    at Iterator.concat (<anonymous>)\n    at exec_main.mjs:1:10"
    )
    assert await error_of("Iterator.concat({})") == (
        "TypeError: #<Object> is not iterable\n"
        "    at Iterator.concat (<anonymous>)\n    at exec_main.mjs:1:10"
    )


async def test_each_cell_gets_a_fresh_global_scope() -> None:
    runtime = V8CellRuntime()
    first, _ = await run("globalThis.leak = 1; var v = 2", runtime=runtime)
    assert first.error_text is None
    _, hooks = await run("text(typeof leak); text(typeof v)", runtime=runtime)
    assert hooks.texts == ["undefined", "undefined"]


async def test_host_functions_look_native() -> None:
    texts = await texts_of(
        "text(String(text)); text(text.name); text(text.length);"
        "text(Object.getOwnPropertyNames(tools.echo));"
        "text(setTimeout.prototype.constructor === setTimeout)"
    )
    assert texts == [
        "function () { [native code] }",
        "",
        "0",
        '["length","name","prototype"]',
        "true",
    ]


async def test_top_level_await_and_strict_module_semantics() -> None:
    assert await texts_of("text(await Promise.resolve(5)); text(typeof this)") == [
        "5",
        "undefined",
    ]
    assert await error_of("undeclared = 1") == (
        "ReferenceError: undeclared is not defined\n    at exec_main.mjs:1:12"
    )
    # Exports are ignored and a hashbang is a comment, as in the reference host.
    assert await texts_of("export const a = 1; text(a)") == ["1"]
    assert await error_of("#!/usr/bin/env node\nthrow new Error('x')") == (
        "Error: x\n    at exec_main.mjs:2:7"
    )


# --------------------------------------------------------------------------- text()


async def test_text_stringification_rules() -> None:
    texts = await texts_of(
        "text('s'); text(undefined); text(null); text(42); text({a: 1}); text([1, 2]);"
        "text(''); text(NaN); text(() => 1); text(Symbol('x')); text(1n); text(true);"
        "text(-0); text(1e21); text(new Date(0)); text({a: NaN}); text('x', 'y'); text()"
    )
    assert texts == [
        "s",
        "undefined",
        "null",
        "42",
        '{"a":1}',
        "[1,2]",
        "",
        "NaN",
        "undefined",
        "undefined",
        "1",
        "true",
        "0",
        "1e+21",
        '"1970-01-01T00:00:00.000Z"',
        '{"a":null}',
        "x",
        "undefined",
    ]


async def test_text_of_unserialisable_values_fails_at_the_call_site() -> None:
    assert await error_of("text({a: 1n})") == (
        "TypeError: Do not know how to serialize a BigInt\n    at exec_main.mjs:1:1"
    )
    assert await error_of("const o = {}; o.o = o; text(o)") == (
        "TypeError: Converting circular structure to JSON\n"
        "    --> starting at object with constructor 'Object'\n"
        "    --- property 'o' closes the circle\n"
        "    at exec_main.mjs:1:24"
    )


async def test_output_before_a_throw_is_kept() -> None:
    outcome, hooks = await run("text('before'); throw new Error('boom')")
    assert hooks.texts == ["before"]
    assert outcome.error_text == "Error: boom\n    at exec_main.mjs:1:23"


# --------------------------------------------------------------------------- images, audio, content

IMAGE_USAGE = (
    "image expects a non-empty image URL string, an object with image_url and optional detail,"
    " or a raw MCP image block"
)
AUDIO_USAGE = (
    "audio expects a non-empty audio URL string, an object with audio_url, or a raw MCP audio block"
)


async def test_image_forms() -> None:
    _, hooks = await run(
        "image('data:image/png;base64,AA');"
        "image({image_url: 'data:image/png;base64,BB', detail: 'low'});"
        "image({type: 'image', data: 'CC', mimeType: 'image/gif'});"
        "image('data:image/png;base64,DD', 'ORIGINAL');"
        "image({type: 'image', data: 'EE'});"
        "image({image_url: 'data:x', detail: null});"
        "image({image_url: 'data:x', detail: 'LOW'}, 'auto');"
        "image({type: 'image', data: 'FF', mimeType: 'image/png', detail: 'low'});"
        "image('DATA:y')"
    )
    assert hooks.items == [
        ImageItem("data:image/png;base64,AA", "high"),
        ImageItem("data:image/png;base64,BB", "low"),
        ImageItem("data:image/gif;base64,CC", "high"),
        ImageItem("data:image/png;base64,DD", "original"),
        ImageItem("data:application/octet-stream;base64,EE", "high"),
        ImageItem("data:x", "high"),
        ImageItem("data:x", "auto"),  # the second argument wins
        ImageItem("data:image/png;base64,FF", "high"),  # a block's own detail is ignored
        ImageItem("DATA:y", "high"),
    ]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("image('')", IMAGE_USAGE),
        ("image(42)", IMAGE_USAGE),
        ("image({image_url: 42})", IMAGE_USAGE),
        (
            "image('https://example.com/x.png')",
            "Tool call failed: remote image URLs are not supported in tool outputs."
            " Pass a base64 data URI instead",
        ),
        (
            "image('data:image/png;base64,AA', 'bad')",
            "image detail must be one of: auto, low, high, original",
        ),
        (
            "image({type: 'image', data: '', mimeType: 'image/png'})",
            "image expected MCP image data",
        ),
        ("generatedImage({})", IMAGE_USAGE),
        (
            "generatedImage({type: 'image_generation_call', result: 'QQ'})",
            'image only accepts MCP image blocks, got "image_generation_call"',
        ),
        (
            "generatedImage('data:image/png;base64,AA')",
            "generatedImage expects an image generation result object",
        ),
        ("audio('')", AUDIO_USAGE),
        (
            "audio('https://x')",
            "Tool call failed: invalid audio output. Pass a base64 data URI instead",
        ),
        ("content('str')", "content expects one MCP ContentBlock"),
        ("content({type: 'bogus'})", "content expects one MCP ContentBlock"),
        ("content({type: 'text'})", "content expects one MCP ContentBlock"),
        ("notify('')", "notify expects non-empty text"),
        ("notify(' ')", "notify expects non-empty text"),
        ("setTimeout('text(1)', 1)", "setTimeout expects a function callback"),
        ("store()", 'Unable to store "undefined". Only plain serializable objects can be stored.'),
        (
            "store('f', () => 1)",
            "failed to serialize JavaScript value: expected value at line 1 column 1",
        ),
    ],
)
async def test_helper_argument_errors(call: str, error: str) -> None:
    outcome, hooks = await run(call)
    assert outcome.error_text == error
    assert hooks.items == []


async def test_helper_errors_are_thrown_as_strings() -> None:
    texts = await texts_of(
        "try { image('') } catch (e) { text(typeof e); text(e instanceof Error) }"
    )
    assert texts == ["string", "false"]


def wav(milliseconds: int) -> str:
    rate, frames = 8000, 8 * milliseconds
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    data = b"\0\0" * frames
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data))
    riff = b"RIFF" + struct.pack("<I", len(body) + len(data)) + body + data
    return "data:audio/wav;base64," + base64.b64encode(riff).decode()


async def test_audio_forms_and_the_short_clip_rule() -> None:
    long_clip, short_clip = wav(100), wav(10)
    _, hooks = await run(
        f"audio('{long_clip}'); audio({{audio_url: 'data:a'}});"
        "audio({type: 'audio', data: 'RR', mimeType: 'audio/x'});"
        f"audio('{short_clip}'); audio('data:audio/wav;base64,AAAA')"
    )
    assert hooks.items == [
        AudioItem(long_clip),
        AudioItem("data:a"),
        AudioItem("data:audio/x;base64,RR"),
        TextItem(SHORT_CLIP_TEXT),
        AudioItem("data:audio/wav;base64,AAAA"),
    ]


async def test_content_blocks() -> None:
    _, hooks = await run(
        "content({type: 'text', text: 'hi'});"
        "content([{type: 'text', text: 'a'}, {type: 'text', text: 'b'}]);"
        "content({type: 'image', data: 'QQ', mimeType: 'image/png'});"
        "content({type: 'audio', data: 'QQ', mimeType: 'audio/wav'}); content([]);"
        "content({type: 'image', data: '', mimeType: 'image/png', detail: 'low'})"
    )
    assert hooks.items == [
        TextItem("hi"),
        TextItem("a"),
        TextItem("b"),
        ImageItem("data:image/png;base64,QQ", "high"),
        AudioItem("data:audio/wav;base64,QQ"),
        ImageItem("data:image/png;base64,", "high"),
    ]


async def test_content_emits_the_blocks_before_a_bad_one() -> None:
    outcome, hooks = await run("content([{type: 'text', text: 'a'}, 'bad'])")
    assert outcome.error_text == "content expects one MCP ContentBlock"
    assert hooks.items == [TextItem("a")]


# --------------------------------------------------------------------------- error texts


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("throw new Error('boom')", "Error: boom\n    at exec_main.mjs:1:7"),
        ("tools.nope()", "TypeError: tools.nope is not a function\n    at exec_main.mjs:1:7"),
        ("x is y", "SyntaxError: Unexpected identifier 'is'"),
        ("return 1", "SyntaxError: Illegal return statement"),
        ("text('a')\nif (true) { return }", "SyntaxError: Illegal return statement"),
        ("throw 'a string'", "a string"),
        ("throw 'at exec_main.mjs:1:99'", "at exec_main.mjs:1:99"),  # strings verbatim
        ("throw 42", "42"),
        ("throw null", "null"),
        ("throw undefined", "undefined"),
        ("throw {a: 1}", "[object Object]"),
        ("throw {stack: 's1'}", "s1"),
        ("const e = new Error('n'); e.stack = undefined; throw e", "Error: n"),
        ("const e = new Error('n'); e.name = 'N2'; throw e", "N2: n\n    at exec_main.mjs:1:11"),
        ("await Promise.reject(new Error('rej'))", "Error: rej\n    at exec_main.mjs:1:22"),
        (
            "async function f() { await 0; throw new Error('inner') }\nawait f()",
            "Error: inner\n    at f (exec_main.mjs:1:37)\n    at async exec_main.mjs:2:1",
        ),
        (
            "function g() { throw new TypeError('tt') }\ng()",
            "TypeError: tt\n    at g (exec_main.mjs:1:22)\n    at exec_main.mjs:2:1",
        ),
        (
            "[1].map(() => { throw new Error('m') })",
            "Error: m\n    at exec_main.mjs:1:23\n    at Array.map (<anonymous>)\n"
            "    at exec_main.mjs:1:5",
        ),
        ("import x from 'y'", "Unsupported import in exec: y"),
        (
            "await stream_settled([1, 2])",
            "TypeError: stream_settled requires a callback\n    at exec_main.mjs:1:7",
        ),
    ],
)
async def test_error_texts(source: str, error: str) -> None:
    assert await error_of(source) == error


async def test_unhandled_rejections_are_ignored() -> None:
    assert await texts_of("Promise.reject(new Error('unh')); text('fine')") == ["fine"]


async def test_exit_ends_the_cell_successfully_and_cannot_be_caught() -> None:
    outcome, hooks = await run(
        "text('before'); try { exit(3) } catch (e) { text('caught') } text('after')"
    )
    assert outcome == CellOutcome(None)
    assert hooks.texts == ["before"]


# --------------------------------------------------------------------------- tools


async def test_tools_and_all_tools_use_normalised_names_last_duplicate_wins() -> None:
    tools = [
        ToolDefinition("my-tool.x", "first"),
        ToolDefinition("123 bad", "digits"),
        ToolDefinition("my_tool_x", "second"),
    ]
    outcome, hooks = await run(
        "text(Object.keys(tools).join()); text(ALL_TOOLS);text(await tools.my_tool_x({q: 1}))",
        tools=tools,
    )
    assert outcome.error_text is None
    assert hooks.texts == [
        "my_tool_x,_23_bad",
        '[{"name":"my_tool_x","description":"first"},{"name":"_23_bad","description":"digits"},'
        '{"name":"my_tool_x","description":"second"}]',
        '{"echo":{"q":1}}',
    ]
    assert hooks.calls == [("my_tool_x", {"q": 1})]
    assert bind_tools(tools)["my_tool_x"].description == "second"


def test_identifier_normalisation() -> None:
    assert normalize_identifier("my-tool.x") == "my_tool_x"
    assert normalize_identifier("123 bad") == "_23_bad"
    assert normalize_identifier("") == "_"
    assert normalize_identifier("$ok_1") == "$ok_1"
    assert normalize_identifier("é") == "_"


async def test_tool_input_is_serialised_with_json_stringify_semantics() -> None:
    outcome, hooks = await run(
        "await tools.echo(); await tools.echo(undefined);"
        "await tools.echo({d: new Date(0), n: NaN, big: 1e400, u: undefined, f() {}});"
        "await tools.echo([1, undefined], 'ignored')"
    )
    assert outcome.error_text is None
    assert [input for _, input in hooks.calls] == [
        None,
        None,
        {"d": "1970-01-01T00:00:00.000Z", "n": None, "big": None},
        [1, None],
    ]


async def test_unserialisable_tool_input_throws_synchronously_and_sends_nothing() -> None:
    assert await error_of("await tools.echo(1n)") == (
        "TypeError: Do not know how to serialize a BigInt\n    at exec_main.mjs:1:13"
    )
    caught = await texts_of("try { tools.echo(1n) } catch (e) { text(e) }")
    assert caught == ["TypeError: Do not know how to serialize a BigInt\n    at exec_main.mjs:1:13"]
    _, hooks = await run("try { tools.echo(() => 1) } catch (e) { text(typeof e); text(e) }")
    assert hooks.texts == [
        "string",
        "failed to serialize JavaScript value: expected value at line 1 column 1",
    ]
    assert hooks.calls == []


async def test_tool_results_resolve_and_rejections_are_the_message_string() -> None:
    texts = await texts_of(
        "text(await tools.echo({a: 1}));"
        "try { await tools.fail({}) } catch (e) { text(typeof e); text(e); text(e.message) }"
    )
    assert texts == ['{"echo":{"a":1}}', "string", "tool exploded", "undefined"]
    assert await error_of("await tools.fail({})") == "tool exploded"


async def test_concurrent_tool_calls_of_one_cell() -> None:
    texts = await texts_of(
        "const r = await Promise.all([tools.echo({i: 1}), tools.echo({i: 2}), tools.echo({i: 3})]);"
        "text(r.map(x => x.echo.i).join())"
    )
    assert texts == ["1,2,3"]


async def test_unawaited_tool_calls_are_cancelled_when_the_script_ends() -> None:
    outcome, hooks = await run("tools.gate({}); text('end')")
    assert outcome == CellOutcome(None)
    assert hooks.cancelled == ["gate"]
    assert hooks.texts == ["end"]


async def test_tool_result_reaches_a_cell_that_is_still_running() -> None:
    hooks = Hooks()
    async with trio.open_nursery() as nursery:
        results: list[CellOutcome] = []

        async def cell() -> None:
            outcome, _ = await run("text('waiting'); text((await tools.gate({})).echo.k)", hooks)
            results.append(outcome)

        nursery.start_soon(cell)
        await hooks.call_started.wait()
        assert hooks.texts == ["waiting"]
        hooks.gate.set()
    assert results == [CellOutcome(None)]
    assert hooks.texts == ["waiting", "undefined"]


async def test_as_settled_yields_in_settlement_order() -> None:
    texts = await texts_of(
        "const it = as_settled([tools.echo({x: 1}), Promise.reject('r'), 5]);"
        "text(Object.prototype.toString.call(it)); for await (const r of it) text(r)"
    )
    assert texts == [
        "[object AsyncGenerator]",
        '{"index":1,"status":"rejected","reason":"r"}',
        '{"index":2,"status":"fulfilled","value":5}',
        '{"index":0,"status":"fulfilled","value":{"echo":{"x":1}}}',
    ]
    assert await error_of("for await (const r of as_settled(5)) {}") == (
        "TypeError: promises is not iterable\n    at exec_main.mjs:1:23"
    )


async def test_stream_settled_in_settlement_order_with_map_keys() -> None:
    hooks = Hooks()
    hooks.gate.set()
    outcome, _ = await run(
        "const out = [];"
        "const pairs = new Map([['slow', tools.gate({})], ['now', 1]]);"
        "await stream_settled(pairs, r => out.push(r.index));"
        "text(out)",
        hooks,
    )
    assert outcome.error_text is None
    assert hooks.texts == ['["now","slow"]']


# --------------------------------------------------------------------------- control


async def test_notify_and_yield_control_reach_the_hooks_in_order() -> None:
    outcome, hooks = await run(
        "text('a'); yield_control(); notify('hi'); notify(42); notify(null);"
        "notify(undefined); notify({a: 1}); notify(1n); text(typeof notify('x'))"
    )
    assert outcome.error_text is None
    assert hooks.events == [
        ("emit", TextItem("a")),
        ("yield",),
        ("notify", "hi"),
        ("notify", "42"),
        ("notify", "null"),
        ("notify", "undefined"),
        ("notify", '{"a":1}'),
        ("notify", "1"),
        ("notify", "x"),
        ("emit", TextItem("undefined")),
    ]


async def test_a_refused_notification_throws_at_the_call() -> None:
    texts = await texts_of(
        "try { notify('refuse me') } catch (e) { text(typeof e); text(e) } notify('after')"
    )
    assert texts == ["string", "code-mode host has too many pending delegate calls"]
    assert await error_of("notify('refuse me')") == (
        "code-mode host has too many pending delegate calls"
    )


async def test_store_and_load_through_the_hooks() -> None:
    session_store: dict[str, Any] = {"old": [1, 2]}
    hooks = Hooks(session_store)
    outcome, _ = await run(
        "store('k', {a: 1, u: undefined, d: new Date(0)}); text(load('k'));"
        "text(typeof load('nope')); text(load('old')); store(1, 2); text(load('1'));"
        "const o = load('k'); o.x = 1; text(load('k'))",
        hooks,
    )
    assert outcome.error_text is None
    assert hooks.texts == [
        '{"a":1,"d":"1970-01-01T00:00:00.000Z"}',
        "undefined",
        "[1,2]",
        "2",
        '{"a":1,"d":"1970-01-01T00:00:00.000Z"}',
    ]
    assert session_store["k"] == {"a": 1, "d": "1970-01-01T00:00:00.000Z"}
    assert session_store["1"] == 2


async def test_store_persists_across_cells_of_a_session() -> None:
    session_store: dict[str, Any] = {}
    await run("store('n', 41)", Hooks(session_store))
    _, hooks = await run("text(load('n') + 1)", Hooks(session_store))
    assert hooks.texts == ["42"]


async def test_large_values_cross_the_channel_intact() -> None:
    session_store: dict[str, Any] = {}
    outcome, hooks = await run(
        "const big = 'é'.repeat(300000) + '\\ud83d\\ude00'; store('big', big);"
        "const back = load('big'); text(back === big); text(big)",
        Hooks(session_store),
    )
    assert outcome.error_text is None
    assert hooks.texts[0] == "true"
    assert hooks.texts[1] == "é" * 300000 + "\U0001f600"
    assert session_store["big"] == hooks.texts[1]


async def test_bigint_store_fails_at_the_call_site() -> None:
    assert await error_of("store('b', 1n)") == (
        "TypeError: Do not know how to serialize a BigInt\n    at exec_main.mjs:1:1"
    )


# --------------------------------------------------------------------------- timers


@pytest.fixture
def script_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only once V8 has been quiet for a while.

    The script runs on V8's thread; a clock that jumped whenever Trio alone is idle would
    leap past the test's deadline while V8 is still working.
    """
    return trio.testing.MockClock(autojump_threshold=0.15)


async def timer_texts(source: str) -> list[str]:
    # A rare memory poll keeps the virtual clock's jumps few.
    outcome, hooks = await run(source, runtime=V8CellRuntime(memory_poll_interval=60))
    assert outcome.error_text is None, outcome.error_text
    return hooks.texts


async def test_timers_fire_in_order_and_clear_timeout_cancels(
    script_clock: trio.testing.MockClock,
) -> None:
    texts = await timer_texts(
        "setTimeout(() => text('late'), 50); setTimeout(() => text('early'), 10);"
        "setTimeout(() => text('same'), 10); const id = setTimeout(() => text('no'), 5);"
        "clearTimeout(id); setTimeout(() => text('negative'), -5);"
        "await new Promise(r => setTimeout(r, 100)); text('main')"
    )
    assert texts == ["negative", "early", "same", "late", "main"]


async def test_timer_ids_and_extra_arguments(script_clock: trio.testing.MockClock) -> None:
    texts = await timer_texts(
        "text(setTimeout(() => {}, 10)); text(setTimeout(() => {}, 10));"
        "setTimeout((a, b) => text(a + b), 1, 'x', 'y'); await new Promise(r => setTimeout(r, 20))"
    )
    assert texts == ["1", "2", "NaN"]


async def test_timers_wait_on_the_trio_clock(script_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    await timer_texts("await new Promise(r => setTimeout(r, 5000))")
    assert trio.current_time() - start >= 5.0


async def test_pending_timers_are_dropped_at_script_end(
    script_clock: trio.testing.MockClock,
) -> None:
    assert await timer_texts("setTimeout(() => text('x'), 200); text('main')") == ["main"]


async def test_an_error_in_a_timer_fails_the_cell_keeping_earlier_output(
    script_clock: trio.testing.MockClock,
) -> None:
    outcome, hooks = await run(
        "setTimeout(() => { throw new Error('timer err') }, 10); text('early');"
        "await new Promise(r => setTimeout(r, 100)); text('after')",
        runtime=V8CellRuntime(memory_poll_interval=60),
    )
    assert hooks.texts == ["early"]
    assert outcome.error_text == "Error: timer err\n    at exec_main.mjs:1:26"


# --------------------------------------------------------------------------- termination, memory


async def test_cancelling_terminates_a_busy_loop_promptly_and_frees_the_isolate() -> None:
    before = live_isolates()
    hooks = Hooks()
    started = time.monotonic()
    with trio.fail_after(20), trio.move_on_after(0.2) as scope:
        await V8CellRuntime().run(
            "text('x'); while (true) {}", TOOLS, hooks, max_heap_size_bytes=None
        )
    assert scope.cancelled_caught
    assert time.monotonic() - started < 5
    assert hooks.texts == ["x"]  # output written before the loop reached the host
    assert live_isolates() == before


async def test_cancelling_terminates_a_busy_loop_in_a_continuation() -> None:
    hooks = Hooks()
    hooks.gate.set()
    with trio.fail_after(20), trio.move_on_after(0.3) as scope:
        await V8CellRuntime().run(
            "await tools.gate({}); text('resumed'); for (;;) {}",
            TOOLS,
            hooks,
            max_heap_size_bytes=None,
        )
    assert scope.cancelled_caught
    assert hooks.texts == ["resumed"]


async def test_cancelling_while_the_isolate_is_being_created_still_frees_it() -> None:
    before = live_isolates()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "text('never')")
            await trio.lowlevel.checkpoint()  # the cell now waits for its isolate
            nursery.cancel_scope.cancel()
    assert live_isolates() == before


async def test_cancelling_a_cell_cancels_its_tool_calls() -> None:
    hooks = Hooks()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "await tools.gate({})", hooks)
        await hooks.call_started.wait()
        nursery.cancel_scope.cancel()
    assert hooks.cancelled == ["gate"]


async def test_several_cells_progress_concurrently_under_one_loop() -> None:
    runtime = V8CellRuntime()
    blocked = Hooks()
    outcomes: dict[str, CellOutcome] = {}

    async def cell(name: str, source: str, hooks: Hooks) -> None:
        outcomes[name], _ = await run(source, hooks, runtime=runtime)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cell, "blocked", "text((await tools.gate({})).echo.n)", blocked)
            busy = trio.CancelScope()

            async def busy_cell() -> None:
                with busy:
                    await run("while (true) {}", runtime=runtime)

            nursery.start_soon(busy_cell)
            await blocked.call_started.wait()
            async with trio.open_nursery() as inner:
                for i in range(8):
                    source = f"for (let i = 0; i < 3; i++) await tools.echo({{i}}); text('{i}')"
                    inner.start_soon(cell, str(i), source, Hooks())
            # Eight cells finished while one waits on a tool and one spins.
            assert [outcomes[str(i)] for i in range(8)] == [CellOutcome(None)] * 8
            assert "blocked" not in outcomes
            blocked.gate.set()
            busy.cancel()
    assert outcomes["blocked"] == CellOutcome(None)
    assert blocked.texts == ["undefined"]


async def test_running_out_of_heap_fails_the_cell_cleanly() -> None:
    limit = MIN_HEAP_LIMIT_BYTES
    expected = f"RangeError: the cell ran out of memory (V8 heap limit {limit} bytes)"
    outcome, _ = await run(
        "const a = []; while (true) a.push(new Array(100000).fill(1.5))",
        max_heap_size_bytes=limit,
    )
    assert outcome.error_text == expected
    outcome, _ = await run(
        "await null; const a = []; while (true) a.push('x'.repeat(100000) + Math.random())",
        max_heap_size_bytes=limit,
    )
    assert outcome.error_text == expected
    # The process and the next cell are unaffected.
    assert await texts_of("text('still here')") == ["still here"]


def test_a_sessions_heap_cap_only_lowers_the_default_never_below_the_minimum() -> None:
    runtime = V8CellRuntime(default_heap_limit_bytes=512 * 1024 * 1024)
    assert runtime.heap_limit_for(None) == 512 * 1024 * 1024
    assert runtime.heap_limit_for(0) == MIN_HEAP_LIMIT_BYTES
    assert runtime.heap_limit_for(2 * MIN_HEAP_LIMIT_BYTES) == 2 * MIN_HEAP_LIMIT_BYTES
    assert runtime.heap_limit_for(8 * 1024**3) == 512 * 1024 * 1024


async def test_a_cap_above_v8s_own_heap_limit_is_lowered_below_it() -> None:
    # 64 GiB is past any V8 heap limit: the runaway cell must still fail alone.
    runtime = V8CellRuntime(default_heap_limit_bytes=64 * 1024**3)
    outcome, _ = await run(
        "const a = []; while (true) a.push(new Array(100000).fill(1.5))", runtime=runtime
    )
    assert outcome.error_text is not None
    assert outcome.error_text.startswith("RangeError: the cell ran out of memory (V8 heap limit ")


async def test_a_failing_hook_surfaces_from_run_and_frees_the_isolate() -> None:
    class Broken(Hooks):
        def emit(self, item: ContentItem) -> None:
            raise RuntimeError("shell bug")

    class BrokenTool(Hooks):
        async def call_tool(self, binding: str, input: Any) -> Any:
            raise KeyError(binding)

    before = live_isolates()
    with pytest.raises(RuntimeError, match="shell bug"):
        await run("text('x'); while (true) {}", Broken())
    with pytest.raises(KeyError, match="echo"):
        await run("await tools.echo({})", BrokenTool())
    assert live_isolates() == before


async def test_cell_start_is_fast() -> None:
    runtime = V8CellRuntime()
    await run("", runtime=runtime)  # the first cell loads V8
    started = time.monotonic()
    for _ in range(5):
        await run("text(1)", runtime=runtime)
    assert (time.monotonic() - started) / 5 < 0.25


FATAL_OOM_SCRIPT = """
import py_mini_racer
import trio

# A small V8 heap, so that V8's own limit is reached within seconds.
py_mini_racer.init_mini_racer(flags=("--single-threaded", "--max-old-space-size=32"))

from codemode_trio.host.runtime import MISSING
from codemode_trio.host.v8 import V8CellRuntime


class Hooks:
    def emit(self, item): print("emitted", item.text, flush=True)
    def yield_control(self): pass
    def notify(self, text): pass
    async def call_tool(self, binding, input): return None
    def store(self, key, value): pass
    def load(self, key): return MISSING


async def main():
    # One builtin growing one array never reaches an interrupt check, so the cap does not
    # stop it and V8's own heap limit is hit.
    source = "text('started'); new Array(2 ** 27).fill(1.5)"
    print(await V8CellRuntime().run(source, [], Hooks(), max_heap_size_bytes=None))


trio.run(main)
"""


async def test_a_fatal_v8_out_of_memory_ends_the_process_with_a_message(tmp_path: Path) -> None:
    script = tmp_path / "fatal_oom.py"
    script.write_text(FATAL_OOM_SCRIPT)
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, str(script)], capture_stdout=True, capture_stderr=True, check=False
        )
    assert done.returncode != 0
    assert done.stdout.startswith(b"emitted started\n")
    assert b"Fatal JavaScript out of memory" in done.stderr


async def test_cancelling_terminates_an_endless_chain_of_promise_jobs() -> None:
    before = live_isolates()
    with trio.fail_after(20), trio.move_on_after(0.3) as scope:
        await run("text('spinning'); for (;;) await null")
    assert scope.cancelled_caught
    assert live_isolates() == before


EXIT_SCRIPT = """
import trio

from codemode_trio.host.runtime import MISSING
from codemode_trio.host.v8 import V8CellRuntime
from codemode_trio.protocol.content import ToolDefinition


class Hooks:
    def emit(self, item): print(item.text, flush=True)
    def yield_control(self): pass
    def notify(self, text): pass
    async def call_tool(self, binding, input): await trio.sleep_forever()
    def store(self, key, value): pass
    def load(self, key): return MISSING


async def main():
    runtime = V8CellRuntime()
    await runtime.run("text('one')", [], Hooks(), max_heap_size_bytes=None)
    with trio.move_on_after(0.2):
        await runtime.run("while (true) {}", [], Hooks(), max_heap_size_bytes=None)
    with trio.move_on_after(0.2):
        # Terminated while its tool call is outstanding.
        await runtime.run(
            "await tools.wait({})", [ToolDefinition("wait")], Hooks(), max_heap_size_bytes=None
        )


trio.run(main)
"""


async def test_the_interpreter_exits_after_cells_ended_or_were_terminated(tmp_path: Path) -> None:
    script = tmp_path / "cells_then_exit.py"
    script.write_text(EXIT_SCRIPT)
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(script)], capture_stdout=True, capture_stderr=True, check=False
        )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"one\n", b"")


# Scripts whose output items and error_text must be the real host's, item for item.
SAME_AS_REAL_HOST = [
    "throw new Error('boom')",
    "tools.nope()",
    "await tools.echo({}); throw new Error('late')",
    "async function f() { await 0; throw new Error('inner') }\nawait f()",
    "[1].map(() => { throw new Error('m') })",
    "throw {a: 1}",
    "throw undefined",
    "const e = new Error('n'); e.stack = 'custom'; throw e",
    "x is y",
    "return 1",
    "import x from 'y'",
    "export const a = 1; text(a)",
    "null.foo",
    "text(typeof this)",
    "text(undefined); text(null); text(42); text({a: 1}); text(NaN); text(() => 1); text(1n)",
    "text(new Date(0)); text([undefined]); text(-0); text(1e21); text('x', 'y')",
    "const o = {}; o.o = o; text(o)",
    "text({a: 1n})",
    "image('https://x')",
    "image('data:image/png;base64,AA', 'bad')",
    "image({type: 'image', data: 'CC', mimeType: 'image/gif'}, 'low'); image('data:x', 'Auto')",
    "image({image_url: 'data:x', detail: 'LOW'}, 'high')",
    "image('  ')",
    "generatedImage({type: 'image_generation_call', result: 'QQ'})",
    "audio('data:audio/wav;base64,AAAA'); audio({type: 'audio', data: 'RR'})",
    "audio({type: 'text'})",
    "content([{type: 'text', text: 'a'}, {type: 'image', data: '', mimeType: 'image/png'}])",
    "content([{type: 'text', text: 'a'}, 'bad'])",
    "notify(' ')",
    "store('k', {a: 1, u: undefined}); text(load('k')); text(typeof load('nope'))",
    "store('u', undefined)",
    "store(Symbol(), 1)",
    "await tools.echo(1n)",
    "try { tools.echo(() => 1) } catch (e) { text(typeof e); text(e) }",
    "text(await tools.echo({d: new Date(0), n: NaN, u: undefined}))",
    "await tools.fail({})",
    "try { await tools.fail({}) } catch (e) { text(typeof e); text(e) }",
    "tools.echo({}); text('end')",
    "text('before'); try { exit() } catch (e) { text('caught') } text('after')",
    "Promise.reject(new Error('unh')); text('fine')",
    "const it = as_settled([tools.echo({x: 1}), Promise.reject('r'), 5]);"
    " for await (const r of it) text(r)",
    "setTimeout(() => { throw new Error('timer err') }, 10); text('early');"
    " await new Promise(r => setTimeout(r, 100)); text('after')",
    "let n = 0; setTimeout(() => { n++; text('t' + n) }, 0); await null; text('m' + n);"
    " await new Promise(r => setTimeout(r, 1)); text('m' + n)",
    "setTimeout(() => text('x'), 200); text('main')",
    "setTimeout((a, b) => text(a + b), 1, 'x', 'y'); await new Promise(r => setTimeout(r, 20))",
    "text(setTimeout(() => {}, 1)); text(setTimeout(() => {}, 1)); setTimeout('code', 1)",
    "text(Object.getOwnPropertyNames(text)); text(String(tools.echo)); text(ALL_TOOLS)",
    "text(Math.sumPrecise([1e20, 0.1, -1e20])); Math.sumPrecise([1, 'a'])",
    "text([...Iterator.concat([1], [2])]); Iterator.concat({})",
    "text(new Map().getOrInsert('k', 1))",
]


class EchoHooks(Hooks):
    """Tools as the real host's ToolRegistry below answers them."""

    async def call_tool(self, binding: str, input: Any) -> Any:
        if binding == "fail":
            raise ToolCallRejected("tool exploded")
        return input


@pytest.mark.host
async def test_scripts_behave_as_on_the_real_host(host_path: Path) -> None:
    registry = cm.ToolRegistry()

    @registry.function(description="Echo the input back")
    async def echo(**fields: Any) -> Any:
        return fields

    @registry.function(description="Always rejects")
    async def fail(**fields: Any) -> Any:
        raise cm.ToolError("tool exploded")

    tools = [
        ToolDefinition("echo", "Echo the input back"),
        ToolDefinition("fail", "Always rejects"),
    ]
    mismatches = []
    with trio.fail_after(120):
        async with (
            cm.open_host_process(host_path) as conn,
            conn.open_session(registry) as session,
        ):
            for script in SAME_AS_REAL_HOST:
                # The same definitions on both sides (the registry's own carry declarations).
                real = await session.run(script, tools=tools)
                outcome, hooks = await run(script, EchoHooks(), tools=tools)
                expected = (list(real.content_items), real.error_text)
                if (hooks.items, outcome.error_text) != expected:
                    mismatches.append((script, expected, (hooks.items, outcome.error_text)))
    assert mismatches == []


async def test_without_mini_racer_the_runtime_module_does_not_import() -> None:
    # The shell turns this ImportError into its "install codemode-trio[host]" message.
    probe = (
        "import sys; sys.modules['py_mini_racer'] = None\n"
        "try:\n    import codemode_trio.host.v8\nexcept ImportError:\n    print('ImportError')\n"
    )
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", probe], capture_stdout=True, capture_stderr=True, check=False
        )
    assert (done.returncode, done.stdout) == (0, b"ImportError\n")
