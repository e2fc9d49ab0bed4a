"""Small value types for the protocol's identifiers.

Request and delegate ids are ``i64`` on the wire. They are ``int`` subclasses so they cost
nothing to compare or hash, and their ``repr`` matches the reference client's Debug output
(``RequestId(5)``), which appears verbatim in several reference error strings.
"""

from __future__ import annotations

__all__ = ["I64_MAX", "I64_MIN", "DelegateRequestId", "RequestId"]

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


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
