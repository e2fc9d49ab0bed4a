"""JSON parsing and typed field access shared by every message's ``from_wire``.

Why hand-written checks instead of a schema library: the wire has three naming conventions,
three tag styles and a strict/tolerant split, and decoding sits on the hot path of every frame.
Plain functions over ``dict`` keep that fast and keep every error message specific.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from .errors import ProtocolViolation

__all__ = [
    "JSON",
    "DecodeContext",
    "Fields",
    "UnknownFieldHook",
    "dumps",
    "loads",
    "unknown_field_counts",
]

logger = logging.getLogger("codemode_trio.protocol")

#: Any JSON value, as :func:`json.loads` returns it.
JSON = Any

#: Called as ``hook(where, field_names)`` when tolerant decoding ignores unknown fields.
UnknownFieldHook = Callable[[str, tuple[str, ...]], None]

#: How often tolerant decoding ignored each ``(where, field)`` pair, process-wide. The first
#: sighting of a pair is logged at WARNING; later ones only count, so a skewed host does not
#: flood the log with one line per frame.
unknown_field_counts: Counter[tuple[str, str]] = Counter()

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_U64_MAX = 2**64 - 1
_U32_MAX = 2**32 - 1


def _record_unknown(where: str, names: tuple[str, ...]) -> None:
    for name in names:
        key = (where, name)
        if key not in unknown_field_counts:
            logger.warning("ignoring unknown field %r in %s (version skew?)", name, where)
        unknown_field_counts[key] += 1


class DecodeContext:
    """Decoding options threaded through ``from_wire``: strictness, who is at fault, hooks."""

    __slots__ = ("error", "on_unknown", "strict")

    def __init__(
        self,
        *,
        strict: bool,
        error: type[ProtocolViolation],
        on_unknown: UnknownFieldHook | None = None,
    ) -> None:
        self.strict = strict
        self.error = error
        self.on_unknown = on_unknown

    def fail(self, where: str, problem: str) -> NoReturn:
        """Raise this context's violation class with a message naming the location."""
        raise self.error(f"failed to decode code-mode IPC frame: {problem} in {where}")

    def unknown(self, where: str, names: tuple[str, ...]) -> None:
        """Handle fields nobody knows: fatal when strict, logged and counted when tolerant."""
        if self.strict:
            self.fail(where, f"unknown field `{names[0]}`")
        _record_unknown(where, names)
        if self.on_unknown is not None:
            self.on_unknown(where, names)


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate field `{key}`")
            seen.add(key)
    return result


_TOLERANT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
# Duplicate keys are fatal to the host (serde); strict mode reproduces that. Tolerant mode skips
# the check because a per-object Python hook would triple the cost of every decode.
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, object_pairs_hook=_no_duplicates
)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(payload: bytes | bytearray | memoryview, ctx: DecodeContext) -> JSON:
    """Parse one frame payload as exactly one JSON value, or raise ``ctx.error``."""
    try:
        text = bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ctx.error(f"failed to decode code-mode IPC frame: invalid UTF-8: {exc}") from None
    decoder = _STRICT_DECODER if ctx.strict else _TOLERANT_DECODER
    try:
        # json.loads accepts leading/trailing whitespace and rejects trailing garbage, which is
        # exactly serde_json's from_slice behaviour.
        return decoder.decode(text)
    except RecursionError:
        raise ctx.error("failed to decode code-mode IPC frame: recursion limit exceeded") from None
    except ValueError as exc:
        raise ctx.error(f"failed to decode code-mode IPC frame: {exc}") from None


def dumps(value: JSON) -> bytes:
    """Encode a wire dict compactly, as the host does (no spaces, UTF-8, no NaN)."""
    return _ENCODER.encode(value).encode("utf-8")


