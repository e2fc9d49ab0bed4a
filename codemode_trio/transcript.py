"""Frame transcripts: every frame of a connection, as a CBOR sequence (RFC 8742).

A transcript file is a concatenation of CBOR items, appended one frame at a time so that a crash
loses nothing already seen. Each connection that records into the file starts with

1. a header map ``{"format": "codemode-trio-transcript", "version": 1, "started_at": <unix s>}``;
2. then one array per frame: ``[direction, monotonic_ns, payload]`` where ``direction`` is
   ``"client->host"`` or ``"host->client"``, ``monotonic_ns`` comes from
   :func:`time.monotonic_ns` and ``payload`` is the frame's raw JSON bytes (no length prefix).

Transcripts hold every tool input and output, so the writer creates them private (``0600``) and
never follows a symbolic link. Transcripts are also shared as bug reports, so the reader treats
its input as hostile: it decodes only the small CBOR subset the writer produces (no tags, so no
shared references or bignums; bounded nesting; lengths checked against the file's size) and
validates every record.

Writes are small synchronous appends on purpose: a worker thread per frame would cost more
than the write itself, and a transcript is a debugging aid, not a hot path.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import stat
import struct
import time
from collections.abc import Iterator
from typing import BinaryIO, Final

import attrs
import cbor2

from ._oserror import os_error_text
from .errors import UsageError

__all__ = [
    "CLIENT_TO_HOST",
    "HOST_TO_CLIENT",
    "TranscriptError",
    "TranscriptFrame",
    "TranscriptHeader",
    "TranscriptWriter",
    "read_transcript",
    "read_transcript_items",
]

logger = logging.getLogger(__name__)

FORMAT: Final = "codemode-trio-transcript"
VERSION: Final = 1
CLIENT_TO_HOST: Final = "client->host"
HOST_TO_CLIENT: Final = "host->client"

_U64_LIMIT: Final = 1 << 64
# Major type 7: false, true and null; then the floats, by additional information.
_SIMPLE_VALUES: Final = {20: False, 21: True, 22: None}
_FLOAT_FORMATS: Final = {25: ">e", 26: ">f", 27: ">d"}
# The writer nests two levels (a record holding scalars); a little slack, and nothing that could
# exhaust the stack however the file is built.
_MAX_DEPTH: Final = 8
# O_NONBLOCK makes opening a FIFO with no reader fail at once instead of hanging; it is cleared
# again before the first write.
_OPEN_FLAGS: Final = (
    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
)


class TranscriptError(UsageError):
    """A transcript file cannot be created, or is unreadable or not a codemode-trio transcript.

    The message names the file (and, when reading, the record at fault). It is a
    :class:`~codemode_trio.UsageError`: the path is the caller's.
    """


@attrs.frozen
class TranscriptFrame:
    """One recorded frame."""

    direction: str
    monotonic_ns: int
    payload: bytes


@attrs.frozen
class TranscriptHeader:
    """The record that starts each connection's part of a transcript file."""

    version: int
    #: Wall-clock start of the connection, in seconds since the Unix epoch.
    started_at: float


# --------------------------------------------------------------------------------------------
# writing


