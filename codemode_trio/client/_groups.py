"""Unwrap a lone exception from a nursery's ``ExceptionGroup`` (decided once, here).

Since trio 0.25 every nursery raises ``ExceptionGroup``\\ s, even for one error raised by the
body of an ``async with open_nursery()`` block. Users of codemode-trio should catch
``CodeModeError`` (or their own exception) and not a group, so every nursery that wraps user
code goes through :func:`unwrapping_nursery`: a group holding exactly one exception is replaced
by that exception; a group of several is left alone, because hiding any of them would lose a
failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["lone_exception", "unwrapping_nursery"]


def lone_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """Return the only leaf exception of a (possibly nested) group, or ``None``."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                collect(inner)
        else:
            leaves.append(exc)

    collect(group)
    return leaves[0] if len(leaves) == 1 else None


@asynccontextmanager
async def unwrapping_nursery() -> AsyncIterator[trio.Nursery]:
    """``trio.open_nursery()``, but a lone error escapes as itself, not inside a group."""
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        lone = lone_exception(group)
        if lone is None:
            raise
        # Raising here would chain the group as the lone exception's context, and every
        # traceback would show "During handling of ... ExceptionGroup" above the real error.
        context = lone.__context__
        try:
            raise lone
        finally:
            lone.__context__ = context
            # Break the reference cycle group -> traceback -> frame -> group.
            del lone, group, context
