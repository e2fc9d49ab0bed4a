"""Deadlines on the host: every await on it has one, but only while the host owes us.

The host holds a cell's observation (its initial response, a wait) while one of that cell's
delegate calls is unanswered: a notification's result waits for our acknowledgement, and a
cell blocked in a tool call cannot finish. That time is ours, not the host's, so a
:class:`CellHold` records how long the cell's delegate calls were in flight, and
:func:`await_reply` moves its deadline by exactly that much.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import trio

from .slots import ReplySlot

logger = logging.getLogger("codemode_trio.connection")

__all__ = ["CellHold", "ReplyTimedOut", "await_reply"]

T = TypeVar("T")


class ReplyTimedOut(Exception):
    """The host did not answer within its deadline (the caller fails the connection)."""


class CellHold:
    """How long a cell's delegate calls have kept the host waiting on us."""

    __slots__ = ("_active", "_held", "_idle", "_now", "_since")

    def __init__(self) -> None:
        # The run's clock itself: trio.current_time() is three calls deep, and this is per call.
        self._now = trio.lowlevel.current_clock().current_time
        self._active = 0
        self._held = 0.0
        self._since = 0.0
        self._idle: trio.Event | None = None

    @property
    def active(self) -> int:
        """Delegate calls of the cell in flight right now."""
        return self._active

    def enter(self) -> None:
        """A delegate call of the cell started."""
        if self._active == 0:
            self._since = self._now()
        self._active += 1

    def leave(self) -> None:
        """A delegate call of the cell was answered or revoked."""
        self._active -= 1
        if self._active == 0:
            self._held += self._now() - self._since
            if self._idle is not None:
                self._idle.set()
                self._idle = None

    def held(self, now: float) -> float:
        """Total seconds some delegate call of the cell was in flight, up to ``now``."""
        return self._held + (now - self._since if self._active else 0.0)

    async def wait_idle(self) -> None:
        """Wait until no delegate call of the cell is in flight."""
        if self._active:
            if self._idle is None:
                self._idle = trio.Event()
            await self._idle.wait()


async def await_reply(
    slot: ReplySlot[T],
    limit: float,
    hold: CellHold | None = None,
    on_cancel: Callable[[], None] | None = None,
) -> T:
    """Wait for ``slot``; raise :class:`ReplyTimedOut` after ``limit`` seconds of host time.

    Time during which ``hold`` (the observed cell's delegate calls) kept the host waiting on
    us does not count. The common case (an answer in time) costs one timed wait.
    ``on_cancel`` runs synchronously the instant the caller is cancelled (not when the
    deadline passes), see :meth:`ReplySlot.wait_done`.
    """
    start = trio.current_time()
    held_at_start = hold.held(start) if hold is not None else 0.0
    deadline = start + limit
    while True:
        scope = trio.CancelScope(deadline=deadline)

        def cancelled(scope: trio.CancelScope = scope) -> None:
            if on_cancel is not None and not scope.cancel_called:
                try:
                    on_cancel()
                except Exception:
                    # This runs inside Trio's cancellation machinery, where an exception would
                    # crash the run; the caller's except block applies the abandonment again.
                    logger.exception("applying a caller's cancellation failed")

        with scope:
            await slot.wait_done(cancelled)
            return slot.result()
        if hold is None:
            raise ReplyTimedOut
        if hold.active:
            # Nothing counts until the call is answered: wait for that (or for the reply,
            # which a yield can bring while a tool call is still running).
            async with trio.open_nursery() as nursery:

                async def reply_arrived() -> None:
                    # The caller's cancellation is still applied the instant it comes; the
                    # nursery's own cancel (the call was answered) is not one.
                    await slot.wait_done(lambda: cancelled(nursery.cancel_scope))
                    nursery.cancel_scope.cancel()

                async def call_answered() -> None:
                    await hold.wait_idle()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(reply_arrived)
                nursery.start_soon(call_answered)
            if slot.done:
                return slot.result()
        now = trio.current_time()
        deadline = start + limit + (hold.held(now) - held_at_start)
        if deadline <= now:
            raise ReplyTimedOut
