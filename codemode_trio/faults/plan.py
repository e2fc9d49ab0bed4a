"""Which faults to inject into a host's output, and how each one changes the byte stream.

Pure: :class:`FaultPlan` takes the host's bytes and returns :class:`Action` values (bytes to
pass on, a pause, the end of the connection, a stall); the Trio stream and the process
wrapper carry them out. Counting faults fire once the host has sent N frames (N given as
``name=N``), so that a test knows exactly how far the exchange got.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final, Literal

import attrs

from ..errors import UsageError
from ..protocol.framing import HEADER_BYTES, MAX_FRAME_BYTES

__all__ = ["FAULTS", "FAULT_HELP", "Action", "Fault", "FaultPlan", "parse_faults"]

FAULTS: Final[dict[str, tuple[int, str]]] = {
    "drop-after": (3, "close the connection after N host frames"),
    "stall-after": (3, "stop reading and writing after N host frames"),
    "garbage-after": (3, "send a frame that is not JSON after N host frames"),
    "truncate-after": (3, "send half of frame N+1, then close"),
    "oversize-after": (3, "send a length prefix over 64 MiB after N host frames"),
    "wrong-response-id": (1, "give the Nth operation/response an id nobody asked for"),
    "reuse-delegate-id": (2, "give the Nth delegate/request the id of the first one"),
    "silent-exit-after": (3, "exit 0 with nothing on stderr after N host frames"),
    "slow": (50, "hold every host frame N milliseconds"),
}
"""Every fault: its default N and what it does."""

#: The help text of a ``--fault`` option: every fault, what it does and its default N.
FAULT_HELP: Final = "inject faults into what the host sends, for testing clients: " + "; ".join(
    f"{name}=N ({text}; default {count})" for name, (count, text) in FAULTS.items()
)

# Added to a response id by wrong-response-id: far outside any window a client keeps.
_ID_SHIFT: Final = 1_000_000
_GARBAGE: Final = b"\x0c\x00\x00\x00not JSON \xff\xfe!"
_OVERSIZE: Final = (MAX_FRAME_BYTES + 1).to_bytes(HEADER_BYTES, "little")
# The faults that end the exchange after N frames: what they send first, then how they end it.
_ENDINGS: Final = (
    ("drop-after", b"", "close"),
    ("silent-exit-after", b"", "exit"),
    ("stall-after", b"", "stall"),
    ("garbage-after", _GARBAGE, "stall"),
    ("oversize-after", _OVERSIZE, "stall"),
)


@attrs.frozen
class Fault:
    """One fault and its count (frames, or milliseconds for ``slow``)."""

    name: str
    count: int

    def __str__(self) -> str:
        return f"{self.name}={self.count}"


def parse_faults(spec: str) -> tuple[Fault, ...]:
    """Parse ``NAME[=N][,NAME[=N]...]``; raise :class:`UsageError` naming what is wrong."""
    faults: list[Fault] = []
    for part in spec.split(","):
        name, sep, count_text = part.strip().partition("=")
        if name not in FAULTS:
            raise UsageError(f"unknown fault {name!r}; known faults: {', '.join(FAULTS)}")
        if not sep:
            count = FAULTS[name][0]
        elif count_text.isascii() and count_text.isdigit():
            count = int(count_text)
        else:
            raise UsageError(f"fault {name}: expected a count, got {count_text!r}")
        if any(fault.name == name for fault in faults):
            raise UsageError(f"fault {name} given twice")
        faults.append(Fault(name, count))
    return tuple(faults)


@attrs.frozen
class Action:
    """What the carrier does next.

    ``send`` data, ``pause`` for ``seconds``, ``close`` the connection, ``stall`` it (no more
    reading or writing) or ``exit`` silently; ``fault`` is the fault responsible, if any.
    """

    kind: Literal["send", "pause", "close", "stall", "exit"]
    data: bytes = b""
    seconds: float = 0.0
    fault: Fault | None = None


class FaultPlan:
    """Apply faults to the host-to-client byte stream, frame by frame."""

    def __init__(self, faults: Iterable[Fault]) -> None:
        self.faults = {fault.name: fault for fault in faults}
        self._buffer = bytearray()
        self._frames = 0
        self._responses = 0
        self._delegates = 0
        self._first_delegate_id: int | None = None
        self.finished = False

    def start(self) -> list[Action]:
        """Actions due before the host has sent anything (a count of 0)."""
        return self._after_frame()

    def host_bytes(self, data: bytes | bytearray) -> list[Action]:
        """The actions for more bytes from the host."""
        actions: list[Action] = []
        if self.finished:
            return actions
        self._buffer += data
        while not self.finished and len(self._buffer) >= HEADER_BYTES:
            length = int.from_bytes(self._buffer[:HEADER_BYTES], "little")
            if len(self._buffer) < HEADER_BYTES + length:
                break
            payload = bytes(self._buffer[HEADER_BYTES : HEADER_BYTES + length])
            del self._buffer[: HEADER_BYTES + length]
            actions.extend(self._frame(payload))
        return actions

    def _frame(self, payload: bytes) -> list[Action]:
        actions: list[Action] = []
        slow = self.faults.get("slow")
        if slow is not None and slow.count:
            actions.append(Action("pause", seconds=slow.count / 1000, fault=slow))
        truncate = self.faults.get("truncate-after")
        if truncate is not None and self._frames == truncate.count:
            frame = len(payload).to_bytes(HEADER_BYTES, "little") + payload
            self.finished = True
            return [
                *actions,
                Action("send", frame[: HEADER_BYTES + len(payload) // 2], fault=truncate),
                Action("close", fault=truncate),
            ]
        payload, rewritten_by = self._rewrite(payload)
        header = len(payload).to_bytes(HEADER_BYTES, "little")
        actions.append(Action("send", header + payload, fault=rewritten_by))
        self._frames += 1
        actions.extend(self._after_frame())
        return actions

    def _rewrite(self, payload: bytes) -> tuple[bytes, Fault | None]:
        """The frame as sent, and the fault that changed it, if one did."""
        wrong = self.faults.get("wrong-response-id")
        reuse = self.faults.get("reuse-delegate-id")
        if wrong is None and reuse is None:
            return payload, None
        try:
            message = json.loads(payload)
        except ValueError:
            return payload, None
        if not isinstance(message, dict):
            return payload, None
        kind = message.get("type")
        if wrong is not None and kind == "operation/response":
            self._responses += 1
            if self._responses == wrong.count:
                message["id"] = message["id"] + _ID_SHIFT
                return _encode(message), wrong
        if reuse is not None and kind == "delegate/request":
            self._delegates += 1
            if self._first_delegate_id is None:
                self._first_delegate_id = message["id"]
            elif self._delegates == reuse.count:
                message["id"] = self._first_delegate_id
                return _encode(message), reuse
        return payload, None

    def _after_frame(self) -> list[Action]:
        for name, data, kind in _ENDINGS:
            fault = self.faults.get(name)
            if fault is not None and self._frames == fault.count:
                self.finished = True
                sent = [Action("send", data, fault=fault)] if data else []
                return [*sent, Action(kind, fault=fault)]  # type: ignore[arg-type]
        return []


def _encode(message: object) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
