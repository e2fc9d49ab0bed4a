"""gRPC message framing and status parsing (sans-IO, synchronous)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codemode_trio import HostProtocolViolation
from codemode_trio.grpc.framing import (
    MessageDecoder,
    StatusCode,
    encode_message,
    encode_timeout,
    parse_status,
)


def test_a_message_is_a_flag_a_big_endian_length_and_the_payload() -> None:
    assert encode_message(b"abc") == b"\x00\x00\x00\x00\x03abc"
    assert encode_message(b"") == b"\x00\x00\x00\x00\x00"


def test_whole_input_one_byte_at_a_time_gives_the_same_messages() -> None:
    data = encode_message(b"one") + encode_message(b"") + encode_message(b"three")
    assert MessageDecoder().feed(data) == [b"one", b"", b"three"]
    decoder = MessageDecoder()
    out: list[bytes] = []
    for i in range(len(data)):
        out.extend(decoder.feed(data[i : i + 1]))
    assert out == [b"one", b"", b"three"]
    decoder.eof()


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 50), max_size=20))
def test_any_chunking_round_trips(payloads: list[bytes], cuts: list[int]) -> None:
    data = b"".join(encode_message(p) for p in payloads)
    decoder = MessageDecoder()
    out: list[bytes] = []
    position = 0
    for cut in cuts:
        out.extend(decoder.feed(data[position : position + cut]))
        position += cut
    out.extend(decoder.feed(data[position:]))
    decoder.eof()
    assert out == payloads
    assert decoder.buffered == 0


def test_a_compressed_message_is_the_hosts_fault() -> None:
    with pytest.raises(HostProtocolViolation, match="compression flag 1"):
        MessageDecoder().feed(b"\x01\x00\x00\x00\x00")


def test_a_message_over_the_limit_is_refused_before_it_is_buffered() -> None:
    decoder = MessageDecoder(max_message_bytes=10)
    with pytest.raises(HostProtocolViolation, match="11 bytes exceeds the limit of 10"):
        decoder.feed(b"\x00\x00\x00\x00\x0b")


def test_a_stream_ending_inside_a_message_is_refused() -> None:
    decoder = MessageDecoder()
    assert decoder.feed(encode_message(b"whole") + b"\x00\x00\x00") == [b"whole"]
    with pytest.raises(HostProtocolViolation, match="3 bytes left over"):
        decoder.eof()


def test_status_and_percent_encoded_message_come_from_the_trailers() -> None:
    trailers = [(b"grpc-status", b"5"), (b"grpc-message", b"unknown%20cell%3A%201")]
    assert parse_status(trailers) == (StatusCode.NOT_FOUND, "unknown cell: 1")
    assert parse_status([(b"grpc-status", b"0")]) == (StatusCode.OK, "")
    assert parse_status([(b"grpc-status", b"99")]) == (StatusCode.UNKNOWN, "")
    assert parse_status([(b"content-type", b"application/grpc")]) is None


def test_timeouts_use_at_most_eight_digits() -> None:
    assert encode_timeout(1.5) == "1500m"
    assert encode_timeout(0) == "0m"
    assert encode_timeout(10**6) == "1000000S"
    assert encode_timeout(10**9) == "99999999S"


@given(st.lists(st.binary(max_size=300), max_size=8))
def test_messages_fed_one_whole_message_per_chunk_come_out_as_they_went_in(
    payloads: list[bytes],
) -> None:
    decoder = MessageDecoder()
    assert [decoder.feed(encode_message(p)) for p in payloads] == [[p] for p in payloads]
    decoder.eof()


def test_a_whole_message_over_the_limit_in_one_chunk_is_refused() -> None:
    decoder = MessageDecoder(max_message_bytes=10)
    assert decoder.feed(encode_message(b"x" * 10)) == [b"x" * 10]
    with pytest.raises(HostProtocolViolation, match="11 bytes exceeds the limit of 10"):
        decoder.feed(encode_message(b"x" * 11))
