"""The lexer that finds a cell's ``import`` keywords, and the two rewrites built on it."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemode_trio.host.dynamic_import import (
    CHECK_EVERY,
    REPLACEMENT,
    ImportKind,
    ImportSite,
    Stopped,
    check_source,
    find_imports,
    runtime_source,
    static_import_specifier,
)

CALL, META, STATEMENT = ImportKind.CALL, ImportKind.META, ImportKind.STATEMENT


def kinds_at(source: str) -> list[tuple[ImportKind, int]]:
    return [(site.kind, site.start) for site in find_imports(source)]


def calls_at(source: str) -> list[int]:
    return [site.start for site in find_imports(source) if site.kind is CALL]


def test_replacement_keeps_every_column() -> None:
    # V8 counts columns in UTF-16 code units.
    assert len(REPLACEMENT.encode("utf-16-le")) == len(b"import") * 2
    assert REPLACEMENT.isidentifier()
    assert not REPLACEMENT.isascii()


@pytest.mark.parametrize(
    ("source", "calls"),
    [
        ("await import('x')", [6]),
        ("import('a'); import('b')", [0, 13]),
        ("import /* c */ ('x')", [0]),
        ("import // c\n('x')", [0]),
        ("import\n\t('x')", [0]),
        ("[...import('x')]", [4]),  # a spread is not a member access
        ("f(a, import('x'))", [5]),
        ("{ import('x') }", [2]),  # a block holding a call
        ("x ? import('a') : import('b')", [4, 18]),
        ("import('x', {with: {type: 'json'}})", [0]),
        ("import()", [0]),  # V8 reports the syntax error: still a call
        ("import(", [0]),
        ("const m = {a: import('x')}", [14]),
    ],
)
def test_calls_are_found(source: str, calls: list[int]) -> None:
    assert calls_at(source) == calls


@pytest.mark.parametrize(
    "source",
    [
        "'import(1)'",
        '"import(1)" + "\\"import(2)"',
        "`import(1)`",
        "`a ${'b'} import(1) ${`c`}`",
        "// import(1)",
        "/* import(1)\n import(2) */",
        "/import(1)/",
        "x = /import\\/(1)/g",
        "x = /[/]import(1)/",  # a slash inside a class does not end the literal
        "obj.import(1)",
        "obj . /* c */ import(1)",
        "obj?.import(1)",
        "this.#import(1)",
        "reimport(1); import_(2); $import(3); importer(4)",
        "const o = { import(x) { return x } }",
        "const o = { import(x)\n{ return x } }",
        "class A { static import(x) { return 1 } }",
        "class A { get import() { return 1 }; *import() {} }",
        "function import() {}",  # a SyntaxError V8 must still see
        "const o = { import: 1 }",
        "\\u0069mport('x')",  # an escaped keyword is V8's error to report
    ],
)
def test_import_as_text_or_property_is_not_a_call(source: str) -> None:
    assert calls_at(source) == []


@pytest.mark.parametrize(
    ("source", "calls"),
    [
        # After ")" or "]" or a name or a number, "/" divides...
        ("a = f(x) / import('q') / 2", [11]),
        ("a = x[0] / import('q') / 2", [11]),
        ("a = b / import('q') / c", [8]),
        ("a = 4 / import('q') / 2", [8]),
        ("a = `t` / import('q') / 2", [10]),
        ("a = 'x' / import('q') / 2", [10]),
        # ...after an operator, "(", "," or an expression keyword it starts a regex.
        ("a = /import('q')/ + import('r')", [20]),
        ("f(/import('q')/, import('r'))", [17]),
        ("return /import('q')/.source + import('r')", [30]),
        ("typeof /import('q')/; import('r')", [22]),
        ("}\n/import('q')/.test(s); import('r')", [25]),
    ],
)
def test_regex_or_division_by_the_previous_token(source: str, calls: list[int]) -> None:
    assert calls_at(source) == calls


@pytest.mark.parametrize(
    ("source", "calls"),
    [
        # A "++" or "--" that ends an operand is one token, and "/" after it divides...
        ("a++ / 2; import('q')", [9]),
        ("a-- / 2; import('q')", [9]),
        ("x[0]++ / 2, import('q')", [12]),
        ("(a)-- / 2; import('q')", [11]),
        ("a ++ / import('q') / 2", [7]),
        ("a++\n/ import('q') / 2", [6]),  # no semicolon is inserted before "/"
        # ...one that starts an operand is an operator before it, and "/" starts a regex.
        ("++/import('q')/.lastIndex; import('r')", [27]),
        ("a = --/import('q')/.lastIndex + import('r')", [32]),
        ("return ++/import('q')/.lastIndex; import('r')", [34]),
        ("a+++/import('q')/.source; import('r')", [26]),  # a ++ + /.../
        ("`${++/}/.lastIndex} import(no)` + import('a')", [34]),
        # A line break before it, in a comment too, ends the statement: a; ++/.../
        ("a\n++/import('q')/.lastIndex; import('r')", [29]),
        ("a /* \n */ --/import('q')/.lastIndex; import('r')", [37]),
        ("a // c\n++/import('q')/.lastIndex; import('r')", [34]),
    ],
)
def test_increment_and_decrement_tell_division_from_regex(source: str, calls: list[int]) -> None:
    assert calls_at(source) == calls


@pytest.mark.parametrize(
    ("source", "calls"),
    [
        ("`${import('a')}`", [3]),
        ("`x ${ {a: import('a')} } import(no) ${import('b')}`", [10, 38]),
        ("`${ `${import('a')}` + '`' } ${import('b')}`", [7, 31]),
        ("`${ /}`/.source } import(no)` + import('a')", [32]),
        ("`${ { } }` + import('a')", [13]),
        ("`\\${import(no)}` + import('a')", [19]),  # an escaped "${" is text
    ],
)
def test_templates_nest_code_strings_and_templates(source: str, calls: list[int]) -> None:
    assert calls_at(source) == calls


def test_import_meta_and_statements_are_told_apart() -> None:
    source = "import x from 'y'\ntext(typeof import.meta); import . /* c */ meta.url; import('z')"
    assert kinds_at(source) == [(STATEMENT, 0), (META, 30), (META, 44), (CALL, 71)]
    meta = find_imports(source)[2]
    assert source[meta.start : meta.end] == "import . /* c */ meta"
    assert kinds_at("import.foo") == []  # V8 reports it


@pytest.mark.parametrize(
    ("source", "specifier"),
    [
        ("import x from 'y'", "y"),
        ('import "side"', "side"),
        ("import * as ns from 'n'", "n"),
        ("import {a as \"b\", from} from 'y'", "y"),
        ("import from from 'f'", "f"),
        (
            "// import x from 'c'\nconst s = \"import q from 'w'\"; import('d'); import y from 'z'",
            "z",
        ),
        ("import x from y", None),
        ("text('no import here')", None),
    ],
)
def test_static_import_specifier(source: str, specifier: str | None) -> None:
    assert static_import_specifier(source) == specifier


def test_runtime_source_replaces_calls_and_meta_only() -> None:
    source = "a.import(1); await import('x'); import.meta; 'import(2)'; import y from 'z'"
    expected = (
        f"a.import(1); await {REPLACEMENT}('x'); {REPLACEMENT}.meta; 'import(2)'; import y from 'z'"
    )
    assert runtime_source(source, find_imports(source)) == expected


def test_check_source_keeps_calls_and_makes_meta_unassignable() -> None:
    source = "await import('x'); import /* c */ .meta = 1; import.meta.url"
    meta = "(0)".ljust(len("import /* c */ .meta"))
    assert check_source(source, find_imports(source)) == (
        f"await import('x'); {meta} = 1; (0)        .url"
    )


def test_sites_are_plain_values() -> None:
    assert find_imports("import('x')") == [ImportSite(CALL, 0, 6)]


def test_unterminated_literals_end_the_source() -> None:
    for source in ("'import(1)", "`import(1)", "/* import(1)", "a = /import(1)\nimport(2)"):
        assert calls_at(source) == ([15] if source.endswith("(2)") else [])


@given(st.text(alphabet="import()./*`'\"${}\\\n x=,;[]?:+-", max_size=60))
def test_any_input_lexes_and_rewrites_keep_the_length(source: str) -> None:
    sites = find_imports(source)
    assert len(runtime_source(source, sites)) == len(source)
    assert len(check_source(source, sites)) == len(source)
    for site in sites:
        assert source.startswith("import", site.start)


# Inputs that made an earlier lexer quadratic or slow: each unit repeated to any length.
PATHOLOGICAL = {
    "calls": "import(",
    "unclosed calls in parentheses": "(import(",
    "statements without a module": "import x ",
    "statements in braces": "import {",
    "nested templates": "`${",
    "divisions": "a / b / ",
    "regular expressions": "x = /re/; ",
    "increments": "a++ / 2;\n",
    "broken strings": "'\n",
    "meta": "import.meta;",
    "escapes in names": "a\\u{",
}


def count_checkpoints(source: str) -> int:
    calls = 0

    def checkpoint() -> None:
        nonlocal calls
        calls += 1

    find_imports(source, checkpoint=checkpoint)
    return calls


@pytest.mark.parametrize("unit", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_work_is_linear_in_the_source_length(unit: str) -> None:
    # The checkpoint is called every CHECK_EVERY steps of work: its count measures the work,
    # whatever the clock. Each character is worth a bounded number of steps.
    small = unit * (16 * CHECK_EVERY // len(unit))
    large = small * 4
    assert count_checkpoints(large) * CHECK_EVERY <= 4 * len(large)
    assert count_checkpoints(large) <= 5 * max(1, count_checkpoints(small))


def test_a_megabyte_of_each_pathological_input_is_lexed_promptly() -> None:
    # A safety net on the real clock, generous for a loaded machine: a quadratic lexer took
    # about an hour on a megabyte of the first one alone.
    units = list(PATHOLOGICAL.values())
    source = "".join(unit * (1_000_000 // len(units) // len(unit)) for unit in units)
    started = time.perf_counter()
    find_imports(source)
    assert time.perf_counter() - started < 20


def test_a_checkpoint_that_raises_stops_the_work() -> None:
    calls = 0

    def checkpoint() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Stopped

    with pytest.raises(Stopped):
        find_imports("import(" * 100_000, checkpoint=checkpoint)
    assert calls == 3
