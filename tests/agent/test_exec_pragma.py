"""The ``// @exec:`` first line: what it yields, and Codex's answers to malformed ones."""

from __future__ import annotations

import pytest

import codemode_trio as cm

FIELDS = "supported fields `yield_time_ms` and `max_output_tokens`"


def test_without_a_pragma_the_whole_input_is_the_program() -> None:
    assert cm.parse_exec_source("text('hi')") == cm.ExecSource("text('hi')", None, None)
    # A pragma only counts on the first line.
    source = 'text(1)\n// @exec: {"yield_time_ms": 10}\n'
    assert cm.parse_exec_source(source) == cm.ExecSource(source)


def test_a_pragma_line_is_split_off_and_read() -> None:
    parsed = cm.parse_exec_source("// @exec: {\"yield_time_ms\": 10}\ntext('hi')")
    assert parsed == cm.ExecSource("text('hi')", 10, None)
    both = cm.parse_exec_source(
        '  // @exec:{"max_output_tokens": 0, "yield_time_ms": null} \r\nline1\nline2'
    )
    assert both == cm.ExecSource("line1\nline2", None, 0)
    largest = cm.parse_exec_source(f'// @exec: {{"yield_time_ms": {2**53 - 1}}}\nx')
    assert largest.yield_time_ms == 2**53 - 1


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("", "exec expects raw JavaScript source text (non-empty)."),
        (" \n\t", "exec expects raw JavaScript source text (non-empty)."),
        ('// @exec: {"yield_time_ms": 1}', "exec pragma must be followed by JavaScript source"),
        ('// @exec: {"yield_time_ms": 1}\n  \n', "exec pragma must be followed by JavaScript"),
        ("// @exec:\nx", f"exec pragma must be a JSON object with {FIELDS}"),
        ("// @exec: [1]\nx", f"exec pragma must be a JSON object with {FIELDS}"),
        ("// @exec: {yield_time_ms: 1}\nx", f"exec pragma must be valid JSON with {FIELDS}: "),
        ('// @exec: {"yield_time_ms": NaN}\nx', f"exec pragma must be valid JSON with {FIELDS}"),
        (
            '// @exec: {"yield_time_ms": 1, "timeout": 2}\nx',
            "exec pragma only supports `yield_time_ms` and `max_output_tokens`; got `timeout`",
        ),
        (
            '// @exec: {"yield_time_ms": -1}\nx',
            "exec pragma fields `yield_time_ms` and `max_output_tokens` must be non-negative "
            "safe integers: `yield_time_ms` is -1",
        ),
        ('// @exec: {"yield_time_ms": 1.5}\nx', "must be non-negative safe integers"),
        ('// @exec: {"max_output_tokens": 10.0}\nx', "safe integers: `max_output_tokens` is"),
        ('// @exec: {"max_output_tokens": true}\nx', "`max_output_tokens` is true"),
        ('// @exec: {"yield_time_ms": "10"}\nx', '`yield_time_ms` is "10"'),
        (f'// @exec: {{"yield_time_ms": {2**64}}}\nx', "must be non-negative safe integers"),
        (
            f'// @exec: {{"yield_time_ms": {2**53}}}\nx',
            "exec pragma field `yield_time_ms` must be a non-negative safe integer",
        ),
        (
            f'// @exec: {{"max_output_tokens": {2**53}}}\nx',
            "exec pragma field `max_output_tokens` must be a non-negative safe integer",
        ),
    ],
)
def test_malformed_inputs_are_refused_with_codex_s_texts(source: str, message: str) -> None:
    with pytest.raises(cm.ExecPragmaError) as caught:
        cm.parse_exec_source(source)
    assert message in str(caught.value)
    assert isinstance(caught.value, cm.UsageError)


def test_the_empty_input_message_shows_the_pragma() -> None:
    with pytest.raises(cm.ExecPragmaError) as caught:
        cm.parse_exec_source("")
    assert str(caught.value) == (
        "exec expects raw JavaScript source text (non-empty). Provide JS only, optionally with "
        'first-line `// @exec: {"yield_time_ms": 10000, "max_output_tokens": 1000}`.'
    )
