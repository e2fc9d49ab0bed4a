"""Every form of ``import`` in a cell gets host 0.171.0's answer, from it and from ``serve``.

The expected values are what 0.171.0 answers; each test runs against both hosts through the
public client, so a change in either shows here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import codemode_trio as cm

pytestmark = pytest.mark.host

# (script, texts emitted, error_text)
CASES: list[tuple[str, list[str], str | None]] = [
    (
        "try { await import('x') } catch (e) { text(String(e)) }",
        ["unsupported import in exec"],
        None,
    ),
    (
        "try { await import('x') } catch (e) { text(typeof e); text(String(e instanceof Error)) }",
        ["string", "false"],
        None,
    ),
    ("await import('x')", [], "unsupported import in exec"),
    ("text('before'); await import('x'); text('after')", ["before"], "unsupported import in exec"),
    ("function f() { return import('x') }\nawait f()", [], "unsupported import in exec"),
    ("import('x').catch(e => text(typeof e))", ["string"], None),
    # Out of the lexer's reach (serve's V8 refuses it its own way), uncaught all the same.
    ("await eval(\"import('x')\")", [], "unsupported import in exec"),
    ("import('x'); text('unhandled is ignored')", ["unhandled is ignored"], None),
    (
        "const p = import('x'); text(String(p instanceof Promise)); await p.catch(() => {})",
        ["true"],
        None,
    ),
    (
        "try { await import /* c */ ('x') } catch (e) { text(e) }",
        ["unsupported import in exec"],
        None,
    ),
    (
        "let n = 0; try { await import({toString() { n++; return 'x' }}) } catch (e) { text(e) }"
        "\ntext(String(n))",
        ["unsupported import in exec", "1"],
        None,
    ),
    (
        "try { await import('x', {with: {type: 'json'}}) } catch (e) { text(e) }",
        ["unsupported import in exec"],
        None,
    ),
    (
        "try { await import('x', 5) } catch (e) { text(String(e)) }",
        ["TypeError: The second argument to import() must be an object"],
        None,
    ),
    (
        "try { await import('x', {with: 5}) } catch (e) { text(String(e)) }",
        ["TypeError: The 'with' option must be an object"],
        None,
    ),
    (
        "try { await import('x', {with: {type: 1}}) } catch (e) { text(String(e)) }",
        ["TypeError: Import attribute value must be a string"],
        None,
    ),
    (
        "try { await import(Symbol()) } catch (e) { text(String(e)) }",
        ["TypeError: Cannot convert a Symbol value to a string"],
        None,
    ),
    (
        "const order = []; import('x').catch(() => order.push('import'));"
        " Promise.reject(1).catch(() => order.push('reject')); await null; await null;"
        " text(order.join())",
        ["import,reject"],
        None,
    ),
    ("text(typeof import.meta); text(JSON.stringify(import.meta))", ["object", "{}"], None),
    (
        "text(String(import.meta === import.meta));"
        " text(String(Object.getPrototypeOf(import.meta)))",
        ["true", "null"],
        None,
    ),
    ("import.meta.x = 1; text(String(import.meta.x))", ["1"], None),
    ("import.meta = 1", [], "SyntaxError: Invalid left-hand side in assignment"),
    ("text('no'); import()", [], "SyntaxError: import() requires a specifier"),
    ("text('no'); new import('x')", [], "SyntaxError: Cannot use new with import"),
    ("text('no'); import('x', {}, 3)", [], "SyntaxError: Unexpected number"),
    ("import x from 'y'", [], "Unsupported import in exec: y"),
    ("import('a'); import * as ns from 'b'", [], "Unsupported import in exec: b"),
    ("// import x from 'q'\nimport 'z'", [], "Unsupported import in exec: z"),
    (
        "text('import(x)'); text(`import(${1 + 1})`); // import('y')\n"
        "/* import('z') */ text(String(/import\\('x'\\)/.test(\"import('x')\")))",
        ["import(x)", "import(2)", "true"],
        None,
    ),
    (
        "const o = {import(x) { return 'm' + x }}; class A { static import() { return 'c' } }"
        "\ntext(o.import(1) + A.import())",
        ["m1c"],
        None,
    ),
    # A "/" after a postfix "++" or "--" divides: the import() after it is still found.
    (
        "let a = 1; a++ / 2;"
        " try { await import('x') } catch (e) { text(typeof e); text(String(e)) }",
        ["string", "unsupported import in exec"],
        None,
    ),
    ("let a = 1; a-- / 2; await import('x')", [], "unsupported import in exec"),
    ("let a = 1; a++ / 2; text(typeof import.meta)", ["object"], None),
    ("let a = 1; a--\n/ 2; text(typeof import.meta)", ["object"], None),
    # ...but after a line break "++" is a prefix, and the "/" after it starts a regex.
    ("let a = 1\n++/x/.lastIndex; text(typeof import.meta)", ["object"], None),
    (
        "try { await import('x') } catch (e) { throw new Error('after ' + e) }",
        [],
        "Error: after unsupported import in exec\n    at exec_main.mjs:1:45",
    ),
]


@pytest.mark.parametrize(("script", "texts", "error"), CASES, ids=range(len(CASES)))
async def test_import_answers_as_the_reference_host(
    host_path: Path, script: str, texts: list[str], error: str | None
) -> None:
    with trio.fail_after(30):
        async with cm.open_host_process(host_path) as conn, conn.open_session() as session:
            result = await session.run(script)
    assert result.kind == "result"
    assert [item.text for item in result.content_items if isinstance(item, cm.TextItem)] == texts
    assert result.error_text == error
