r"""Observable connection lifecycle: alive or failed, and the first failure reason.

The failure reason is written once; later failures never overwrite it, so every waiter and every
later caller sees the *first* thing that went wrong. Both are trio-util ``AsyncValue``\\ s, so
``await lifecycle.failure.wait_value(...)`` replaces polling.
"""

from __future__ import annotations

from trio_util import AsyncValue

__all__ = ["DEFAULT_FAILURE", "Lifecycle"]

DEFAULT_FAILURE = "code-mode host connection closed"


class Lifecycle:
    """Alive flag plus first failure reason, shared by the connection and its shell."""

    def __init__(self) -> None:
        self.failure: AsyncValue[str | None] = AsyncValue(None)

    @property
    def alive(self) -> bool:
        """True until the first failure is recorded."""
        return self.failure.value is None

    def record_failure(self, reason: str) -> str:
        """Record ``reason`` unless a failure was already recorded; return the recorded one."""
        current: str | None = self.failure.value
        if current is None:
            self.failure.value = current = reason
        return current

    def reason(self) -> str:
        """The recorded failure, or the reference default text if none was recorded."""
        current: str | None = self.failure.value
        return current or DEFAULT_FAILURE

    async def wait_failed(self) -> str:
        """Wait until the connection fails and return the first failure reason."""
        value: str = await self.failure.wait_value(lambda v: v is not None)
        return value
