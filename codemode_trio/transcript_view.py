r"""Render a frame transcript as text: one line per frame, decoded (``transcript show``).

Transcripts arrive as bug reports from anyone, so everything printed is made safe for a
terminal first with :func:`terminal_safe` (the escaping ``codemode-trio run`` uses for a cell's
output too): control characters (escape sequences that retitle a window or recolour the screen),
C1 controls and the Unicode bidirectional overrides are shown as ``\xNN`` / ``\uNNNN`` escapes
instead of being written raw; here tab and newline too, since one frame is one line.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator

from ._terminal import terminal_safe
from .protocol.codec import decode_client_message, decode_host_message
from .protocol.errors import ProtocolViolation
from .transcript import CLIENT_TO_HOST, TranscriptHeader, read_transcript_items

__all__ = ["NO_FRAMES", "format_transcript", "summarize_payload", "terminal_safe"]

_WIDTH = 160

NO_FRAMES = "no frames"
"""What :func:`format_transcript` yields for a transcript that holds no frame at all."""


def summarize_payload(direction: str, payload: bytes, *, full: bool = False) -> str:
    """The message type and its JSON, shortened unless ``full``; flags undecodable frames.

    The result is :func:`terminal_safe`.
    """
    decode = decode_client_message if direction == CLIENT_TO_HOST else decode_host_message
    text = payload.decode("utf-8", errors="replace")
    try:
        message = decode(payload)
    except ProtocolViolation as exc:
        problem = str(exc)[:_WIDTH]
        return terminal_safe(f"UNDECODABLE ({problem}) {text if full else text[:_WIDTH]}")
    kind = type(message).__name__
    if not full and len(text) > _WIDTH:
        text = text[: _WIDTH - 1] + "…"
    return terminal_safe(f"{kind} {text}")


def _started(header: TranscriptHeader) -> str:
    try:
        moment = datetime.datetime.fromtimestamp(header.started_at, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"at unix time {header.started_at}"
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def format_transcript(path: str | os.PathLike[str], *, full: bool = False) -> Iterator[str]:
    """Yield ``+seconds  direction  Type {json}`` for each frame in the transcript.

    When several connections were appended to one file, each after the first is announced by
    a ``--- connection N, started <UTC time> ---`` line and its times restart from zero (every
    connection has its own monotonic clock). A transcript without frames yields
    :data:`NO_FRAMES`. Raises :class:`~codemode_trio.transcript.TranscriptError` for a file
    that is missing or not a well-formed transcript.
    """
    start: int | None = None
    connections = 0
    frames = 0
    for item in read_transcript_items(path):
        if isinstance(item, TranscriptHeader):
            connections += 1
            start = None
            if connections > 1:
                yield f"--- connection {connections}, started {_started(item)} ---"
            continue
        frames += 1
        if start is None:
            start = item.monotonic_ns
        seconds = (item.monotonic_ns - start) / 1e9
        arrow = "C→H" if item.direction == CLIENT_TO_HOST else "H→C"
        summary = summarize_payload(item.direction, item.payload, full=full)
        yield f"+{seconds:.6f}s {arrow} {summary}"
    if frames == 0:
        yield NO_FRAMES
