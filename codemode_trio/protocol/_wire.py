"""JSON parsing and typed field access shared by every message's decoder.

Why hand-written checks instead of a schema library: the wire has three naming conventions,
three tag styles and a strict/tolerant split, and decoding sits on the hot path of every frame.
Plain functions over ``dict`` keep that fast and keep every error message specific.

Each message is decoded in one of two ways. Its *fast* decoder reads the ``dict`` directly and
accepts only the happy path: exactly the 0.171 field set, every type right. That input means
the same in strict and tolerant mode, so the fast decoder needs neither the mode nor location
strings. On anything else it raises :class:`OffHappyPath`, and the codec decodes the whole
message again with its *precise* decoder (``from_fields``/``from_wire`` over :class:`Fields`),
which applies the mode, reports unknown fields and words the error with its location.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar, cast

import attrs

from .errors import ProtocolViolation
from .ids import I64_MAX, I64_MIN, is_blank

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
    "is_opt_u64",
    "is_u64",
    "DecodeContext",
    "Fields",
    "OffHappyPath",
    "UnknownFieldHook",
    "dumps",
    "loads",
    "nests_deeper_than",
    "null_keys",
    "slot_builder",
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

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1


def is_u64(value: object) -> bool:
    """Whether ``value`` is an integer the host accepts as ``u64`` (a bool is not)."""
    return type(value) is int and 0 <= value <= U64_MAX


def is_opt_u64(value: object) -> bool:
    """Whether ``value`` is ``None`` or a ``u64`` (an optional ``u64`` field)."""
    return value is None or (type(value) is int and 0 <= value <= U64_MAX)


class OffHappyPath(Exception):
    """Raised by a fast decoder on input it does not handle; the precise decoder takes over.

    Never escapes the codec: it only means "decode this message the careful way".
    """


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


_T = TypeVar("_T")


def slot_builder(cls: type[_T]) -> Callable[..., _T]:
    """Return ``build(*values)``, a positional constructor that stores straight into the slots.

    A frozen attrs class sets each field through ``object.__setattr__``, which costs about
    twice a plain slot store, and the fast decoders build several small objects per message
    from values they have already checked. ``build`` takes every field in order, defaults
    included, and is only for classes whose ``__init__`` does nothing but store its arguments.
    It is generated source, as attrs generates ``__init__`` itself.
    """
    fields = attrs.fields(cast("type[attrs.AttrsInstance]", cls))
    hooks = ("__attrs_pre_init__", "__attrs_post_init__")
    if any(hasattr(cls, hook) for hook in hooks) or any(
        field.converter is not None or field.validator is not None for field in fields
    ):
        raise TypeError(f"{cls.__name__}.__init__ does more than store its arguments")
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    params = ", ".join(f"v{index}" for index in range(len(fields)))
    lines = [f"def build({params}):", "    obj = new(cls)"]
    for index, field in enumerate(fields):
        # The slot's member descriptor: what a plain ``obj.name = value`` would use.
        namespace[f"set{index}"] = cls.__dict__[field.name].__set__
        lines.append(f"    set{index}(obj, v{index})")
    lines.append("    return obj")
    exec("\n".join(lines), namespace)
    build: Callable[..., _T] = namespace["build"]
    build.__qualname__ = f"slot_builder({cls.__name__})"
    return build


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
if _json is not None:
    _encode_chunks: Callable[[JSON, int], list[str]] = _json.make_encoder(
        None, _unsupported, _json.encode_basestring, None, ":", ",", False, False, False
    )
else:  # pragma: no cover - an interpreter without the C accelerator
    _ENCODER = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False
    )

    def _encode_chunks(value: JSON, _indent: int) -> list[str]:
        return list(_ENCODER.iterencode(value, _one_shot=True))


def dumps(value: JSON) -> bytes:
    """Encode a wire dict compactly, as the host does (no spaces, UTF-8, no NaN).

    Raises :class:`TypeError`, :class:`ValueError` or :class:`RecursionError` for a value JSON
    cannot carry.
    """
    return "".join(_encode_chunks(value, 0)).encode("utf-8")


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


_NO_NULLS: frozenset[str] = frozenset()


def null_keys(data: dict[str, Any], keys: tuple[str, ...]) -> frozenset[str]:
    """The optional ``keys`` that ``data`` carries as explicit ``null``.

    What :meth:`Fields.nulls_frozen` records, for the fast decoders (which use no ``Fields``).
    """
    found = _NO_NULLS
    for key in keys:
        if key in data and data[key] is None:
            found = found | {key}
    return found


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
        return frozenset(self.nulls) if self.nulls else _NO_NULLS

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

    def req_identifier(self, key: str) -> str:
        """A required string that must not be blank (a session id)."""
        value = self.req_str(key)
        if is_blank(value):
            self.ctx.fail(f"{self.where}.{key}", "identifier must not be empty")
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
        return self._int(key, self.raw(key), I64_MIN, I64_MAX, "i64")

    def req_u64(self, key: str) -> int:
        """A required ``u64``."""
        return self._int(key, self.raw(key), 0, U64_MAX, "u64")

    def opt_u64(self, key: str) -> int | None:
        """An optional ``u64``."""
        value = self.opt_raw(key)
        if value is None:
            return None
        return self._int(key, value, 0, U64_MAX, "u64")

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
        return tuple(self._int(key, item, low, U32_MAX, expected) for item in items)

    def tag(self, key: str, known: Mapping[str, object]) -> str:
        """A required tag whose value must be one of ``known`` (unknown tags fail in all modes)."""
        value = self.req_str(key)
        if value not in known:
            expected = ", ".join(known)
            self.ctx.fail(self.where, f"unknown variant `{value}`, expected one of {expected}")
        return value
