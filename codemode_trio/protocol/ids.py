"""Small value types for the protocol's identifiers, and the host's rules for them.

Request and delegate ids are ``i64`` on the wire. They are ``int`` subclasses so they cost
nothing to compare or hash, and their ``repr`` matches the reference client's Debug output
(``RequestId(5)``), which appears verbatim in several reference error strings.

The host's own types (``SessionId``, ``Capability``, ``ProtocolVersion`` in its ``types.rs``)
reject blank identifiers and repeated versions or capabilities while *decoding*, which kills the
connection. :func:`check_identifier` and :func:`check_hello` state those rules once, for both
``build_hello`` (refuse to send such a hello) and the client-message decoder (reject it, as the
host would).

Both roles must also refuse an id used recently (a host never reuses a delegate id, a client
never reopens one of the host's last 4096 session ids), yet a long-lived connection must not
remember every id forever: :class:`RecentIds` keeps a bounded window.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "DelegateRequestId",
    "RecentIds",
    "RequestId",
    "check_hello",
    "check_identifier",
    "is_blank",
]

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
_U32_MAX = 2**32 - 1
T = TypeVar("T", bound=Hashable)

# What Rust's ``str::trim`` removes (the Unicode White_Space property). ``str.strip()`` would
# also remove U+001C..U+001F, which the host keeps: "\x1c" is a valid identifier there.
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


class RequestId(int):
    """Id of an ``operation/request``, chosen by the client (strictly increasing from 1)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"RequestId({int(self)})"

    __str__ = __repr__


class DelegateRequestId(int):
    """Id of a ``delegate/request``, chosen by the host (from 1, shared by all sessions)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"DelegateRequestId({int(self)})"

    __str__ = __repr__


def is_blank(value: str) -> bool:
    """Whether the host would consider ``value`` empty once trimmed."""
    return not value.strip(_WHITESPACE)


def check_identifier(value: str) -> None:
    """Raise :class:`ValueError` for a blank session id or capability (the host's text)."""
    if is_blank(value):
        raise ValueError("identifier must not be empty")


def check_hello(versions: Sequence[int], required: Sequence[str], optional: Sequence[str]) -> None:
    """Apply the host's decoding rules for a hello's versions and capabilities (spec §4.1).

    Raises :class:`ValueError` carrying the host's own message for the first rule broken: no
    version, a version that is not a non-zero ``u32``, a repeated version, a blank or repeated
    capability, or a capability that is both required and optional.
    """
    if not versions:
        raise ValueError("at least one protocol version is required")
    seen_versions: set[int] = set()
    for version in versions:
        # bool is an int subclass in Python but never a JSON integer.
        if type(version) is not int or not 0 < version <= _U32_MAX:
            raise ValueError(f"invalid value: integer `{version}`, expected a nonzero u32")
        if version in seen_versions:
            raise ValueError(f"duplicate protocol version {version}")
        seen_versions.add(version)
    for group in (required, optional):
        seen: set[str] = set()
        for capability in group:
            check_identifier(capability)
            if capability in seen:
                raise ValueError(f"duplicate capability `{capability}`")
            seen.add(capability)
    both = sorted(set(required) & set(optional))
    if both:
        raise ValueError(f"capability `{both[0]}` cannot be both required and optional")


class RecentIds(Generic[T]):
    """A set that remembers only its last ``size`` additions (adding a member is a no-op)."""

    __slots__ = ("_members", "_order", "size")

    def __init__(self, size: int) -> None:
        """Remember at most ``size`` ids (at least one)."""
        if type(size) is not int or size < 1:
            raise ValueError(f"size must be a positive integer, not {size!r}")
        self.size = size
        # A set and a deque rather than an OrderedDict: adding, on every delegate call, is
        # faster, and only the rare early forget pays for it.
        self._members: set[T] = set()
        self._order: deque[T] = deque()

    def __contains__(self, item: object) -> bool:
        return item in self._members

    def __len__(self) -> int:
        return len(self._members)

    def add(self, item: T) -> bool:
        """Remember ``item``; ``False`` if it already was (and nothing changes).

        The oldest id is forgotten once more than ``size`` are held.
        """
        members = self._members
        if item in members:
            return False
        members.add(item)
        order = self._order
        order.append(item)
        if len(order) > self.size:
            members.discard(order.popleft())
        return True

    def discard(self, item: T) -> None:
        """Forget ``item`` now (no error when it is not remembered).

        O(size): it keeps the order exact, so an id added again later is never evicted by its
        old entry.
        """
        if item in self._members:
            self._members.remove(item)
            self._order.remove(item)
