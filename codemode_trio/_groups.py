"""Unwrap a lone exception from a nursery's ``ExceptionGroup`` (decided once, here).

Since trio 0.25 every nursery raises ``ExceptionGroup``\\ s, even for one error raised by the
body of an ``async with open_nursery()`` block. Users of codemode-trio should catch
``CodeModeError`` (or their own exception) and not a group, so every nursery that wraps user
code goes through :func:`unwrapping_nursery`: a group holding exactly one exception is replaced
by that exception; a group of several is left alone, because hiding any of them would lose a
failure. Two groups of several escape as one exception all the same:

- a group of nothing but ``Cancelled`` (however nested: the body's and its children's, all
  cancelled from outside) is one cancellation and escapes as one ``Cancelled``, so the scope
  that cancelled catches it as it would from a plain ``await``;
- a ``KeyboardInterrupt`` or ``SystemExit`` beside errors (typically the connection failures
  it caused) escapes as itself, with the others as its context, as it does from a single
  connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["lone_exception", "unwrapping_nursery"]


def lone_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """Return the group's only member (or one ``Cancelled`` of many), else ``None``.

    One level only: the group is the one our nursery made, and its member is exactly what the
    body or a child raised, so a group the user raised (or a nested nursery's) stays intact.
    Cancellations are the exception: a ``Cancelled`` that reaches a nursery's exit comes from
    a scope around it, so copies of it hide no failure.
    """
    if group.split(trio.Cancelled)[1] is None:
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        return first
    return group.exceptions[0] if len(group.exceptions) == 1 else None


def _interrupt(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    # The group's one KeyboardInterrupt or SystemExit, however deep (a child's own nursery
    # may have wrapped it), when everything else in it is an Exception.
    interrupts, rest = group.split((KeyboardInterrupt, SystemExit))
    if interrupts is None or (rest is not None and rest.split(Exception)[1] is not None):
        return None
    found: BaseException = interrupts
    while isinstance(found, BaseExceptionGroup) and len(found.exceptions) == 1:
        found = found.exceptions[0]
    return None if isinstance(found, BaseExceptionGroup) else found


@asynccontextmanager
async def unwrapping_nursery() -> AsyncIterator[trio.Nursery]:
    """``trio.open_nursery()``, but a lone error escapes as itself, not inside a group."""
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        lone = lone_exception(group)
        context: BaseException | None
        if lone is not None:
            # Raising here would chain the group as the lone exception's context, and every
            # traceback would show "During handling of ... ExceptionGroup" above the real one.
            context = lone.__context__
        else:
            lone = _interrupt(group)
            if lone is None:
                raise
            context = group.split((KeyboardInterrupt, SystemExit))[1]
        try:
            raise lone
        finally:
            lone.__context__ = context
            # Break the reference cycle group -> traceback -> frame -> group.
            del lone, group, context
