"""Checks on plain JSON values shared by the codec and the state machines.

The host's integer types (``u64``, ``i64``) and its nesting limit apply to values that callers
build in Python, so the same predicates serve decoding (is this frame valid?) and the commands
of the state machines (may this argument be sent?).
"""

from __future__ import annotations

from typing import Any

__all__ = ["JSON", "U64_MAX", "describe_value", "is_opt_u64", "is_u64", "nests_deeper_than"]

#: Any JSON value, as :func:`json.loads` returns it.
JSON = Any

U64_MAX = 2**64 - 1


def is_u64(value: object) -> bool:
    """Whether ``value`` is an integer the host accepts as ``u64`` (a bool is not)."""
    return type(value) is int and 0 <= value <= U64_MAX


def is_opt_u64(value: object) -> bool:
    """Whether ``value`` is ``None`` or a ``u64`` (an optional ``u64`` field)."""
    return value is None or (type(value) is int and 0 <= value <= U64_MAX)


def nests_deeper_than(value: JSON, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels deep.

    A scalar is 0 levels deep, ``[]`` one, ``[[]]`` two. Iterative and stops at the first
    branch past the limit, so a cycle (infinitely deep) is reported rather than followed.
    """
    if not isinstance(value, (dict, list, tuple)):
        return False
    if limit < 1:
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        children = container.values() if isinstance(container, dict) else container
        for child in children:
            if isinstance(child, (dict, list, tuple)):
                if depth == limit:
                    return True
                stack.append((child, depth + 1))
    return False


def describe_value(value: object, limit: int = 60) -> str:
    """A short, safe description of a caller's value for an error message.

    Never fails and never grows with the value: an object whose ``repr`` raises, or is huge,
    is described by its type.
    """
    try:
        text = repr(value)
    except Exception:
        return f"a {type(value).__name__}"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{text} ({type(value).__name__})" if not isinstance(value, str | int | float) else text
