"""Reading transcripts is safe on any input: hostile files are refused, never expanded or run."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import codemode_trio as cm
from codemode_trio.transcript import (
    CLIENT_TO_HOST,
    HOST_TO_CLIENT,
    TranscriptError,
    TranscriptFrame,
    TranscriptHeader,
    read_transcript,
    read_transcript_items,
)

HEADER = cbor2.dumps({"format": "codemode-trio-transcript", "version": 1, "started_at": 1.5e9})
HELLO = b'{"type":"connection/hello","supportedVersions":[1]}'


def frame(direction: str = CLIENT_TO_HOST, stamp: object = 1, payload: object = HELLO) -> bytes:
    return cbor2.dumps([direction, stamp, payload])


def write(tmp_path: Path, *records: bytes) -> Path:
    path = tmp_path / "t.cbor"
    path.write_bytes(b"".join(records))
    return path


def refused(path: Path) -> str:
    with pytest.raises(TranscriptError) as caught:
        list(read_transcript_items(path))
    return str(caught.value)


def shared_reference_bomb(levels: int) -> object:
    """``a = [a, a]`` nested ``levels`` deep: tiny with value sharing, 2**levels leaves without."""
    value: object = []
    for _ in range(levels):
        value = [value, value]
    return value


def test_a_well_formed_transcript_reads_back_headers_and_frames(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER, frame(), frame(HOST_TO_CLIENT, 2, b"{}"), HEADER, frame())
    items = list(read_transcript_items(path))
    assert items == [
        TranscriptHeader(1, 1.5e9),
        TranscriptFrame(CLIENT_TO_HOST, 1, HELLO),
        TranscriptFrame(HOST_TO_CLIENT, 2, b"{}"),
        TranscriptHeader(1, 1.5e9),
        TranscriptFrame(CLIENT_TO_HOST, 1, HELLO),
    ]
    assert list(read_transcript(path)) == [
        item for item in items if isinstance(item, TranscriptFrame)
    ]


def test_a_shared_reference_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    bomb = cbor2.dumps(shared_reference_bomb(40), value_sharing=True)
    assert len(bomb) < 400  # the hostile file really is tiny
    path = write(tmp_path, HEADER, frame(), bomb)
    message = refused(path)
    assert message.startswith(f"{path}: record 3 ")
    assert "CBOR tags are not used in transcripts (tag 28)" in message


def test_a_bignum_past_the_int_to_str_limit_is_refused(tmp_path: Path) -> None:
    huge = 1 << 100_000
    path = write(tmp_path, HEADER, frame(stamp=huge))
    assert "tag 2" in refused(path)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (frame(stamp="yesterday"), "timestamp is not a u64 integer: 'yesterday'"),
        (frame(stamp=-1), "timestamp is not a u64 integer: -1"),
        (frame(stamp=-(2**64)), "timestamp is not a u64 integer: -18446744073709551616"),
        (frame(stamp=1.5), "timestamp is not a u64 integer: 1.5"),
        (frame(stamp=True), "timestamp is not a u64 integer: True"),
        (frame(direction="sideways"), "unknown direction 'sideways'"),
        (frame(payload="text, not bytes"), "payload is not a byte string"),
        (cbor2.dumps([CLIENT_TO_HOST, 1]), "a frame record has 3 fields, this one has 2"),
        (cbor2.dumps("just text"), "a record is 'just text', not a header or a frame"),
        (b"\x9f\xff", "indefinite-length items"),
        (b"\x1c", "reserved CBOR additional information 28"),
        (b"\xf7", "unsupported CBOR simple value 23"),
        (b"\x63\xff\xfe\xfd", "not valid UTF-8"),
        (b"\x81" * 5000 + b"\x00", "nested deeper than 8 levels"),
        (b"\xa1\x81\x00\x00", "a map key is neither text nor an integer"),
        (cbor2.dumps({"format": "other"}), "not a codemode-trio transcript"),
        (
            cbor2.dumps({"format": "codemode-trio-transcript", "version": 99, "started_at": 0}),
            "unsupported transcript version 99",
        ),
        (
            cbor2.dumps({"format": "codemode-trio-transcript", "version": 1, "started_at": "x"}),
            "header started_at is not a time: 'x'",
        ),
        (
            cbor2.dumps({"format": "codemode-trio-transcript", "version": 1, "started_at": 1e300}),
            "header started_at is not a time",
        ),
    ],
)
def test_every_malformed_record_is_named_by_its_index(
    tmp_path: Path, record: bytes, problem: str
) -> None:
    path = write(tmp_path, HEADER, frame(), record)
    message = refused(path)
    assert message.startswith(f"{path}: record 3 (byte {len(HEADER) + len(frame())}): ")
    assert problem in message


def test_a_file_without_a_header_is_not_a_transcript(tmp_path: Path) -> None:
    message = refused(write(tmp_path, frame()))
    assert (
        message
        == f"{tmp_path / 't.cbor'}: record 1 (byte 0): not a codemode-trio transcript (no header)"
    )


def test_a_length_past_the_end_of_the_file_is_a_torn_record_not_an_allocation(
    tmp_path: Path,
) -> None:
    # A payload that claims 2**64 - 1 bytes: read as a record cut short by a crash.
    torn = b"\x83" + cbor2.dumps(CLIENT_TO_HOST) + b"\x01" + b"\x5b" + b"\xff" * 8 + b"abc"
    path = write(tmp_path, HEADER, frame(), torn)
    assert list(read_transcript(path)) == [TranscriptFrame(CLIENT_TO_HOST, 1, HELLO)]
    # An array that claims more elements than the file has bytes is torn too.
    path = write(tmp_path, HEADER, b"\x9b" + b"\x7f" * 8)
    assert list(read_transcript(path)) == []


def test_a_missing_file_is_a_transcript_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.cbor"
    message = refused(missing)
    assert message == f"cannot read transcript {missing}: No such file or directory (os error 2)"


def test_transcript_error_is_a_usage_error_and_public() -> None:
    assert issubclass(cm.TranscriptError, cm.UsageError)
    assert issubclass(cm.TranscriptError, cm.CodeModeError)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.binary(max_size=64))
def test_any_bytes_after_a_header_read_or_are_refused_cleanly(tmp_path: Path, tail: bytes) -> None:
    path = write(tmp_path, HEADER, tail)
    problem: TranscriptError | None = None
    items: list[object] = []
    try:
        items.extend(read_transcript_items(path))
    except TranscriptError as exc:
        problem = exc
    if problem is not None:
        assert str(problem).startswith(f"{path}: record ")
    assert all(isinstance(item, TranscriptHeader | TranscriptFrame) for item in items)


def test_half_and_single_precision_start_times_are_accepted(tmp_path: Path) -> None:
    def header(encoded_time: bytes) -> bytes:
        head = cbor2.dumps({"format": "codemode-trio-transcript", "version": 1})
        # Rebuild as a 3-entry map whose last value is the given float encoding.
        return b"\xa3" + head[1:] + cbor2.dumps("started_at") + encoded_time

    path = write(
        tmp_path, header(b"\xf9" + struct.pack(">e", 2.0)), header(b"\xfa" + struct.pack(">f", 4.0))
    )
    assert list(read_transcript_items(path)) == [TranscriptHeader(1, 2.0), TranscriptHeader(1, 4.0)]


def test_a_fifo_or_directory_is_refused_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.cbor"
    os.mkfifo(fifo)  # nobody will ever write to it: opening it normally would wait forever
    assert refused(fifo) == f"cannot read transcript {fifo}: it is not a regular file"
    assert refused(tmp_path) == f"cannot read transcript {tmp_path}: it is not a regular file"
