"""A bounded set of recently seen identifiers.

Both roles must refuse an id that was used recently (a host never reuses a delegate id, a client
never reopens one of the host's last 4096 session ids), but a long-lived connection must not
remember every id forever. :class:`RecentIds` keeps the last ``size`` additions and forgets the
oldest first. Membership and adding are O(1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["RecentIds"]

T = TypeVar("T", bound=Hashable)


class RecentIds(Generic[T]):
    """A set that remembers only its last ``size`` additions (adding a member is a no-op)."""

    __slots__ = ("_members", "_order", "size")

    def __init__(self, size: int) -> None:
        """Remember at most ``size`` ids (at least one)."""
        if type(size) is not int or size < 1:
            raise ValueError(f"size must be a positive integer, not {size!r}")
        self.size = size
        self._members: set[T] = set()
        self._order: deque[T] = deque()

    def __contains__(self, item: object) -> bool:
        return item in self._members

    def __len__(self) -> int:
        return len(self._members)

    def add(self, item: T) -> None:
        """Remember ``item``; the oldest id is forgotten once more than ``size`` are held."""
        members = self._members
        if item in members:
            return
        members.add(item)
        order = self._order
        order.append(item)
        if len(order) > self.size:
            members.discard(order.popleft())

    def discard(self, item: T) -> None:
        """Forget ``item`` now (no error when it is not remembered).

        O(size), unlike the rest: it is for the rare early forget, and keeps the order exact so
        an id added again later is never evicted by its old entry.
        """
        if item in self._members:
            self._members.remove(item)
            self._order.remove(item)
