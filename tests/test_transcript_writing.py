"""Writing transcripts: private files, no links followed, and a failing disk never costs results."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.transcript import (
    CLIENT_TO_HOST,
    HOST_TO_CLIENT,
    TranscriptError,
    TranscriptFrame,
    TranscriptHeader,
    TranscriptWriter,
    read_transcript_items,
)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_transcript_is_private_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "t.cbor"
    old = os.umask(0)
    try:
        writer = TranscriptWriter(path)
    finally:
        os.umask(old)
    writer.record_sent(b"{}")
    writer.close()
    assert mode_of(path) == 0o600


def test_connections_append_to_one_file_each_with_its_header(tmp_path: Path) -> None:
    path = tmp_path / "t.cbor"
    for payload in (b"[1]", b"[2]"):
        writer = TranscriptWriter(path)
        writer.record_sent(payload)
        writer.record_received(payload)
        writer.close()
        writer.close()  # idempotent
    kinds = [type(item).__name__ for item in read_transcript_items(path)]
    assert kinds == ["TranscriptHeader", "TranscriptFrame", "TranscriptFrame"] * 2
    frames = [item for item in read_transcript_items(path) if isinstance(item, TranscriptFrame)]
    assert [(f.direction, f.payload) for f in frames] == [
        (CLIENT_TO_HOST, b"[1]"),
        (HOST_TO_CLIENT, b"[1]"),
        (CLIENT_TO_HOST, b"[2]"),
        (HOST_TO_CLIENT, b"[2]"),
    ]


def test_a_symlinked_transcript_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = tmp_path / "t.cbor"
    link.symlink_to(target)
    with pytest.raises(TranscriptError) as caught:
        TranscriptWriter(link)
    assert str(caught.value) == (
        f"cannot open transcript {link}: it is a symbolic link, and transcripts never follow links"
    )
    assert target.read_bytes() == b"keep me"


def test_a_dangling_symlink_creates_nothing(tmp_path: Path) -> None:
    link = tmp_path / "t.cbor"
    link.symlink_to(tmp_path / "would-be-created")
    with pytest.raises(TranscriptError, match="symbolic link"):
        TranscriptWriter.check(link)
    assert not (tmp_path / "would-be-created").exists()


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: p / "missing-dir" / "t.cbor", "No such file or directory (os error 2)"),
        (lambda p: p, "Is a directory (os error 21)"),
    ],
)
def test_a_transcript_that_cannot_be_created_names_the_file(
    tmp_path: Path, make: object, problem: str
) -> None:
    assert callable(make)
    path = make(tmp_path)
    with pytest.raises(TranscriptError) as caught:
        TranscriptWriter(path)
    assert str(caught.value) == f"cannot open transcript {path}: {problem}"


def test_a_fifo_without_reader_is_refused_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "t.cbor"
    os.mkfifo(fifo)
    with pytest.raises(TranscriptError, match="it is a FIFO with no reader"):
        TranscriptWriter(fifo)


def test_an_unwritable_directory_is_a_transcript_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores directory permissions; a read-only bind is the same failure for it.
        path = Path("/proc/self/transcript.cbor")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        path = locked / "t.cbor"
    with pytest.raises(TranscriptError, match=f"cannot open transcript {path}: "):
        TranscriptWriter(path)


def test_a_full_disk_logs_one_warning_and_stops_recording(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="codemode_trio.transcript"):
        writer = TranscriptWriter("/dev/full")
        for _ in range(5):
            writer.record_sent(b"{}")
        writer.close()
    assert not writer.recording
    assert [r.getMessage() for r in caplog.records] == [
        "transcript /dev/full: write failed (No space left on device (os error 28)); "
        "recording stopped, the connection carries on"
    ]


def test_a_file_size_limit_stops_recording_and_keeps_what_was_written(tmp_path: Path) -> None:
    # RLIMIT_FSIZE applies to the whole process, so it is set in a child of its own.
    path = tmp_path / "t.cbor"
    script = textwrap.dedent(
        f"""
        import logging, resource
        from codemode_trio.transcript import TranscriptWriter
        logging.basicConfig(format="%(levelname)s %(message)s")
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        writer = TranscriptWriter({str(path)!r})
        for _ in range(100):
            writer.record_sent(b"x" * 100)
        writer.close()
        print("carried on")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "carried on\n"
    assert done.stderr.splitlines() == [
        f"WARNING transcript {path}: write failed (File too large (os error 27)); "
        "recording stopped, the connection carries on"
    ]
    items = list(read_transcript_items(path))
    assert isinstance(items[0], TranscriptHeader)
    assert 30 <= len(items) - 1 < 40  # every complete record up to the limit
    assert path.stat().st_size <= 4096


async def test_a_full_disk_never_costs_the_connection_its_results(
    host_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), trio.fail_after(30):
        async with cm.open_host_process(host_path, transcript="/dev/full") as conn:
            async with conn.open_session() as session:
                first = await session.run("text('one')")
                second = await session.run("text('two')")
            assert conn.alive
    assert (first.text, second.text) == ("one", "two")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("transcript /dev/full: write failed (No space left on device")


async def test_a_bad_transcript_fails_before_the_host_is_spawned(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    host = tmp_path / "host"
    host.write_text(f"#!/bin/sh\ntouch {marker}\n")
    host.chmod(0o755)
    link = tmp_path / "t.cbor"
    link.symlink_to(tmp_path / "elsewhere")
    with trio.fail_after(10), pytest.raises(cm.TranscriptError, match=str(link)):
        async with cm.open_host_process(host, transcript=link):
            pass
    assert not marker.exists()


async def test_the_transcript_environment_variable_is_checked_as_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "spawned"
    host = tmp_path / "host"
    host.write_text(f"#!/bin/sh\ntouch {marker}\n")
    host.chmod(0o755)
    missing = tmp_path / "no-such-dir" / "t.cbor"
    monkeypatch.setenv("CODEMODE_TRIO_TRANSCRIPT", str(missing))
    with trio.fail_after(10), pytest.raises(cm.TranscriptError, match=str(missing)):
        async with cm.open_host_process(host):
            pass
    assert not marker.exists()


async def test_open_connection_refuses_a_bad_transcript_before_sending_anything(
    tmp_path: Path,
) -> None:
    sent = trio.testing.MemorySendStream()
    stream = trio.StapledStream(sent, trio.testing.MemoryReceiveStream())
    link = tmp_path / "t.cbor"
    link.symlink_to(tmp_path / "elsewhere")
    with trio.fail_after(10), pytest.raises(cm.TranscriptError, match=str(link)):
        async with cm.open_connection(stream, transcript=link):
            pass
    # Not a byte was written, and the stream, handed to open_connection, was closed.
    assert sent.get_data_nowait() == b""
    assert not (tmp_path / "elsewhere").exists()
