"""One-shot reply slots: how a caller task receives the driver's answer.

A slot is the Trio stand-in for a Rust ``oneshot`` channel. The driver fills it with a value or
an exception; the caller awaits it. If the caller is cancelled first it marks the slot
*abandoned* (synchronously, from its ``except`` block), which the driver reads where the Rust
client asks ``is_closed()``: a reply for an abandoned slot is a failed delivery.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

__all__ = ["ReplySlot"]

T = TypeVar("T")


class ReplySlot(Generic[T]):
    """A single-assignment result with an ``abandoned`` flag."""

    __slots__ = ("_error", "_event", "_value", "abandoned", "request_id")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self.abandoned = False
        # Set by the driver when it sends the request, so a cancellation notice can name it.
        self.request_id: int | None = None

    @property
    def done(self) -> bool:
        """Whether a value or an error was delivered."""
        return self._event.is_set()

    def set(self, value: T) -> bool:
        """Deliver a value; return False (and deliver nothing) if abandoned or already done."""
        if self.abandoned or self._event.is_set():
            return False
        self._value = value
        self._event.set()
        return True

    def fail(self, error: BaseException) -> bool:
        """Deliver an error; return False if the slot was already done."""
        if self._event.is_set():
            return False
        self._error = error
        self._event.set()
        return True

    async def wait_done(self) -> None:
        """Wait until an answer (value or error) was delivered."""
        await self._event.wait()

    async def wait(self) -> T:
        """Wait for the answer and return it (or raise the delivered error)."""
        await self._event.wait()
        return self.result()

    def result(self) -> T:
        """The delivered answer; only valid once :attr:`done`."""
        if not self._event.is_set():
            raise RuntimeError("ReplySlot.result() called before an answer was delivered")
        if self._error is not None:
            # A fresh copy per raise keeps tracebacks from accumulating when several callers
            # (or several awaits of one StartedCell) raise the same stored error.
            raise _copy_error(self._error)
        return self._value  # type: ignore[return-value]


def _copy_error(error: BaseException) -> BaseException:
    try:
        clone = type(error)(*error.args)
    except Exception:
        return error
    clone.__dict__.update(getattr(error, "__dict__", {}))
    return clone
