"""Render a frame transcript as text: one line per frame, decoded (``transcript show``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

from .protocol.codec import decode_client_message, decode_host_message
from .protocol.errors import ProtocolViolation
from .transcript import CLIENT_TO_HOST, read_transcript

__all__ = ["format_transcript", "summarize_payload"]

_WIDTH = 160


def summarize_payload(direction: str, payload: bytes, *, full: bool = False) -> str:
    """The message type and its JSON, shortened unless ``full``; flags undecodable frames."""
    decode = decode_client_message if direction == CLIENT_TO_HOST else decode_host_message
    text = payload.decode("utf-8", errors="replace")
    try:
        message = decode(payload)
    except ProtocolViolation as exc:
        return f"UNDECODABLE ({exc}) {text if full else text[:_WIDTH]}"
    kind = type(message).__name__
    if not full and len(text) > _WIDTH:
        text = text[: _WIDTH - 1] + "…"
    return f"{kind} {text}"


def format_transcript(path: str | os.PathLike[str], *, full: bool = False) -> Iterator[str]:
    """Yield ``+seconds  direction  Type {json}`` for each frame in the transcript."""
    start: int | None = None
    for frame in read_transcript(path):
        if start is None:
            start = frame.monotonic_ns
        seconds = (frame.monotonic_ns - start) / 1e9
        arrow = "C→H" if frame.direction == CLIENT_TO_HOST else "H→C"
        summary = summarize_payload(frame.direction, frame.payload, full=full)
        yield f"+{seconds:.6f}s {arrow} {summary}"
