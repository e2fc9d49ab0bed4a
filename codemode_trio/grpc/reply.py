"""A one-shot reply: set once with a value or an error, awaited by any number of tasks."""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

__all__ = ["Reply"]

T = TypeVar("T")


class Reply(Generic[T]):
    """One value or one exception, delivered once; later deliveries are ignored."""

    __slots__ = ("_error", "_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        """True once a value or an error was delivered."""
        return self._event.is_set()

    def set(self, value: T) -> None:
        """Deliver ``value`` (ignored if already done)."""
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        """Deliver ``error`` (ignored if already done)."""
        if not self._event.is_set():
            self._error = error
            self._event.set()

    def result(self) -> T:
        """Return the value or raise the error; only when :attr:`done`."""
        assert self._event.is_set()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set() stored a T

    async def wait(self) -> T:
        """Wait for the delivery, then return the value or raise the error."""
        await self._event.wait()
        return self.result()
