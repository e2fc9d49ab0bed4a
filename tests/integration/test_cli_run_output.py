"""``codemode-trio run`` prints what a cell wrote without letting it drive the terminal.

A cell is model-written code. Its text, its notifications and its error text are printed with
control characters escaped (the escaping ``transcript show`` uses), line breaks and tabs kept;
``--raw`` prints them as they are; ``--json`` stays valid JSON of the exact values. Real host,
real subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The cell builds the sequences itself: the command line carries only ASCII.
CELL = (
    r'text("title \x1b]0;owned\x07 clip \x1b]52;c;b3duZWQ=\x07 csi \x9b2J bidi \u202e end\r'
    r'\nline2\tcolumn");'
    r'notify("\x1b[2J cleared");'
    r'throw new Error("\x1b]0;error title\x07 failed");'
)
WRITTEN = (
    "title \x1b]0;owned\x07 clip \x1b]52;c;b3duZWQ=\x07 csi \x9b2J bidi \u202e end\r\nline2\tcolumn"
)
# Anything a terminal could act on, except the newline and tab that text keeps.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def run_cell(host: Path, *options: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "codemode_trio", "run", "--host", str(host), *options, "-e", CELL],
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=False,
    )
    # Decoded by hand: text mode would turn the cell's \r\n into \n.
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@pytest.fixture(scope="module")
def escaped(rust_host_path: Path) -> subprocess.CompletedProcess[str]:
    return run_cell(rust_host_path)


def test_cell_text_is_escaped_keeping_lines_and_tabs(
    escaped: subprocess.CompletedProcess[str],
) -> None:
    assert escaped.returncode == 1
    assert escaped.stdout == (
        "title \\x1b]0;owned\\x07 clip \\x1b]52;c;b3duZWQ=\\x07 csi \\x9b2J bidi \\u202e end\\x0d"
        "\nline2\tcolumn\n"
    )


def test_notifications_and_the_error_text_are_escaped(
    escaped: subprocess.CompletedProcess[str],
) -> None:
    assert "[notify] \\x1b[2J cleared\n" in escaped.stderr
    assert "Error: \\x1b]0;error title\\x07 failed" in escaped.stderr
    assert not CONTROL.search(escaped.stderr)


def test_raw_prints_the_cell_as_it_wrote_it(rust_host_path: Path) -> None:
    done = run_cell(rust_host_path, "--raw")
    assert done.returncode == 1
    assert done.stdout == f"{WRITTEN}\n"
    assert "[notify] \x1b[2J cleared\n" in done.stderr


def test_json_lines_hold_the_exact_values_and_no_raw_control(rust_host_path: Path) -> None:
    done = run_cell(rust_host_path, "--json")
    assert done.returncode == 1
    assert not CONTROL.search(done.stdout.replace("\n", ""))
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r for r in records if r["type"] == "input_text"] == [
        {"type": "input_text", "text": WRITTEN}
    ]
    assert {"type": "notification", "text": "\x1b[2J cleared"} in records
    assert "\x1b]0;error title\x07 failed" in records[-1]["error_text"]
