"""``codemode-trio transcript show``: readable, terminal-safe, and never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemode_trio.cli import main
from codemode_trio.transcript import CLIENT_TO_HOST, HOST_TO_CLIENT
from codemode_trio.transcript_view import format_transcript, terminal_safe

ROOT = Path(__file__).parents[1]
HELLO = (
    b'{"type":"connection/hello","supportedVersions":[1],'
    b'"requiredCapabilities":[],"optionalCapabilities":[]}'
)


def header(started_at: float) -> bytes:
    return cbor2.dumps(
        {"format": "codemode-trio-transcript", "version": 1, "started_at": started_at}
    )


def frame(stamp: int, payload: bytes = HELLO, direction: str = CLIENT_TO_HOST) -> bytes:
    return cbor2.dumps([direction, stamp, payload])


def cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **kwargs.pop("env", {})}  # type: ignore[dict-item]
    return subprocess.run(
        [sys.executable, "-m", "codemode_trio", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", ["no frames"]),
        (header(0.0), ["no frames"]),
        (
            header(0.0) + header(1.0),
            ["--- connection 2, started 1970-01-01T00:00:01Z ---", "no frames"],
        ),
    ],
)
def test_a_transcript_without_frames_says_so(
    tmp_path: Path, content: bytes, expected: list[str]
) -> None:
    path = tmp_path / "t.cbor"
    path.write_bytes(content)
    assert list(format_transcript(path)) == expected


def test_each_appended_connection_is_marked_with_its_start_and_its_own_clock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.cbor"
    path.write_bytes(
        header(1_700_000_000.0)
        + frame(5_000_000_000)
        + frame(5_500_000_000)
        + header(1_700_000_100.0)
        + frame(9_000_000_000)
    )
    lines = list(format_transcript(path))
    assert [line.split(" ")[0] for line in lines] == [
        "+0.000000s",
        "+0.500000s",
        "---",
        "+0.000000s",
    ]
    assert lines[2] == "--- connection 2, started 2023-11-14T22:15:00Z ---"


def test_control_characters_from_payloads_are_escaped(tmp_path: Path) -> None:
    hostile = b"\x1b]0;pwned\x07\x1b[31mred\xc2\x9b\xe2\x80\xaeevil\ttab\nline"
    path = tmp_path / "t.cbor"
    path.write_bytes(header(0.0) + frame(1, hostile, HOST_TO_CLIENT))
    for full in (False, True):
        (line,) = format_transcript(path, full=full)
        assert line.startswith("+0.000000s H→C UNDECODABLE (")
        assert line.endswith(r"\x1b]0;pwned\x07\x1b[31mred\x9b\u202eevil\x09tab\x0aline")
        assert terminal_safe(line) == line


def test_terminal_safe_leaves_ordinary_text_alone() -> None:
    text = 'InitialResponse {"text":"héllo → 世界 \\u001b"}'
    assert terminal_safe(text) == text


def test_a_missing_file_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.cbor"
    assert main(["transcript", "show", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"codemode-trio: error: cannot read transcript {missing}: "
        "No such file or directory (os error 2)\n"
    )


def test_a_shared_reference_bomb_is_refused_at_once_without_a_traceback(tmp_path: Path) -> None:
    bomb: object = []
    for _ in range(40):
        bomb = [bomb, bomb]
    path = tmp_path / "bomb.cbor"
    path.write_bytes(header(0.0) + frame(1) + cbor2.dumps(bomb, value_sharing=True))
    done = cli("transcript", "show", str(path))
    assert done.returncode == 2  # a bad input, like a missing one
    assert done.stdout.count("\n") == 1  # the good frame before it
    assert done.stderr == (
        f"codemode-trio: error: {path}: record 3 (byte {len(header(0.0) + frame(1))}): "
        "CBOR tags are not used in transcripts (tag 28)\n"
    )


def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.cbor"
    path.write_bytes(header(0.0) + b"".join(frame(i) for i in range(20_000)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "codemode_trio", "transcript", "show", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as shown:
        assert shown.stdout is not None and shown.stderr is not None
        assert shown.stdout.readline().startswith(b"+0.000000s C")
        shown.stdout.close()  # like `| head -1`
        stderr = shown.stderr.read()
        assert shown.wait(timeout=60) == 0
    assert stderr == b""


def test_a_terminal_without_unicode_gets_escapes_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "t.cbor"
    path.write_bytes(header(0.0) + frame(1, 'text("→ 世界")'.encode()))
    done = cli("transcript", "show", str(path), env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("+0.000000s C\\u2192H UNDECODABLE")
    assert "\\u4e16\\u754c" in done.stdout


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_payloads = (
    st.binary(max_size=200)
    | st.text(max_size=200).map(str.encode)
    | _json.map(lambda value: json.dumps(value, ensure_ascii=False).encode())
    | st.dictionaries(st.sampled_from(["type", "id", "result", "sessionId"]), _json).map(
        lambda value: json.dumps(value, ensure_ascii=False).encode()
    )
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=_payloads, direction=st.sampled_from([CLIENT_TO_HOST, HOST_TO_CLIENT]))
def test_any_payload_renders_as_one_terminal_safe_line(
    tmp_path: Path, payload: bytes, direction: str
) -> None:
    path = tmp_path / "t.cbor"
    path.write_bytes(header(0.0) + frame(1, payload, direction))
    for full in (False, True):
        (line,) = format_transcript(path, full=full)
        assert terminal_safe(line) == line
        assert "\n" not in line


def test_run_with_an_unusable_transcript_is_one_line_and_spawns_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    host = tmp_path / "host"
    host.write_text(f"#!/bin/sh\ntouch {marker}\n")
    host.chmod(0o755)
    link = tmp_path / "t.cbor"
    link.symlink_to(tmp_path / "elsewhere")
    done = cli("run", "-e", "text(1)", "--host", str(host), "--transcript", str(link))
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr == (
        f"codemode-trio: error: cannot open transcript {link}: it is a symbolic link, "
        "and transcripts never follow links\n"
    )
    assert not marker.exists()
