"""One-shot reply slots: how a caller task receives the answer to its request.

A slot is the Trio stand-in for a Rust ``oneshot`` channel: whoever applies the host's answer to
the protocol machine fills it with a value or an exception, synchronously; the caller awaits it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import trio

__all__ = ["ReplySlot"]

T = TypeVar("T")


class ReplySlot(Generic[T]):
    """A single-assignment result: a value or an exception, delivered once."""

    __slots__ = ("_done", "_error", "_value", "_waiters")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._waiters: list[trio.lowlevel.Task] = []

    @property
    def done(self) -> bool:
        """Whether a value or an error was delivered."""
        return self._done

    def set(self, value: T) -> bool:
        """Deliver a value; return False (and deliver nothing) if already done."""
        return self._deliver(value, None)

    def fail(self, error: BaseException) -> bool:
        """Deliver an error; return False if the slot was already done."""
        return self._deliver(None, error)

    def _deliver(self, value: T | None, error: BaseException | None) -> bool:
        if self._done:
            return False
        self._done = True
        self._value = value
        self._error = error
        for task in self._waiters:
            trio.lowlevel.reschedule(task)
        self._waiters.clear()
        return True

    async def wait_done(self, on_cancel: Callable[[], None] | None = None) -> None:
        """Wait until an answer (value or error) was delivered.

        ``on_cancel`` runs the instant the wait is cancelled, synchronously, inside the
        ``cancel()`` call (or the deadline's expiry) that cancels it: a caller's cancellation
        is applied to the protocol before any later command can be, whichever task runs first.
        """
        if self._done:
            await trio.lowlevel.checkpoint()
            return
        task = trio.lowlevel.current_task()
        self._waiters.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiters.remove(task)
            if on_cancel is not None:
                on_cancel()
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def wait(self) -> T:
        """Wait for the answer and return it (or raise the delivered error)."""
        await self.wait_done()
        return self.result()

    def result(self) -> T:
        """The delivered answer; only valid once :attr:`done`."""
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
