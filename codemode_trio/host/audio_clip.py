"""The reference host's check on audio output: a WAV clip shorter than 25 ms is not sent."""

from __future__ import annotations

import base64
import binascii
import struct

__all__ = ["SHORT_CLIP_TEXT", "is_short_wav"]

#: The text item the host emits instead of a too-short clip.
SHORT_CLIP_TEXT = "Audio output omitted because the clip is shorter than 25 ms; use a longer clip."

_MIN_SECONDS = 0.025


def is_short_wav(data_uri: str) -> bool:
    """True if ``data_uri`` holds a well-formed WAV clip shorter than 25 ms.

    Anything that is not base64 WAV (whatever its MIME type says) is passed through, as the
    reference host does.
    """
    _, sep, payload = data_uri.partition(";base64,")
    if not sep:
        return False
    try:
        raw = base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError):
        return False
    if len(raw) < 12 or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        return False
    byte_rate = 0
    at = 12
    while at + 8 <= len(raw):
        chunk_id = raw[at : at + 4]
        size: int = struct.unpack_from("<I", raw, at + 4)[0]
        if chunk_id == b"fmt " and size >= 16 and at + 24 <= len(raw):
            byte_rate = struct.unpack_from("<I", raw, at + 16)[0]
        elif chunk_id == b"data":
            if byte_rate == 0:
                return False
            return bool(size / byte_rate < _MIN_SECONDS)
        at += 8 + size + (size & 1)
    return False
