"""WebSocket framing: the sans-IO codec, and the stream's writes that the socket takes in part."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from codemode_trio.client.streams import StreamFailure
from codemode_trio.transport.websocket import WebSocketFrameStream
from codemode_trio.transport.wsframes import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameReader,
    WebSocketFramingError,
    accept_key,
    encode_frame,
)


def protocol_frame(size: int, fill: bytes = b"x") -> bytes:
    payload = (fill * size)[:size]
    return struct.pack("<I", size) + payload


def raw_frame(opcode: int, payload: bytes, *, final: bool = True, mask: bool = False) -> bytes:
    frame = encode_frame(opcode, payload, mask=mask)
    return frame if final else bytes([frame[0] & 0x7F]) + frame[1:]


def test_the_accept_key_of_rfc_6455() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 300_000])
@pytest.mark.parametrize("mask", [False, True])
def test_every_length_form_round_trips_masked_or_not(size: int, mask: bool) -> None:
    payload = bytes(range(256)) * (size // 256 + 1)
    payload = payload[:size]
    wire = encode_frame(OP_BINARY, payload, mask=mask)
    reader = FrameReader(masked=mask, max_message=1 << 20)
    # Byte by byte at the start (headers cut anywhere), then the rest at once.
    got = []
    for i in range(min(len(wire), 20)):
        got += reader.feed(wire[i : i + 1])
    got += reader.feed(wire[20:])
    assert got == [(OP_BINARY, payload)]


def test_fragments_are_reassembled_and_control_frames_pass_between_them() -> None:
    reader = FrameReader(masked=False, max_message=100)
    wire = (
        raw_frame(OP_BINARY, b"ab", final=False)
        + raw_frame(OP_PING, b"p")
        + raw_frame(OP_CONTINUATION, b"cd", final=False)
        + raw_frame(OP_CONTINUATION, b"ef")
        + raw_frame(OP_TEXT, b"t")
        + raw_frame(OP_CLOSE, b"\x03\xe8")
    )
    assert reader.feed(wire) == [
        (OP_PING, b"p"),
        (OP_BINARY, b"abcdef"),
        (OP_TEXT, b"t"),
        (OP_CLOSE, b"\x03\xe8"),
    ]


@pytest.mark.parametrize(
    ("wire", "masked", "problem"),
    [
        (raw_frame(OP_BINARY, b"x", mask=True), False, "a masked frame"),
        (raw_frame(OP_BINARY, b"x"), True, "an unmasked frame"),
        (bytes([0xC2, 0x00]), False, "reserved bits"),
        (bytes([0x83, 0x00]), False, "unknown opcode 0x3"),
        (raw_frame(OP_PING, b"x", final=False), False, "fragmented or oversized control"),
        (raw_frame(OP_CONTINUATION, b"x"), False, "continuation frame outside"),
        (raw_frame(OP_BINARY, b"x" * 11), False, "more than 10 bytes"),
        (
            raw_frame(OP_BINARY, b"x", final=False) + raw_frame(OP_BINARY, b"y"),
            False,
            "a new message inside",
        ),
    ],
)
def test_what_rfc_6455_forbids_is_refused(wire: bytes, masked: bool, problem: str) -> None:
    with pytest.raises(WebSocketFramingError, match=problem):
        FrameReader(masked=masked, max_message=10).feed(wire)


async def test_a_ping_is_answered_a_close_ends_the_stream_and_text_is_refused() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    stream = WebSocketFrameStream(ours, client=True)
    await theirs.send_all(raw_frame(OP_BINARY, b"one") + raw_frame(OP_CLOSE, b"\x03\xe8"))
    assert await stream.receive_some() == b"one"
    assert await stream.receive_some() == b""  # the close
    ours, theirs = trio.testing.memory_stream_pair()
    stream = WebSocketFrameStream(ours, client=True)
    await theirs.send_all(raw_frame(OP_TEXT, b"hello"))
    with pytest.raises(StreamFailure) as caught:
        await stream.receive_some()
    assert caught.value.reason == (
        "code-mode host websocket messages must be binary framed messages"
    )


async def test_a_ping_gets_a_pong_over_a_socket() -> None:
    left, right = trio.socket.socketpair()
    async with trio.SocketStream(left) as ours, trio.SocketStream(right) as theirs:
        stream = WebSocketFrameStream(ours, client=False)
        await theirs.send_all(raw_frame(OP_PING, b"hi", mask=True))
        await theirs.send_all(raw_frame(OP_BINARY, b"msg", mask=True))
        assert await stream.receive_some() == b"msg"
        reader = FrameReader(masked=False, max_message=100)
        assert reader.feed(await theirs.receive_some()) == [(OP_PONG, b"hi")]


async def test_a_message_the_socket_takes_in_part_is_finished_by_send_all_exactly_once() -> None:
    left, right = trio.socket.socketpair()
    # Small buffers, so a large message cannot go out in one write.
    for sock in (left, right):
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, 16384)
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 16384)
    small = protocol_frame(10, b"s")
    big = protocol_frame(2_000_000, b"0123456789")
    later = protocol_frame(20, b"l")
    async with trio.SocketStream(left) as ours, trio.SocketStream(right) as theirs:
        stream = WebSocketFrameStream(ours, client=True)
        taken = stream.send_nowait(small + big)
        assert taken == len(small)  # the big one went out in part: not counted as taken
        assert stream.send_nowait(later) == 0  # nothing may overtake the unfinished one
        received: list[bytes] = []

        async def read() -> None:
            reader = FrameReader(masked=True, max_message=4_000_000)
            while len(received) < 3:
                received.extend(payload for _, payload in reader.feed(await theirs.receive_some()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            # What an outbox does with the rest: hands it to send_all, then what came later.
            await stream.send_all((small + big)[taken:])
            await stream.send_all(later)
    assert received == [small, big, later]