def _open_private(path: str) -> int:
    """Open ``path`` for appending, creating it ``0600``; refuse links and odd file types."""
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            problem = "it is a symbolic link, and transcripts never follow links"
        elif exc.errno == errno.ENXIO:
            problem = "it is a FIFO with no reader"
        else:
            problem = os_error_text(exc)
        raise TranscriptError(f"cannot open transcript {path}: {problem}") from None
    try:
        mode = os.fstat(fd).st_mode
        # Character devices are allowed so that /dev/null (and /dev/full in tests) work.
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise TranscriptError(f"cannot open transcript {path}: it is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class TranscriptWriter:
    """Append frames to a transcript file (created ``0600`` if missing, appended otherwise).

    Opening raises :class:`TranscriptError` naming the file when it cannot be created or opened
    (missing directory, no permission, a symbolic link, a directory). Once open, recording never
    raises: the first write that fails (disk full, file size limit, ...) logs one warning that
    names the file and the OS error, and recording stops while the connection carries on.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd: int | None = _open_private(self.path)
        self._write({"format": FORMAT, "version": VERSION, "started_at": time.time()})

    @staticmethod
    def check(path: str | os.PathLike[str]) -> None:
        """Raise :class:`TranscriptError` now if ``path`` cannot be opened as a transcript.

        Lets a caller fail before it spawns or sends anything; creates the file (empty) if it
        is missing, exactly as opening the writer would.
        """
        os.close(_open_private(os.fspath(path)))

    @property
    def recording(self) -> bool:
        """False once the writer was closed or a write failed."""
        return self._fd is not None

    def _write(self, item: object) -> None:
        fd = self._fd
        if fd is None:
            return
        # One write per record: with O_APPEND, records from several writers sharing the file
        # never interleave inside each other.
        data = memoryview(cbor2.dumps(item))
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError as exc:
            logger.warning(
                "transcript %s: write failed (%s); recording stopped, the connection carries on",
                self.path,
                os_error_text(exc),
            )
            self._stop()

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
        """Close the file (idempotent; never raises)."""
        self._stop()

    def _stop(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                logger.warning("transcript %s: close failed (%s)", self.path, os_error_text(exc))


# --------------------------------------------------------------------------------------------
# reading


class _Torn(Exception):
    """The file ends inside a record: a crash mid-write, not an error."""


class _Bad(Exception):
    """A record breaks the format; the message says how."""


class _Decoder:
    """Decode the CBOR subset the writer produces, treating the input as hostile."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self._file = file
        self._size = size
        self.offset = 0

    def _take(self, count: int) -> bytes:
        # A declared length past the end of the file is a torn record; checking before
        # reading means a hostile length never makes us allocate it.
        if count > self._size - self.offset:
            raise _Torn
        data = self._file.read(count)
        if len(data) < count:
            raise _Torn
        self.offset += count
        return data

    def _argument(self, info: int) -> int:
        if info < 24:
            return info
        if info == 31:
            raise _Bad("indefinite-length items are not used in transcripts")
        if info > 27:
            raise _Bad(f"reserved CBOR additional information {info}")
        return int.from_bytes(self._take(1 << (info - 24)), "big")

    def item(self, depth: int = 0) -> object:
        if depth > _MAX_DEPTH:
            raise _Bad(f"nested deeper than {_MAX_DEPTH} levels")
        initial = self._take(1)[0]
        major, info = initial >> 5, initial & 0x1F
        if major == 7:
            return self._simple(info)
        value = self._argument(info)
        if major == 0:
            return value
        if major == 1:
            return -1 - value
        if major == 2:
            return self._take(value)
        if major == 3:
            try:
                return self._take(value).decode("utf-8")
            except UnicodeDecodeError:
                raise _Bad("a text string is not valid UTF-8") from None
        if major == 6:
            # Tags carry shared references (which can expand exponentially), bignums (past
            # int-to-str limits), dates...: none belongs in a transcript.
            raise _Bad(f"CBOR tags are not used in transcripts (tag {value})")
        # Every element takes at least one byte, so a count past the file's end is torn.
        if value > self._size - self.offset:
            raise _Torn
        if major == 4:
            return [self.item(depth + 1) for _ in range(value)]
        result: dict[object, object] = {}
        for _ in range(value):
            key = self.item(depth + 1)
            if not isinstance(key, str | int):
                raise _Bad("a map key is neither text nor an integer")
            result[key] = self.item(depth + 1)
        return result

    def _simple(self, info: int) -> object:
        if info in _SIMPLE_VALUES:
            return _SIMPLE_VALUES[info]
        if info in _FLOAT_FORMATS:
            # Half, single or double precision: 2, 4 or 8 bytes, as for an argument.
            return struct.unpack(_FLOAT_FORMATS[info], self._take(1 << (info - 24)))[0]
        raise _Bad(f"unsupported CBOR simple value {info}")


def _header(item: dict[object, object]) -> TranscriptHeader:
    if item.get("format") != FORMAT:
        raise _Bad("not a codemode-trio transcript")
    version = item.get("version")
    if version != VERSION or type(version) is not int:
        raise _Bad(f"unsupported transcript version {_brief(version)}")
    started = item.get("started_at")
    if (
        not isinstance(started, int | float)
        or isinstance(started, bool)
        or not math.isfinite(started)
        or not 0 <= started < _U64_LIMIT
    ):
        raise _Bad(f"header started_at is not a time: {_brief(started)}")
    return TranscriptHeader(version, float(started))


def _frame(item: list[object]) -> TranscriptFrame:
    if len(item) != 3:
        raise _Bad(f"a frame record has 3 fields, this one has {len(item)}")
    direction, stamp, payload = item
    if direction not in (CLIENT_TO_HOST, HOST_TO_CLIENT):
        raise _Bad(f"unknown direction {_brief(direction)}")
    if type(stamp) is not int or not 0 <= stamp < _U64_LIMIT:
        raise _Bad(f"timestamp is not a u64 integer: {_brief(stamp)}")
    if not isinstance(payload, bytes):
        raise _Bad(f"payload is not a byte string: {_brief(payload)}")
    assert isinstance(direction, str)
    return TranscriptFrame(direction, stamp, payload)


def _brief(value: object) -> str:
    """Name a bad value without ever rendering a large one."""
    # Without tags the decoder yields no integer wider than 65 bits, so repr stays short.
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return f"a {type(value).__name__}"


def _open_for_reading(name: str) -> tuple[BinaryIO, int]:
    """Open a transcript for reading; only a regular file (a FIFO would block, or never end)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TranscriptError(f"cannot read transcript {name}: {os_error_text(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TranscriptError(f"cannot read transcript {name}: it is not a regular file")
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise TranscriptError(f"cannot read transcript {name}: {os_error_text(exc)}") from None
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), info.st_size


def read_transcript_items(
    path: str | os.PathLike[str],
) -> Iterator[TranscriptHeader | TranscriptFrame]:
    """Yield the records of a transcript file in order: a header per connection, then frames.

    A last record cut short (a crash mid-write) ends the iteration quietly: everything before it
    is still good. Anything else that is not a well-formed transcript raises
    :class:`TranscriptError` naming the file, the record (counted from 1) and the problem;
    a missing or unreadable file raises it too.
    """
    name = os.fspath(path)
    file, size = _open_for_reading(name)
    with file:
        decoder = _Decoder(file, size)
        index = 0
        while decoder.offset < size:
            index += 1
            start = decoder.offset
            try:
                item = decoder.item()
                if isinstance(item, dict):
                    yield _header(item)
                elif index == 1:
                    raise _Bad("not a codemode-trio transcript (no header)")
                elif isinstance(item, list):
                    yield _frame(item)
                else:
                    raise _Bad(f"a record is {_brief(item)}, not a header or a frame")
            except _Torn:
                return
            except _Bad as exc:
                raise TranscriptError(f"{name}: record {index} (byte {start}): {exc}") from None
            except OSError as exc:
                raise TranscriptError(
                    f"cannot read transcript {name}: {os_error_text(exc)}"
                ) from None


def read_transcript(path: str | os.PathLike[str]) -> Iterator[TranscriptFrame]:
    """Yield the frames of a transcript file, in order (several connections may be appended).

    See :func:`read_transcript_items` for what is refused; headers are skipped here.
    """
    for item in read_transcript_items(path):
        if isinstance(item, TranscriptFrame):
            yield item