def type_name(value: object) -> str:
    """Describe a JSON value's type the way serde's errors do."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "floating point"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "sequence"
    return "map"


class Fields:
    """Typed, located access to one JSON object's fields.

    Every ``req_*`` raises when the key is missing or mistyped; every ``opt_*`` returns ``None``
    for an absent key or ``null``. ``done()`` then checks that no unknown key was present.
    ``nulls`` records which optional keys were present as explicit ``null`` so that encoders can
    reproduce a frame exactly.
    """

    __slots__ = ("ctx", "data", "nulls", "where")

    def __init__(self, data: object, where: str, ctx: DecodeContext) -> None:
        if type(data) is not dict:
            ctx.fail(where, f"invalid type: {type_name(data)}, expected a map")
        self.data: dict[str, Any] = data
        self.where = where
        self.ctx = ctx
        self.nulls: set[str] | None = None

    def done(self, known: frozenset[str]) -> None:
        """Check for keys outside ``known``."""
        if not known.issuperset(self.data):
            self.ctx.unknown(self.where, tuple(k for k in self.data if k not in known))

    def nulls_frozen(self) -> frozenset[str]:
        """Optional keys that were present as explicit ``null``."""
        return frozenset(self.nulls) if self.nulls else frozenset()

    def missing(self, key: str) -> NoReturn:
        """Raise for a required key that is absent."""
        self.ctx.fail(self.where, f"missing field `{key}`")

    def wrong(self, key: str, value: object, expected: str) -> NoReturn:
        """Raise for a key whose value has the wrong type."""
        self.ctx.fail(
            f"{self.where}.{key}", f"invalid type: {type_name(value)}, expected {expected}"
        )

    def raw(self, key: str) -> JSON:
        """A required key of any JSON type."""
        try:
            return self.data[key]
        except KeyError:
            self.missing(key)

    def opt_raw(self, key: str) -> JSON:
        """An optional key of any JSON type (absent gives ``None``)."""
        value = self.data.get(key)
        if value is None and key in self.data:
            self._note_null(key)
        return value

    def _note_null(self, key: str) -> None:
        if self.nulls is None:
            self.nulls = set()
        self.nulls.add(key)

    def req_str(self, key: str) -> str:
        """A required string."""
        value = self.raw(key)
        if type(value) is not str:
            self.wrong(key, value, "a string")
        return value

    def opt_str(self, key: str) -> str | None:
        """An optional string."""
        value = self.opt_raw(key)
        if value is not None and type(value) is not str:
            self.wrong(key, value, "a string")
        return value

    def _int(self, key: str, value: object, low: int, high: int, expected: str) -> int:
        # bool is an int subclass in Python but never a JSON integer.
        if type(value) is not int:
            self.wrong(key, value, expected)
        if not low <= value <= high:
            self.ctx.fail(
                f"{self.where}.{key}", f"invalid value: integer `{value}`, expected {expected}"
            )
        return value

    def req_i64(self, key: str) -> int:
        """A required ``i64``."""
        return self._int(key, self.raw(key), _I64_MIN, _I64_MAX, "i64")

    def req_u64(self, key: str) -> int:
        """A required ``u64``."""
        return self._int(key, self.raw(key), 0, _U64_MAX, "u64")

    def opt_u64(self, key: str) -> int | None:
        """An optional ``u64``."""
        value = self.opt_raw(key)
        if value is None:
            return None
        return self._int(key, value, 0, _U64_MAX, "u64")

    def opt_i32(self, key: str) -> int | None:
        """An optional ``i32``."""
        value = self.opt_raw(key)
        if value is None:
            return None
        return self._int(key, value, -(2**31), 2**31 - 1, "i32")

    def req_list(self, key: str) -> list[Any]:
        """A required array."""
        value = self.raw(key)
        if type(value) is not list:
            self.wrong(key, value, "a sequence")
        return value

    def req_str_list(self, key: str) -> tuple[str, ...]:
        """A required array of strings."""
        items = self.req_list(key)
        for item in items:
            if type(item) is not str:
                self.wrong(key, item, "a string")
        return tuple(items)

    def req_u32_list(self, key: str, *, nonzero: bool = False) -> tuple[int, ...]:
        """A required array of ``u32`` (optionally non-zero)."""
        items = self.req_list(key)
        low = 1 if nonzero else 0
        expected = "a nonzero u32" if nonzero else "u32"
        return tuple(self._int(key, item, low, _U32_MAX, expected) for item in items)

    def tag(self, key: str, known: Mapping[str, object]) -> str:
        """A required tag whose value must be one of ``known`` (unknown tags fail in all modes)."""
        value = self.req_str(key)
        if value not in known:
            expected = ", ".join(known)
            self.ctx.fail(self.where, f"unknown variant `{value}`, expected one of {expected}")
        return value
