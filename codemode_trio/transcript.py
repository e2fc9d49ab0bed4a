"""Frame transcripts: every frame of a connection, as a CBOR sequence (RFC 8742).

A transcript file is a concatenation of CBOR items, appended and flushed one frame at a time so
that a crash loses nothing already seen:

1. a header map ``{"format": "codemode-trio-transcript", "version": 1, "started_at": <unix s>}``;
2. then one array per frame: ``[direction, monotonic_ns, payload]`` where ``direction`` is
   ``"client->host"`` or ``"host->client"``, ``monotonic_ns`` comes from
   :func:`time.monotonic_ns` and ``payload`` is the frame's raw JSON bytes (no length prefix).

Writes are small synchronous appends on purpose: a worker thread per frame would cost more
than the write itself, and a transcript is a debugging aid, not a hot path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import BinaryIO

import attrs
import cbor2

from .protocol.errors import CodeModeError

__all__ = [
    "CLIENT_TO_HOST",
    "HOST_TO_CLIENT",
    "TranscriptError",
    "TranscriptFrame",
    "TranscriptWriter",
    "read_transcript",
]

FORMAT = "codemode-trio-transcript"
VERSION = 1
CLIENT_TO_HOST = "client->host"
HOST_TO_CLIENT = "host->client"


class TranscriptError(CodeModeError):
    """A transcript file is unreadable or not a codemode-trio transcript."""


@attrs.frozen
class TranscriptFrame:
    """One recorded frame."""

    direction: str
    monotonic_ns: int
    payload: bytes


class TranscriptWriter:
    """Append frames to a transcript file (created if missing, appended otherwise)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: BinaryIO | None = open(self.path, "ab")  # noqa: SIM115 - owned until close()
        header = {"format": FORMAT, "version": VERSION, "started_at": time.time()}
        self._write(header)

    def _write(self, item: object) -> None:
        if self._file is None:
            return
        self._file.write(cbor2.dumps(item))
        self._file.flush()

    def record(self, direction: str, payload: bytes) -> None:
        """Append one frame's payload."""
        self._write([direction, time.monotonic_ns(), bytes(payload)])

    def record_sent(self, payload: bytes) -> None:
        """Append a client-to-host frame."""
        self.record(CLIENT_TO_HOST, payload)

    def record_received(self, payload: bytes) -> None:
        """Append a host-to-client frame."""
        self.record(HOST_TO_CLIENT, payload)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def read_transcript(path: str | os.PathLike[str]) -> Iterator[TranscriptFrame]:
    """Yield the frames of a transcript file, in order (several sessions may be appended)."""
    with open(path, "rb") as file:
        while True:
            try:
                item = cbor2.load(file)
            except cbor2.CBORDecodeEOF:
                # End of file, or a last item cut short by a crash mid-write: everything
                # before it is still good.
                return
            except cbor2.CBORDecodeError as exc:
                raise TranscriptError(f"{os.fspath(path)}: not a CBOR sequence: {exc}") from None
            if isinstance(item, dict):
                if item.get("format") != FORMAT:
                    raise TranscriptError(f"{os.fspath(path)}: not a codemode-trio transcript")
                continue
            if (
                not isinstance(item, list)
                or len(item) != 3
                or item[0] not in (CLIENT_TO_HOST, HOST_TO_CLIENT)
                or not isinstance(item[2], bytes)
            ):
                raise TranscriptError(f"{os.fspath(path)}: malformed frame record {item!r:.80}")
            yield TranscriptFrame(item[0], item[1], item[2])
