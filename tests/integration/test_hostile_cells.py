"""Cells that feed the host's own functions bad input: each fails alone, as on 0.171.0.

Every scenario runs on the real host 0.171.0 and on ``codemode-trio serve``, and asserts the
reference host's texts; the session is still usable afterwards.
"""

from __future__ import annotations

from pathlib import Path

import trio

import codemode_trio as cm

from .conftest import Recorder

DEEP = "function deep(n) { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v }\n"
DEPTH_TEXT = "failed to serialize JavaScript value: recursion limit exceeded at line 1 column {}"


async def test_set_timeout_takes_any_delay_as_a_number(host_path: Path) -> None:
    # A delay that is NaN, infinite or negative is none: those timers fire at once, before a
    # 20 ms one; a huge finite delay is a real one. (0.171.0 does not always fire timers of no
    # delay in the order they were set: two of them swapped in one run out of many.)
    delays = "[Infinity, -Infinity, NaN, -5, 'abc', undefined, null, {valueOf() { return 0 }}]"
    with trio.fail_after(60):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as s:
            order = await s.run(
                "const fired = [];"
                "setTimeout(() => fired.push('20ms'), 20);"
                "setTimeout(() => fired.push('never'), 1e300);"
                f"const ids = {delays}.map((d, i) => setTimeout(() => fired.push(i), d));"
                "await new Promise(r => setTimeout(r, 60));"
                "text(typeof ids[0] + ' ' + ids.join(',') + ': ' + fired.join(','))"
            )
            bigint = await s.run("await new Promise(r => setTimeout(r, 10n))")
            symbol = await s.run(
                "try { setTimeout(() => {}, Symbol()) } catch (e) { text(String(e)) }"
            )
            not_a_function = await s.run("try { setTimeout('x', Symbol()) } catch (e) { text(e) }")
            after = await s.run("text(1 + 1)")
    assert order.text is not None
    ids, _, fired = order.text.partition(": ")
    assert ids == "number 3,4,5,6,7,8,9,10"
    *immediate, last = fired.split(",")
    assert sorted(immediate) == [str(i) for i in range(8)]
    assert last == "20ms"
    assert bigint.error_text == (
        "TypeError: Cannot convert a BigInt value to a number\n"
        "    at exec_main.mjs:1:24\n"
        "    at new Promise (<anonymous>)\n"
        "    at exec_main.mjs:1:7"
    )
    assert symbol.text == "TypeError: Cannot convert a Symbol value to a number"
    assert not_a_function.text == "setTimeout expects a function callback"
    assert after.text == "2"


async def test_values_nested_128_deep_fail_inside_the_cell(
    host_path: Path, recorder: Recorder
) -> None:
    # The host parses a value's JSON again, with a recursion limit of 128 nested arrays and
    # objects; the column is the 128th opening bracket's, in UTF-8 bytes.
    with trio.fail_after(60):
        async with cm.open_host_process(host_path) as conn, conn.open_session(recorder.tools) as s:
            stored = await s.run(
                DEEP + "for (const n of [127, 128, 3000]) {"
                "  try { store('k' + n, deep(n)); text(n + ' ok') } catch (e) { text(e) } }"
                "text(JSON.stringify(load('k127')).length)"
            )
            wide = await s.run(
                DEEP + "try { store('k', {'ééé': 'ü😀', s: '\"\\\\[[', x: deep(127)}) }"
                " catch (e) { text(typeof e + ': ' + e) }"
            )
            argument = await s.run(
                DEEP + "for (const n of [120, 127]) {"
                "  try { await tools.echo({value: deep(n)}); text(n + ' ok') }"
                "  catch (e) { text(e) } }"
            )
            uncaught = await s.run(DEEP + "await tools.echo({value: deep(3000)})")
            printed = await s.run(
                DEEP + "text(JSON.stringify(deep(3000)).length); notify(deep(3000))"
            )
            after = await s.run("text(1 + 1)")
    assert stored.text == f"127 ok\n{DEPTH_TEXT.format(128)}\n{DEPTH_TEXT.format(128)}\n255"
    assert wide.text == "string: " + DEPTH_TEXT.format(163)
    assert argument.text == f"120 ok\n{DEPTH_TEXT.format(136)}"
    assert uncaught.error_text == DEPTH_TEXT.format(136)
    # text() and notify() have no such limit.
    assert printed.error_text is None and printed.text == "6001"
    assert after.text == "2"


async def test_a_cell_may_set_hundreds_of_thousands_of_timers(host_path: Path) -> None:
    with trio.fail_after(120):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as s:
            pending = await s.run(
                "for (let i = 0; i < 300000; i++) setTimeout(() => {}, 1e9); text('set')"
            )
            fired = await s.run(
                "let n = 0; for (let i = 0; i < 5000; i++) setTimeout(() => n++, 0);"
                "await new Promise(r => setTimeout(r, 1)); text(n)"
            )
            # Each timer's callback is a task of its own: the jobs it queues run before the
            # next timer's callback.
            ordered = await s.run(
                "const out = [];"
                "setTimeout(() => Promise.resolve().then(() => out.push('a2')), 0);"
                "setTimeout(() => out.push('b'), 0);"
                "await new Promise(r => setTimeout(r, 5)); text(out.join(','))"
            )
            after = await s.run("text(1 + 1)")
    assert pending.text == "set"
    assert fired.text == "5000"
    assert ordered.text == "a2,b"
    assert after.text == "2"


async def test_huge_strings_and_deep_recursion_fail_in_their_cell(
    host_path: Path, recorder: Recorder
) -> None:
    with trio.fail_after(120):
        async with cm.open_host_process(host_path) as conn, conn.open_session(recorder.tools) as s:
            # A quarter-gigabyte value is stored (V8's fast JSON.stringify path would abort the
            # process on it: serve turns that path off).
            stored = await s.run("store('big', 'x'.repeat(2 ** 28)); text('ok')")
            too_long = await s.run("const s = 'x'.repeat(2 ** 29)")
            argument = await s.run(
                "try { await tools.echo({v: 'x'.repeat(2 ** 29 - 24)}) }"
                " catch (e) { text(String(e)) }"
            )
            recursion = await s.run(
                "function f() { f() }\ntry { f() } catch (e) { text(String(e)) }"
            )
            uncaught = await s.run("function f() { f() }\nawait Promise.resolve().then(() => f())")
            after = await s.run("text(1 + 1)")
    assert stored.text == "ok"
    assert too_long.error_text == (
        "RangeError: Invalid string length\n    at String.repeat (<anonymous>)\n"
        "    at exec_main.mjs:1:15"
    )
    # Rejected with a string: V8's error text with the stack from the call.
    assert argument.text == "RangeError: Invalid string length\n    at exec_main.mjs:1:19"
    assert recursion.text == "RangeError: Maximum call stack size exceeded"
    # The frames' columns differ with V8's version (where the overflow is detected).
    overflow = "RangeError: Maximum call stack size exceeded\n    at f ("
    assert uncaught.error_text is not None and uncaught.error_text.startswith(overflow)
    assert after.text == "2"
