"""Replay a transcript recorded against the real host 0.171.0, byte for byte.

``tests/data/transcript-0.171.0.cbor`` was recorded by ``tests/data/record_transcript.py``
running its scenario on the real host. Here the same scenario runs against a host that plays
back the recorded host frames and demands that every client frame be byte-identical to the
recorded one. It pins the client's exact wire behaviour (ids, field order, nulls, timing of
replies) to what the real host accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.client.connection import open_connection
from codemode_trio.protocol import FrameDecoder, decode_host_message
from codemode_trio.protocol.framing import encode_frame
from codemode_trio.transcript import (
    CLIENT_TO_HOST,
    HOST_TO_CLIENT,
    TranscriptFrame,
    read_transcript,
)

from ..data.record_transcript import scenario

FIXTURE = Path(__file__).parents[1] / "data" / "transcript-0.171.0.cbor"


async def replay_host(stream: trio.abc.Stream, frames: list[TranscriptFrame]) -> int:
    """Play the host side; return how many frames were replayed."""
    decoder = FrameDecoder()
    pending: list[bytes] = []
    for index, frame in enumerate(frames):
        if frame.direction == CLIENT_TO_HOST:
            while not pending:
                data = await stream.receive_some(65536)
                assert data, f"client closed before frame {index}"
                pending.extend(decoder.feed(data))
            got = pending.pop(0)
            assert got == frame.payload, f"frame {index} differs:\n{got!r}\n{frame.payload!r}"
        else:
            await stream.send_all(encode_frame(frame.payload))
    return len(frames)


async def test_real_host_transcript_fixture_is_a_complete_session() -> None:
    frames = list(read_transcript(FIXTURE))
    kinds = {
        type(decode_host_message(f.payload)).__name__
        for f in frames
        if f.direction != CLIENT_TO_HOST
    }
    assert {
        "ConnectionReady",
        "OperationResponse",
        "InitialResponse",
        "DelegateRequest",
        "CellClosed",
    } <= kinds


async def test_recorded_real_host_session_replays_byte_for_byte() -> None:
    frames = list(read_transcript(FIXTURE))
    client_stream, host_stream = trio.testing.memory_stream_pair()
    replayed: list[int] = []

    async def host() -> None:
        replayed.append(await replay_host(host_stream, frames))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host)
            async with open_connection(client_stream) as conn:
                seen = await scenario(conn)
                assert conn.alive
    assert seen == ["5", "kaboom", "a", "terminated"]
    assert replayed == [len(frames)]


async def test_transcript_records_what_a_connection_exchanged(tmp_path: Path) -> None:
    path = tmp_path / "copy.cbor"
    frames = list(read_transcript(FIXTURE))
    client_stream, host_stream = trio.testing.memory_stream_pair()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(replay_host, host_stream, frames)
            async with open_connection(client_stream, transcript=path) as conn:
                await scenario(conn)
    recorded = list(read_transcript(path))

    def by_direction(frames: list[TranscriptFrame], direction: str) -> list[bytes]:
        return [f.payload for f in frames if f.direction == direction]

    # Each direction is an exact sequence; how the two interleave depends on scheduling.
    for direction in (CLIENT_TO_HOST, HOST_TO_CLIENT):
        assert by_direction(recorded, direction) == by_direction(frames, direction)
    stamps = [f.monotonic_ns for f in recorded]
    assert stamps == sorted(stamps)


async def test_a_transcript_cut_short_by_a_crash_keeps_every_complete_frame(tmp_path: Path) -> None:
    data = FIXTURE.read_bytes()
    cut = tmp_path / "cut.cbor"
    cut.write_bytes(data[:-7])  # the last record is torn
    frames = list(read_transcript(cut))
    assert len(frames) == len(list(read_transcript(FIXTURE))) - 1


async def test_a_file_that_is_not_a_transcript_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.cbor"
    other.write_bytes(b"\xa1\x61a\x01")  # the CBOR map {"a": 1}
    with pytest.raises(cm.CodeModeError, match="not a codemode-trio transcript"):
        list(read_transcript(other))
