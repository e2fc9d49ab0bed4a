"""JSON parsing, typed field access and unknown-field accounting shared by every decoder.

Why hand-written checks instead of a schema library: the wire has three naming conventions,
three tag styles and a strict/tolerant split, and decoding sits on the hot path of every frame.
:mod:`~codemode_trio.protocol.schema` declares each message once and derives from that
declaration a *fast* decoder (the happy path only: exactly the 0.171 field set, every type
right; it raises :class:`OffHappyPath` on anything else) and a *precise* decoder, which reads
the objects through :class:`Fields` here: it applies the mode (:class:`DecodeContext`),
reports unknown fields and words each error with its location.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from .errors import ProtocolViolation
from .ids import I64_MAX, I64_MIN
from .values import JSON, U64_MAX, is_opt_u64, is_u64, nests_deeper_than

try:
    import _json
except ImportError:  # pragma: no cover - an interpreter without the C accelerator
    _json = None  # type: ignore[assignment]

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "JSON",
    "U32_MAX",
    "U64_MAX",
    "DecodeContext",
    "Fields",
    "OffHappyPath",
    "UnknownFieldCounts",
    "UnknownFieldHook",
    "dumps",
    "encode_chunks",
    "is_opt_u64",
    "is_u64",
    "loads",
    "nests_deeper_than",
    "type_name",
    "unknown_field_counts",
]

logger = logging.getLogger("codemode_trio.protocol")


#: Called as ``hook(where, field_names)`` when tolerant decoding ignores unknown fields.
UnknownFieldHook = Callable[[str, tuple[str, ...]], None]

_LIST_INDEX = re.compile(r"\[\d+\]")


def normalise_location(where: str) -> str:
    """``where`` with list indices blanked: ``enabled_tools[3]`` becomes ``enabled_tools[]``."""
    return _LIST_INDEX.sub("[]", where) if "[" in where else where


class UnknownFieldCounts(Counter[tuple[str, str]]):
    """How often tolerant decoding ignored each unknown field, by ``(location, field)``.

    A location is counted without its list indices, so that the same field in the tenth item
    of a list is one entry, not ten; lookups normalise the same way, so
    ``counts[("….content_items[7]", "x")]`` reads the shared entry. At most ``limit``
    distinct entries are kept (a host that invents field names cannot grow it without bound);
    fields beyond that are counted under :attr:`OVERFLOW`, and the overflow is logged once.
    The first sighting of each entry is logged at WARNING; later ones only count, so a skewed
    host does not flood the log with one line per frame.
    """

    #: The entry that counts every field seen after the limit was reached.
    OVERFLOW = ("(other locations)", "(other fields)")

    def __init__(self, limit: int = 1024) -> None:
        super().__init__()
        self.limit = limit

    def record(self, where: str, names: tuple[str, ...]) -> None:
        """Count the unknown ``names`` found in the object at ``where``."""
        location = normalise_location(where)
        for name in names:
            key = (location, name)
            if key not in self:
                if len(self) >= self.limit:
                    if self.OVERFLOW not in self:
                        logger.warning(
                            "ignoring unknown field %r in %s (version skew?); more than %d "
                            "distinct unknown fields seen, counting the rest together",
                            name,
                            where,
                            self.limit,
                        )
                    key = self.OVERFLOW
                else:
                    logger.warning("ignoring unknown field %r in %s (version skew?)", name, where)
            super().__setitem__(key, super().__getitem__(key) + 1)

    def __getitem__(self, key: tuple[str, str]) -> int:
        return super().__getitem__(_normalise_key(key))

    def __contains__(self, key: object) -> bool:
        return super().__contains__(_normalise_key(key))


def _normalise_key(key: Any) -> Any:
    if type(key) is tuple and len(key) == 2 and type(key[0]) is str:
        return (normalise_location(key[0]), key[1])
    return key


#: How often tolerant decoding ignored each ``(location, field)`` pair, process-wide (see
#: :class:`UnknownFieldCounts`).
unknown_field_counts = UnknownFieldCounts()

U32_MAX = 2**32 - 1


class OffHappyPath(Exception):
    """Raised by a fast decoder on input it does not handle; the precise decoder takes over.

    Never escapes the codec: it only means "decode this message the careful way".
    """


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
        unknown_field_counts.record(where, names)
        if self.on_unknown is not None:
            self.on_unknown(where, names)


# --------------------------------------------------------------------------- parsing


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(literal: str) -> float:
    value = float(literal)
    # ``1e400`` parses as infinity, which no JSON encoder (ours included) can write back;
    # serde_json refuses it as well.
    if math.isinf(value):
        raise ValueError(f"number out of range: {literal}")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate field `{key}`")
            seen.add(key)
    return result


_TOLERANT_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float)
# Duplicate keys are fatal to the host (serde); strict mode reproduces that. Tolerant mode skips
# the check because a per-object Python hook would triple the cost of every decode.
_STRICT_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_parse_float, object_pairs_hook=_no_duplicates
)

# The decoders' own (C) scanners, which loads calls directly. typeshed does not declare the
# attribute.
_Scanner = Callable[[str, int], tuple[Any, int]]
_TOLERANT_SCAN: _Scanner = _TOLERANT_DECODER.scan_once  # type: ignore[attr-defined]
_STRICT_SCAN: _Scanner = _STRICT_DECODER.scan_once  # type: ignore[attr-defined]

# A lone surrogate can only come from a ``\uD800``-``\uDFFF`` escape (the UTF-8 decoder refuses
# encoded ones); the JSON decoder joins valid pairs into one code point.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_lone_surrogate(value: JSON) -> bool:
    # Iterative, so that a deeply nested value cannot exhaust the stack.
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if _SURROGATE.search(item):
                return True
        elif kind is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def loads(payload: bytes | bytearray | memoryview, ctx: DecodeContext) -> JSON:
    """Parse one frame payload as exactly one JSON value, or raise ``ctx.error``.

    Like serde_json's ``from_slice``: surrounding whitespace is fine, anything else after the
    value is not. Values we could not write back are refused as the host refuses them: NaN and
    infinities (also ``1e400``), and lone surrogate escapes.
    """
    try:
        # ``bytes.decode`` is the quick way; ``str()`` also takes a memoryview.
        text = payload.decode() if type(payload) is bytes else str(payload, "utf-8")
    except UnicodeDecodeError as exc:
        raise ctx.error(f"failed to decode code-mode IPC frame: invalid UTF-8: {exc}") from None
    if ctx.strict:
        decoder, scan = _STRICT_DECODER, _STRICT_SCAN
    else:
        decoder, scan = _TOLERANT_DECODER, _TOLERANT_SCAN
    try:
        # Straight to the C scanner: ``JSONDecoder.decode`` would first run two regular
        # expressions for whitespace that no writer of this protocol emits.
        try:
            value, end = scan(text, 0)
        except StopIteration:
            end = -1
        if end != len(text):
            # Surrounding whitespace (legal), trailing garbage or no value at all: the full
            # decoder accepts the first and words the error for the others.
            value = decoder.decode(text)
    except RecursionError:
        raise ctx.error("failed to decode code-mode IPC frame: recursion limit exceeded") from None
    except ValueError as exc:
        raise ctx.error(f"failed to decode code-mode IPC frame: {exc}") from None
    # Only a frame that spells a surrogate escape needs the walk (and most frames hold no
    # backslash at all, which one memchr tells).
    if "\\" in text and ("\\ud" in text or "\\uD" in text) and _has_lone_surrogate(value):
        raise ctx.error(
            "failed to decode code-mode IPC frame: invalid unicode code point "
            "(lone surrogate escape)"
        )
    return value


# --------------------------------------------------------------------------- encoding


def _unsupported(value: object) -> NoReturn:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Compact, UTF-8 and no NaN, as the host writes. The C encoder is built once: ``JSONEncoder``
# builds a new one on every ``encode`` call. It runs without the circular-reference markers:
# a cycle ends in RecursionError instead, which the codec reports as an EncodeError.
# ``encode_chunks(value, 0)`` returns the pieces of the text that :func:`dumps` joins.
if _json is not None:
    encode_chunks: Callable[[JSON, int], list[str]] = _json.make_encoder(
        None, _unsupported, _json.encode_basestring, None, ":", ",", False, False, False
    )
else:  # pragma: no cover - an interpreter without the C accelerator
    _ENCODER = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
    )

    def encode_chunks(value: JSON, _indent: int) -> list[str]:
        return list(_ENCODER.iterencode(value, _one_shot=True))


def dumps(value: JSON) -> bytes:
    """Encode a wire dict compactly, as the host does (no spaces, UTF-8, no NaN).

    Raises :class:`TypeError`, :class:`ValueError` or :class:`RecursionError` for a value JSON
    cannot carry.
    """
    return "".join(encode_chunks(value, 0)).encode("utf-8")


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
    """Located access to one JSON object's keys, for the precise decoders.

    ``raw`` raises when a required key is missing, ``wrong`` words a type error at the key,
    ``tag`` reads a union's tag, and ``done()`` then checks that no unknown key was present.
    """

    __slots__ = ("ctx", "data", "where")

    def __init__(self, data: object, where: str, ctx: DecodeContext) -> None:
        if type(data) is not dict:
            ctx.fail(where, f"invalid type: {type_name(data)}, expected a map")
        self.data: dict[str, Any] = data
        self.where = where
        self.ctx = ctx

    def done(self, known: frozenset[str]) -> None:
        """Check for keys outside ``known``."""
        if not known.issuperset(self.data):
            self.ctx.unknown(self.where, tuple(k for k in self.data if k not in known))

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

    def tag(self, key: str, known: Mapping[str, object]) -> str:
        """A required tag whose value must be one of ``known`` (unknown tags fail in all modes)."""
        value = self.raw(key)
        if type(value) is not str:
            self.wrong(key, value, "a string")
        if value not in known:
            expected = ", ".join(known)
            self.ctx.fail(self.where, f"unknown variant `{value}`, expected one of {expected}")
        return value
