"""Length-prefixed framing: 4-byte little-endian length, then the payload (spec §2)."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode_trio.protocol import (
    MAX_FRAME_BYTES,
    ClientProtocolViolation,
    EncodeError,
    FrameDecoder,
    FramingError,
    HostProtocolViolation,
    ProtocolViolation,
    decode_client_message,
    decode_host_message,
    encode_frame,
)

SAMPLE_PAYLOADS = [
    b'{"type":"connection/ready","selectedVersion":1,"capabilities":["yield-observation"]}',
    b'{"type":"delegate/cancel","id":1}',
    b"",
    '{"type":"cell/closed","sessionId":"s\u00e9\U0001f600","cellId":"1"}'.encode(),
    bytes(range(256)) * 3,
]


def _feed_all(chunks: list[bytes]) -> tuple[FrameDecoder, list[bytes]]:
    decoder = FrameDecoder()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return decoder, out


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    bounds = [0, *points, len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def test_frame_header_is_little_endian_length() -> None:
    assert encode_frame(b"abc") == b"\x03\x00\x00\x00abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(b"x" * 258)[:4] == b"\x02\x01\x00\x00"


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=40),
)
def test_any_chunking_yields_the_same_payloads(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(payload) for payload in payloads)
    decoder, out = _feed_all(_split(stream, cuts))
    assert out == payloads
    assert decoder.buffered == 0
    decoder.eof()


def test_one_byte_at_a_time_yields_each_payload_on_its_last_byte() -> None:
    stream = b"".join(encode_frame(payload) for payload in SAMPLE_PAYLOADS)
    decoder = FrameDecoder()
    out: list[bytes] = []
    completions: list[int] = []
    for index in range(len(stream)):
        completed = decoder.feed(stream[index : index + 1])
        if completed:
            completions.append(index)
        out.extend(completed)
    assert out == SAMPLE_PAYLOADS
    ends = []
    position = 0
    for payload in SAMPLE_PAYLOADS:
        position += 4 + len(payload)
        ends.append(position - 1)
    assert completions == ends
    decoder.eof()


def test_many_frames_in_one_write_come_out_in_order() -> None:
    stream = b"".join(encode_frame(payload) for payload in SAMPLE_PAYLOADS)
    assert FrameDecoder().feed(stream) == SAMPLE_PAYLOADS


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_feed_accepts_any_bytes_like_input(kind: type) -> None:
    frame = encode_frame(SAMPLE_PAYLOADS[0])
    assert FrameDecoder().feed(kind(frame)) == [SAMPLE_PAYLOADS[0]]


def test_eof_at_a_frame_boundary_is_a_clean_close() -> None:
    decoder, out = _feed_all([encode_frame(b"{}"), encode_frame(b"[]")])
    assert out == [b"{}", b"[]"]
    decoder.eof()
    FrameDecoder().eof()


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=50), max_size=4),
    last=st.binary(max_size=50),
    data=st.data(),
)
def test_eof_inside_a_trailing_partial_frame_raises(
    payloads: list[bytes], last: bytes, data: st.DataObject
) -> None:
    whole = b"".join(encode_frame(payload) for payload in payloads)
    final = encode_frame(last)
    cut = data.draw(st.integers(min_value=1, max_value=len(final) - 1))
    decoder, out = _feed_all([whole, final[:cut]])
    assert out == payloads
    with pytest.raises(FramingError, match="early eof"):
        decoder.eof()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_eof_inside_the_header_raises(size: int) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(encode_frame(b"{}")[:size]) == []
    with pytest.raises(FramingError):
        decoder.eof()


def test_header_of_exactly_64_mib_is_accepted_and_waits_for_the_payload() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack("<I", MAX_FRAME_BYTES)) == []
    assert decoder.buffered <= 4
    assert decoder.feed(b" " * 1000) == []
    assert 1000 <= decoder.buffered <= 1004
    with pytest.raises(FramingError):
        decoder.eof()


def test_oversize_length_fails_at_the_header() -> None:
    decoder = FrameDecoder()
    header = struct.pack("<I", MAX_FRAME_BYTES + 1)
    assert decoder.feed(header[:3]) == []
    with pytest.raises(FramingError, match="frame length 67108865 exceeds 67108864 bytes"):
        decoder.feed(header[3:])


def test_big_endian_header_is_read_as_an_oversize_length() -> None:
    # The host's own probe (spec §2): a big-endian length reads as 1593835520.
    payload = b"{" + b" " * 93 + b"}"
    with pytest.raises(FramingError, match="1593835520"):
        FrameDecoder().feed(struct.pack(">I", len(payload)) + payload)


def test_largest_possible_header_fails_at_the_header() -> None:
    with pytest.raises(FramingError, match=str(2**32 - 1)):
        FrameDecoder().feed(b"\xff\xff\xff\xff")


def test_encoding_a_payload_over_64_mib_raises_encode_error() -> None:
    with pytest.raises(EncodeError, match="67108865 exceeds 67108864"):
        encode_frame(bytes(MAX_FRAME_BYTES + 1))


def test_zero_length_frame_is_a_protocol_violation_for_either_peer() -> None:
    (payload,) = FrameDecoder().feed(b"\x00\x00\x00\x00")
    assert payload == b""
    with pytest.raises(HostProtocolViolation):
        decode_host_message(payload)
    with pytest.raises(ClientProtocolViolation):
        decode_client_message(payload)
    with pytest.raises(ProtocolViolation):
        decode_host_message(payload, strict=True)
