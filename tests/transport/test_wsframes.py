"""WebSocket framing: the sans-IO codec, and the stream's writes that the socket takes in part."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from codemode_trio.transport.streams import StreamFailure
from codemode_trio.transport.websocket import MAX_MESSAGE_BYTES, WebSocketFrameStream
from codemode_trio.transport.wsframes import (
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_POLICY_VIOLATION,
    MAX_FRAGMENTS,
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


def small_socket_pair() -> tuple[trio.socket.SocketType, trio.socket.SocketType]:
    left, right = trio.socket.socketpair()
    # Small buffers, so a large message cannot go out in one write.
    for sock in (left, right):
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_SNDBUF, 16384)
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 16384)
    return left, right


async def read_frames(theirs: trio.SocketStream, count: int) -> list[tuple[int, bytes]]:
    """The next ``count`` frames the peer receives (failing, not hanging, if they never come)."""
    reader = FrameReader(masked=False, max_message=4_000_000)
    frames: list[tuple[int, bytes]] = []
    with trio.fail_after(10):
        while len(frames) < count:
            frames.extend(reader.feed(await theirs.receive_some()))
    return frames


async def test_a_ping_during_a_blocked_send_is_answered_right_after_that_message() -> None:
    big = protocol_frame(2_000_000, b"0123456789")
    left, right = small_socket_pair()
    async with trio.SocketStream(left) as ours, trio.SocketStream(right) as theirs:
        stream = WebSocketFrameStream(ours, client=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, big)
            await trio.testing.wait_all_tasks_blocked()  # the socket is full: send_all waits
            await theirs.send_all(raw_frame(OP_PING, b"one", mask=True))
            await theirs.send_all(raw_frame(OP_PING, b"two", mask=True))
            nursery.start_soon(stream.receive_some)
            await trio.testing.wait_all_tasks_blocked()
            # Only the latest ping is answered, and at the message boundary, not inside it.
            assert await read_frames(theirs, 2) == [(OP_BINARY, big), (OP_PONG, b"two")]
            nursery.cancel_scope.cancel()


async def test_a_pong_the_socket_takes_in_part_is_finished_before_anything_else() -> None:
    # The socket is full of a message send_nowait began; a ping arrives: its pong queues behind
    # the rest of that message, and the reader finishes both once the peer reads again.
    big = protocol_frame(2_000_000, b"0123456789")
    later = protocol_frame(20, b"l")
    left, right = small_socket_pair()
    async with trio.SocketStream(left) as ours, trio.SocketStream(right) as theirs:
        stream = WebSocketFrameStream(ours, client=False)
        assert stream.send_nowait(big) == 0  # in part: not taken
        await theirs.send_all(raw_frame(OP_PING, b"hi", mask=True))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.receive_some)
            await trio.testing.wait_all_tasks_blocked()  # the reader waits to write the pong
            frames = await read_frames(theirs, 2)
            assert frames == [(OP_BINARY, big), (OP_PONG, b"hi")]
            # The outbox hands the untaken bytes to send_all: they are not sent twice.
            await stream.send_all(big)
            await stream.send_all(later)
            assert await read_frames(theirs, 1) == [(OP_BINARY, later)]
            nursery.cancel_scope.cancel()


async def test_after_the_peers_close_only_the_echo_is_sent() -> None:
    left, right = trio.socket.socketpair()
    async with trio.SocketStream(left) as ours, trio.SocketStream(right) as theirs:
        stream = WebSocketFrameStream(ours, client=False)
        await theirs.send_all(raw_frame(OP_CLOSE, struct.pack("!H", 1001) + b"bye", mask=True))
        assert await stream.receive_some() == b""
        with pytest.raises(trio.BrokenResourceError, match="the websocket is closing"):
            await stream.send_all(protocol_frame(2))
        with pytest.raises(trio.BrokenResourceError, match="the websocket is closing"):
            stream.send_nowait(protocol_frame(2))
        await stream.aclose()
        reader = FrameReader(masked=False, max_message=100)
        frames: list[tuple[int, bytes]] = []
        with trio.fail_after(10):
            while data := await theirs.receive_some():
                frames.extend(reader.feed(data))
        assert frames == [(OP_CLOSE, struct.pack("!H", 1001))]  # one close, the peer's status


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\x03", "a 1-byte close frame body"),
        (struct.pack("!H", 1005), "close status 1005 is not allowed"),
        (struct.pack("!H", 999), "close status 999 is not allowed"),
        (struct.pack("!H", 1000) + b"\xff", "a close reason that is not UTF-8"),
    ],
)
async def test_a_close_frame_rfc_6455_forbids_is_refused(body: bytes, problem: str) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    stream = WebSocketFrameStream(ours, client=True)
    await theirs.send_all(raw_frame(OP_CLOSE, body))
    with pytest.raises(StreamFailure) as caught:
        await stream.receive_some()
    assert caught.value.reason == f"failed to read code-mode host websocket message: {problem}"


async def test_closing_says_goodbye_once_even_over_a_stream_without_a_socket() -> None:
    ours, theirs = trio.testing.memory_stream_pair()  # as TLS: no direct socket writes
    stream = WebSocketFrameStream(ours, client=True)
    await stream.aclose()
    reader = FrameReader(masked=True, max_message=100)
    assert reader.feed(await theirs.receive_some()) == [(OP_CLOSE, struct.pack("!H", 1000))]


# ------------------------------------------------------ what a peer may make us hold


def fragments(pieces: list[bytes], *, mask: bool = True, final: bool = True) -> bytes:
    """One message in ``pieces``, each its own frame; the last one final if ``final``."""
    wire = b""
    for i, piece in enumerate(pieces):
        opcode = OP_BINARY if i == 0 else OP_CONTINUATION
        wire += raw_frame(opcode, piece, final=final and i == len(pieces) - 1, mask=mask)
    return wire


def test_a_message_in_exactly_max_fragments_passes_and_one_more_closes_with_1008() -> None:
    reader = FrameReader(masked=True, max_message=1 << 20, max_fragments=50)
    assert reader.feed(fragments([b"a"] * 50)) == [(OP_BINARY, b"a" * 50)]
    assert not reader.unfinished
    with pytest.raises(WebSocketFramingError, match="in more than 50 fragments") as caught:
        reader.feed(fragments([b"a"] * 51))
    assert caught.value.code == CLOSE_POLICY_VIOLATION == 1008


def test_a_flood_of_one_byte_fragments_stops_at_the_default_bound() -> None:
    reader = FrameReader(masked=True, max_message=MAX_MESSAGE_BYTES)
    flood = raw_frame(OP_CONTINUATION, b"x", final=False, mask=True) * 4096
    reader.feed(raw_frame(OP_BINARY, b"x", final=False, mask=True))
    fed = 1
    with pytest.raises(WebSocketFramingError) as caught:
        while True:
            reader.feed(flood)
            fed += 4096
    assert caught.value.code == 1008
    assert fed <= MAX_FRAGMENTS < fed + 4096


@pytest.mark.parametrize("pieces", [1, 3])
def test_a_message_exactly_at_the_size_limit_passes_and_one_byte_more_closes_with_1009(
    pieces: int,
) -> None:
    limit = 300_000
    body = bytes(range(256)) * (limit // 256) + b"z" * (limit % 256)
    cut = [body[i * limit // pieces : (i + 1) * limit // pieces] for i in range(pieces)]
    reader = FrameReader(masked=True, max_message=limit)
    assert reader.feed(fragments(cut)) == [(OP_BINARY, body)]
    over = [*cut[:-1], cut[-1] + b"!"]
    wire = fragments(over)
    # Refused at the header of the frame that would pass the limit, before its payload.
    header = 2 + 4 + (8 if len(over[-1]) > 65535 else 2 if len(over[-1]) > 125 else 0)
    last = len(encode_frame(OP_BINARY, over[-1], mask=True))
    reader.feed(wire[: len(wire) - last])
    with pytest.raises(WebSocketFramingError, match="exceeds the message size limit") as caught:
        reader.feed(wire[len(wire) - last : len(wire) - last + header])
    assert caught.value.code == CLOSE_MESSAGE_TOO_BIG == 1009


def test_the_protocol_limit_is_a_frame_and_its_prefix() -> None:
    assert MAX_MESSAGE_BYTES == 64 * 1024 * 1024 + 4


def test_unfinished_says_whether_part_of_a_message_is_held() -> None:
    reader = FrameReader(masked=True, max_message=100)
    whole = raw_frame(OP_BINARY, b"abc", mask=True)
    reader.feed(whole[:3])
    assert reader.unfinished  # a frame cut short
    reader.feed(whole[3:])
    assert not reader.unfinished
    reader.feed(raw_frame(OP_BINARY, b"ab", final=False, mask=True))
    assert reader.unfinished  # fragments without their final frame


async def close_status(stream: trio.abc.ReceiveStream) -> list[tuple[int, bytes]]:
    """Every frame the server sends until its side ends (a server's frames are unmasked)."""
    reader = FrameReader(masked=False, max_message=1 << 20)
    frames: list[tuple[int, bytes]] = []
    while data := await stream.receive_some():
        frames.extend(reader.feed(data))
    return frames


async def test_a_message_left_unfinished_closes_the_connection_with_1008(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    stream = WebSocketFrameStream(ours, client=False, unfinished_timeout=30)
    await theirs.send_all(fragments([b"\x05\x00\x00\x00", b"ab"], final=False))
    start = trio.current_time()
    with pytest.raises(StreamFailure, match="nothing more of a message for 30 s"):
        await stream.receive_some()
    assert trio.current_time() - start == pytest.approx(30)
    await stream.aclose()
    assert await close_status(theirs) == [(OP_CLOSE, struct.pack("!H", 1008))]


async def test_a_slow_message_that_keeps_coming_is_not_cut_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    stream = WebSocketFrameStream(ours, client=False, unfinished_timeout=30)
    frame = protocol_frame(200)
    wire = raw_frame(OP_BINARY, frame, mask=True)

    async def trickle() -> None:
        for i in range(0, len(wire), 10):
            await theirs.send_all(wire[i : i + 10])
            await trio.sleep(20)  # under the timeout each time, ten minutes in all

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle)
        got = b""
        while len(got) < len(frame):
            got += await stream.receive_some()
    assert got == frame
    # Between messages the stream waits as long as it takes.
    with trio.move_on_after(3600) as idle:
        await stream.receive_some()
    assert idle.cancelled_caught


@pytest.mark.parametrize(
    ("wire", "status", "problem"),
    [
        (fragments([b"a"] * (MAX_FRAGMENTS + 1), final=False), 1008, "in more than"),
        (
            # Only a header, declaring one byte more than the limit: refused before its payload.
            bytes([0x82, 0xFF]) + struct.pack("!Q", MAX_MESSAGE_BYTES + 1) + b"mask",
            1009,
            "exceeds the message size limit",
        ),
        (raw_frame(OP_TEXT, b"hi", mask=True), 1003, "must be binary framed messages"),
        (bytes([0xC2, 0x80]) + b"mask", 1002, "reserved bits are set"),
    ],
)
async def test_a_peer_breaking_a_bound_gets_the_close_status_that_says_why(
    wire: bytes, status: int, problem: str
) -> None:
    left, right = trio.socket.socketpair()
    async with trio.SocketStream(left) as ours, trio.SocketStream(right) as theirs:
        stream = WebSocketFrameStream(ours, client=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(theirs.send_all, wire)
            with trio.fail_after(10), pytest.raises(StreamFailure, match=problem):
                while True:
                    await stream.receive_some()
            await stream.aclose()
            with trio.fail_after(10):
                frames = await close_status(theirs)
            nursery.cancel_scope.cancel()
    assert frames == [(OP_CLOSE, struct.pack("!H", status))]
