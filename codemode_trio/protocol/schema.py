"""Wire schemas: each message is declared once, and its decoders and encoder come from that.

A declaration says, for one JSON object, which keys it has, which Python attribute each fills,
what type each holds (:data:`STR`, :data:`IDENTIFIER`, :data:`I64`, lists, nested objects...),
whether a key may be absent or ``null`` and in which mode (:class:`Presence`), and how an unset
value is written back. Four shapes of node cover the protocol:

- :class:`Struct`: one object that becomes one class, optionally with a tag key
  (``"type": "cell/closed"``) and with keys of plain sub-objects flattened into it
  (:class:`Inline`, such as a tool's ``tool_name``);
- :class:`Union`: internally tagged (the tag key picks a :class:`Struct` or :class:`Wrap`);
- :class:`External`: externally tagged (``{"Result": {...}}``);
- :class:`Wrap`: a tagged object whose only other key carries the value
  (``{"type": "tool/invoke", "invocation": {...}}``).

From each node come three things:

- ``fast(data)``: the happy-path decoder, generated as Python source when the node is built (as
  attrs generates ``__init__``). It accepts exactly the complete field set with every value
  well typed, input that means the same in strict and tolerant mode, and raises
  :class:`~codemode_trio.protocol._wire.OffHappyPath` on anything else.
- ``decode(data, where, ctx)``: the precise decoder, an interpreter over the declaration. It
  applies the mode, reports unknown fields and words every error with its location.
- ``encode(obj)``: the encoder, generated like ``fast``; a class's ``to_wire`` is its node's
  ``encode``.

Because all three read one declaration, a message cannot be decoded by one rule and encoded by
another; ``tests/protocol/test_fast_precise_agree.py`` checks that the two decoders agree.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._wire import U32_MAX, U64_MAX, DecodeContext, Fields, OffHappyPath
from .codegen import Source
from .ids import I64_MAX, I64_MIN, is_blank

__all__ = [
    "I32",
    "I64",
    "IDENTIFIER",
    "NONZERO_U32",
    "RAW",
    "STR",
    "U64",
    "Choice",
    "External",
    "ExternalVariant",
    "Field",
    "Inline",
    "Int",
    "Kind",
    "Nested",
    "Node",
    "Presence",
    "ScalarList",
    "Struct",
    "StructList",
    "Union",
    "WireValue",
    "Wrap",
]

_NO_NULLS: frozenset[str] = frozenset()


class WireValue:
    """Base of the classes a schema encodes: gives them ``to_wire`` and ``from_wire``.

    Each class's node replaces ``to_wire`` with its generated encoder when it is declared.
    """

    __slots__ = ()

    def to_wire(self) -> dict[str, Any]:
        """Return the JSON-ready wire dict, keys in the host's order."""
        raise TypeError(f"no wire schema is declared for {type(self).__name__}")

    @classmethod
    def from_wire(cls, data: object, where: str, ctx: DecodeContext) -> Any:
        """Decode ``data`` (located at ``where``) precisely, as the class's node declares."""
        node = _NODES.get(cls)
        if node is None:
            raise TypeError(f"no wire schema is declared for {cls.__name__}")
        return node.decode(data, where, ctx)


_TO_WIRE = "to_wire"

# The node declared for each class, for WireValue.from_wire.
_NODES: dict[type, Node] = {}


# --------------------------------------------------------------------------- value kinds


class Kind:
    """How one key's value is checked and converted (decoding) and written (encoding)."""

    #: Whether ``null`` is an ordinary value of this kind (only :data:`RAW`).
    accepts_null = False
    #: Whether a value is written as it is (so ``None`` needs no special case).
    encodes_as_is = True

    def check(self, f: Fields, key: str, value: Any) -> Any:
        """Return ``value`` (found at ``f.where`` under ``key``) converted, or raise."""
        raise NotImplementedError

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        """Emit code raising ``Off`` unless ``var`` is well typed, then converting it in place."""

    def gen_encode(self, src: Source, expr: str) -> str:
        """An expression writing the (non-``None``) value ``expr``."""
        return expr


class _Str(Kind):
    def check(self, f: Fields, key: str, value: Any) -> Any:
        if type(value) is not str:
            f.wrong(key, value, "a string")
        return value

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        src.emit(indent, f"if type({var}) is not str: raise Off")


class _Identifier(_Str):
    def check(self, f: Fields, key: str, value: Any) -> Any:
        super().check(f, key, value)
        if is_blank(value):
            f.ctx.fail(f"{f.where}.{key}", "identifier must not be empty")
        return value

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        blank = src.ref(is_blank)
        src.emit(indent, f"if type({var}) is not str or {blank}({var}): raise Off")


class Int(Kind):
    """An integer in ``[low, high]``; ``expected`` names the type in errors (serde's words)."""

    def __init__(
        self, low: int, high: int, expected: str, convert: Callable[[int], int] | None = None
    ) -> None:
        self.low = low
        self.high = high
        self.expected = expected
        self.convert = convert

    def with_type(self, convert: Callable[[int], int]) -> Int:
        """The same range, each value wrapped by ``convert`` (an ``int`` subclass)."""
        return Int(self.low, self.high, self.expected, convert)

    def check(self, f: Fields, key: str, value: Any) -> Any:
        """Check and convert one value (see :meth:`Kind.check`)."""
        # bool is an int subclass in Python but never a JSON integer.
        if type(value) is not int:
            f.wrong(key, value, self.expected)
        if not self.low <= value <= self.high:
            f.ctx.fail(
                f"{f.where}.{key}", f"invalid value: integer `{value}`, expected {self.expected}"
            )
        return value if self.convert is None else self.convert(value)

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        """Emit the happy-path check (see :meth:`Kind.gen_fast`)."""
        src.emit(
            indent,
            f"if type({var}) is not int or not {self.low} <= {var} <= {self.high}: raise Off",
        )
        if self.convert is not None:
            src.emit(indent, f"{var} = {src.ref(self.convert)}({var})")


class Choice(Kind):
    """A string from a fixed set (a unit enum).

    ``expected`` is the tail of the error (``"`client` or `server`"``), or ``None`` for the
    bare ``unknown variant`` text. ``strict_only``: tolerant decoding accepts any string (a
    newer host may add values we can pass through untouched).
    """

    def __init__(
        self, values: Sequence[str], expected: str | None, *, strict_only: bool = False
    ) -> None:
        self.values = tuple(values)
        self.expected = expected
        self.strict_only = strict_only

    def check(self, f: Fields, key: str, value: Any) -> Any:
        """Check and convert one value (see :meth:`Kind.check`)."""
        STR.check(f, key, value)
        if value not in self.values and (f.ctx.strict or not self.strict_only):
            tail = "" if self.expected is None else f", expected {self.expected}"
            f.ctx.fail(f"{f.where}.{key}", f"unknown variant `{value}`{tail}")
        return value

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        """Emit the happy-path check (see :meth:`Kind.gen_fast`)."""
        # ``!=`` against each string: a non-string never equals one, and nothing is hashed.
        test = " and ".join(f"{var} != {value!r}" for value in self.values)
        src.emit(indent, f"if {test}: raise Off")


class _Raw(Kind):
    accepts_null = True

    def check(self, f: Fields, key: str, value: Any) -> Any:
        return value


class ScalarList(Kind):
    """An array of scalars, decoded as a tuple; an item's error is located at the array."""

    encodes_as_is = False

    def __init__(self, item: Kind) -> None:
        self.item = item

    def check(self, f: Fields, key: str, value: Any) -> Any:
        """Check and convert one value (see :meth:`Kind.check`)."""
        if type(value) is not list:
            f.wrong(key, value, "a sequence")
        return tuple([self.item.check(f, key, item) for item in value])

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        """Emit the happy-path check (see :meth:`Kind.gen_fast`)."""
        item = src.var()
        src.emit(indent, f"if type({var}) is not list: raise Off")
        src.emit(indent, f"for {item} in {var}:")
        self.item.gen_fast(src, item, indent + 1)
        src.emit(indent, f"{var} = tuple({var})")

    def gen_encode(self, src: Source, expr: str) -> str:
        """Write one value (see :meth:`Kind.gen_encode`)."""
        return f"list({expr})"


class StructList(Kind):
    """An array of objects decoded by ``node``, as a tuple; items are located as ``key[i]``."""

    encodes_as_is = False

    def __init__(self, node: Node) -> None:
        self.node = node

    def check(self, f: Fields, key: str, value: Any) -> Any:
        """Check and convert one value (see :meth:`Kind.check`)."""
        if type(value) is not list:
            f.wrong(key, value, "a sequence")
        decode, ctx = self.node.decode, f.ctx
        return tuple(
            [decode(item, f"{f.where}.{key}[{index}]", ctx) for index, item in enumerate(value)]
        )

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        """Emit the happy-path check (see :meth:`Kind.gen_fast`)."""
        fast = src.ref(self.node.fast)
        src.emit(indent, f"if type({var}) is not list: raise Off")
        src.emit(indent, f"{var} = tuple(map({fast}, {var})) if {var} else ()")

    def gen_encode(self, src: Source, expr: str) -> str:
        """Write one value (see :meth:`Kind.gen_encode`)."""
        item = src.var()
        return f"[{_gen_encode_call(src, self.node, item)} for {item} in {expr}]"


class Nested(Kind):
    """A value decoded by ``node``, located at ``key``."""

    encodes_as_is = False

    def __init__(self, node: Node) -> None:
        self.node = node

    def check(self, f: Fields, key: str, value: Any) -> Any:
        """Check and convert one value (see :meth:`Kind.check`)."""
        return self.node.decode(value, f"{f.where}.{key}", f.ctx)

    def gen_fast(self, src: Source, var: str, indent: int) -> None:
        """Emit the happy-path check (see :meth:`Kind.gen_fast`)."""
        node = self.node
        if isinstance(node, Union):
            # The union's dispatch, inlined: one call fewer per level on the hot path.
            table = src.ref(node.fast_by_tag)
            tag = src.var()
            src.emit(indent, f"if type({var}) is not dict: raise Off")
            src.emit(indent, f"{tag} = {var}.get({node.key!r})")
            src.emit(indent, f"{tag} = {table}.get({tag}) if type({tag}) is str else None")
            src.emit(indent, f"if {tag} is None: raise Off")
            src.emit(indent, f"{var} = {tag}({var})")
            return
        # The node's fast decoder declines ``None`` (a missing key) like any non-object.
        src.emit(indent, f"{var} = {src.ref(node.fast)}({var})")

    def gen_encode(self, src: Source, expr: str) -> str:
        """Write one value (see :meth:`Kind.gen_encode`)."""
        return _gen_encode_call(src, self.node, expr)


def _gen_encode_call(src: Source, node: Node, expr: str) -> str:
    """An expression writing ``expr`` (a simple name or attribute) with ``node``."""
    if isinstance(node, Union):
        # The union's dispatch by class, inlined.
        return f"{src.ref(node.encode_by_class)}[type({expr})]({expr})"
    return f"{src.ref(node.encode)}({expr})"


#: Any string.
STR: Kind = _Str()
#: A string the host does not consider blank (a session id).
IDENTIFIER: Kind = _Identifier()
#: Any JSON value, ``null`` included.
RAW: Kind = _Raw()
I64 = Int(I64_MIN, I64_MAX, "i64")
U64 = Int(0, U64_MAX, "u64")
I32 = Int(-(2**31), 2**31 - 1, "i32")
NONZERO_U32 = Int(1, U32_MAX, "a nonzero u32")


# --------------------------------------------------------------------------- fields


class Presence(enum.Enum):
    """Whether a key must be there, in which mode, and what ``null`` means."""

    #: Present in both modes; ``null`` is a type error (except for :data:`RAW`).
    REQUIRED = "required"
    #: Present when strict (``missing field``), may be absent when tolerant; ``null`` is
    #: ``None`` in both modes (an ``Option`` the reference always writes).
    KEYED = "keyed"
    #: Required when strict; optional when tolerant (a field older hosts do not send).
    STRICT = "strict"
    #: May be absent or ``null`` (both read as ``None``).
    OPTIONAL = "optional"


@attrs.frozen
class Field:
    """One key of an object and the attribute it fills.

    ``write_null``: how ``None`` is written when no decoded frame says otherwise (see
    ``wire_nulls``): as ``null`` (True) or by leaving the key out (False). ``fallback`` names
    the attribute written instead when this one is ``None`` (a tool's ``tool_name`` defaults
    to its ``name``).
    """

    key: str
    attr: str
    kind: Kind
    presence: Presence = Presence.REQUIRED
    write_null: bool = False
    fallback: str | None = None


@attrs.frozen
class Inline:
    """A plain sub-object under ``key`` whose fields belong to the enclosing class.

    ``order`` is as for :class:`Struct`, for the sub-object's keys.
    """

    key: str
    fields: tuple[Field | Inline, ...]
    order: tuple[str, ...] = ()


Members = Sequence[Field | Inline]


def _known(tag_key: str | None, members: Members) -> frozenset[str]:
    keys = {member.key for member in members}
    if tag_key is not None:
        keys.add(tag_key)
    return frozenset(keys)


def _in_order(members: Members, order: Sequence[str]) -> tuple[Field | Inline, ...]:
    """``members`` in the order the precise decoder checks them: ``order`` (keys) first."""
    rank = {key: index for index, key in enumerate(order)}
    return tuple(sorted(members, key=lambda member: rank.get(member.key, len(rank))))


def _read(f: Fields, members: Members, values: dict[str, Any], nulls: set[str]) -> None:
    """The precise decoder of ``members`` of the object behind ``f``, into ``values``."""
    strict = f.ctx.strict
    for member in members:
        key = member.key
        if isinstance(member, Inline):
            sub = Fields(f.raw(key), f"{f.where}.{key}", f.ctx)
            _read(sub, _in_order(member.fields, member.order), values, nulls)
            sub.done(_known(None, member.fields))
            continue
        presence = member.presence
        if presence is Presence.REQUIRED or (presence is Presence.STRICT and strict):
            values[member.attr] = member.kind.check(f, key, f.raw(key))
            continue
        if presence is Presence.KEYED and strict and key not in f.data:
            f.missing(key)
        value = f.data.get(key)
        if value is None:
            if key in f.data:
                nulls.add(key)
            values[member.attr] = None
        else:
            values[member.attr] = member.kind.check(f, key, value)


def _gen_read(
    src: Source,
    obj: str,
    members: Members,
    tagged: bool,
    indent: int,
    attr_vars: dict[str, str],
    nulls: str | None,
) -> None:
    """Emit the fast decoder of ``members`` of the dict ``obj`` (known to be a dict)."""
    fixed = int(tagged)
    optional = any(isinstance(m, Field) and m.presence is Presence.OPTIONAL for m in members)
    count = src.var() if optional else None
    start = len(src.lines)
    for member in members:
        key = repr(member.key)
        var = src.var()
        if isinstance(member, Inline):
            fixed += 1
            src.emit(indent, f"{var} = {obj}.get({key})")
            src.emit(indent, f"if type({var}) is not dict: raise Off")
            _gen_read(src, var, member.fields, False, indent, attr_vars, nulls)
            continue
        attr_vars[member.attr] = var
        kind = member.kind
        presence = member.presence
        if presence is Presence.OPTIONAL:
            src.emit(indent, f"{var} = {obj}.get({key})")
            src.emit(indent, f"if {var} is not None:")
            kind.gen_fast(src, var, indent + 1)
            src.emit(indent + 1, f"{count} += 1")
            src.emit(indent, f"elif {key} in {obj}:")
            src.emit(indent + 1, f"{count} += 1")
            if nulls is not None:
                src.emit(indent + 1, f"{nulls} = {nulls} | {{{key}}}")
            continue
        fixed += 1
        if presence is Presence.KEYED:
            src.emit(indent, f"{var} = {obj}.get({key})")
            src.emit(indent, f"if {var} is None:")
            src.emit(indent + 1, f"if {key} not in {obj}: raise Off")
            if nulls is not None:
                src.emit(indent + 1, f"{nulls} = {nulls} | {{{key}}}")
            if not kind.accepts_null:
                src.emit(indent, "else:")
                kind.gen_fast(src, var, indent + 1)
        elif kind.accepts_null:
            src.emit(indent, f"if {key} not in {obj}: raise Off")
            src.emit(indent, f"{var} = {obj}[{key}]")
        else:
            # A missing key reads as None, which no such kind accepts.
            src.emit(indent, f"{var} = {obj}.get({key})")
            kind.gen_fast(src, var, indent)
    if count is not None:
        src.lines.insert(start, "    " * indent + f"{count} = 0")
        src.emit(indent, f"if len({obj}) != {fixed} + {count}: raise Off")
    else:
        src.emit(indent, f"if len({obj}) != {fixed}: raise Off")


def _gen_write(
    src: Source, obj: str, members: Members, tag: tuple[str, str] | None, indent: int, nulls: str
) -> str:
    """Emit code building the wire dict of ``members`` of ``obj``; return its variable.

    ``nulls`` is an expression for the recorded explicit nulls (``"None"`` when the class
    keeps no record).
    """
    out = src.var()
    items: list[str] = [] if tag is None else [f"{tag[0]!r}: {tag[1]!r}"]
    tail: list[tuple[int, str]] = []  # statements after the literal, in key order
    literal_open = True
    for member in members:
        key = repr(member.key)
        if isinstance(member, Inline):
            sub = _gen_write(src, obj, member.fields, None, indent, nulls)
            if literal_open:
                items.append(f"{key}: {sub}")
            else:
                tail.append((0, f"{out}[{key}] = {sub}"))
            continue
        value = f"{obj}.{member.attr}"
        kind = member.kind
        if member.fallback is not None:
            var = src.var()
            src.emit(indent, f"{var} = {value}")
            src.emit(indent, f"if {var} is None: {var} = {obj}.{member.fallback}")
            value = var
        unconditional = member.presence is Presence.REQUIRED or member.fallback is not None
        if not unconditional and nulls == "None" and member.write_null and kind.encodes_as_is:
            unconditional = True  # None is written as null, which is the value as it is
        if unconditional and literal_open:
            items.append(f"{key}: {kind.gen_encode(src, value)}")
            continue
        literal_open = False
        if unconditional:
            tail.append((0, f"{out}[{key}] = {kind.gen_encode(src, value)}"))
            continue
        var = src.var()
        tail.append((0, f"{var} = {value}"))
        tail.append((0, f"if {var} is not None:"))
        tail.append((1, f"{out}[{key}] = {kind.gen_encode(src, var)}"))
        if nulls == "None":
            if member.write_null:
                tail.append((0, "else:"))
                tail.append((1, f"{out}[{key}] = None"))
        elif member.write_null:
            tail.append((0, f"elif {nulls} is None or {key} in {nulls}:"))
            tail.append((1, f"{out}[{key}] = None"))
        else:
            tail.append((0, f"elif {nulls} is not None and {key} in {nulls}:"))
            tail.append((1, f"{out}[{key}] = None"))
    src.emit(indent, f"{out} = {{{', '.join(items)}}}")
    for depth, line in tail:
        src.emit(indent + depth, line)
    return out


def _gen_build(src: Source, cls: type, values: Mapping[str, str], indent: int, result: str) -> None:
    """Emit code storing an instance of ``cls`` built from ``values`` (attr -> expression)."""
    fields = attrs.fields(cls)
    exprs: list[str] = []
    for field in fields:
        if field.name in values:
            exprs.append(values[field.name])
        elif field.default is attrs.NOTHING or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            raise TypeError(f"{cls.__name__}.{field.name} has no value and no plain default")
        else:
            exprs.append(src.ref(field.default))
    plain = not any(hasattr(cls, hook) for hook in ("__attrs_pre_init__", "__attrs_post_init__"))
    plain = plain and all(f.converter is None and f.validator is None for f in fields)
    if not plain:
        src.emit(indent, f"{result} = {src.ref(cls)}({', '.join(exprs)})")
        return
    # Store straight into the slots: a frozen attrs __init__ sets each field through
    # object.__setattr__, which costs about twice a plain slot store.
    src.emit(indent, f"{result} = new({src.ref(cls)})")
    for field, expr in zip(fields, exprs, strict=True):
        setter = src.ref(cls.__dict__[field.name].__set__)
        src.emit(indent, f"{setter}({result}, {expr})")


# --------------------------------------------------------------------------- nodes


class Node:
    """A declared wire shape: ``fast``, ``decode`` and ``encode`` (see the module docstring)."""

    #: The class of the values this node decodes (what a union dispatches encoding on).
    cls: type
    fast: Callable[[Any], Any]
    encode: Callable[[Any], Any]

    def decode(self, data: object, where: str, ctx: DecodeContext) -> Any:
        """Decode ``data`` precisely (located at ``where``), or raise ``ctx.error``."""
        raise NotImplementedError

    def _attach(self, method: bool) -> None:
        if method:
            encode = self.encode
            encode.__qualname__ = f"{self.cls.__name__}.to_wire"
            encode.__doc__ = "Return the JSON-ready wire dict, keys in the host's order."
            setattr(self.cls, _TO_WIRE, encode)
            _NODES[self.cls] = self


class Struct(Node):
    """One object decoded into one class.

    ``tag`` is the ``(key, value)`` this object carries when it is a variant of a
    :class:`Union`. ``check`` runs on the decoded value and raises :class:`ValueError` with
    the host's text for a rule beyond the types. ``unknown_first`` reports unknown keys before
    decoding the values (a result envelope is checked before its payload). A class with a
    ``wire_nulls`` attribute records which optional keys were explicit ``null``, and writes
    them back so. ``order`` lists keys the precise decoder checks first, which decides the
    error reported for a frame with several faults (members are otherwise checked, and always
    written, in declaration order). ``method``: install ``encode`` as the class's ``to_wire``.
    """

    def __init__(
        self,
        cls: type,
        members: Members,
        *,
        tag: tuple[str, str] | None = None,
        check: Callable[[Any], None] | None = None,
        unknown_first: bool = False,
        order: Sequence[str] = (),
        method: bool = True,
    ) -> None:
        self.cls = cls
        self.members = tuple(members)
        # A tag may be a StrEnum member: the generated source spells its plain string.
        self.tag = tag = None if tag is None else (tag[0], str(tag[1]))
        self.check = check
        self.unknown_first = unknown_first
        self.read_order = _in_order(self.members, order)
        self.known = _known(None if tag is None else tag[0], self.members)
        self.records_nulls = any(f.name == "wire_nulls" for f in attrs.fields(cls))
        self.fast = self._gen_fast()
        self.encode = self._gen_encode()
        self._attach(method)

    def decode(self, data: object, where: str, ctx: DecodeContext) -> Any:
        """Decode one object precisely."""
        return self.decode_fields(Fields(data, where, ctx))

    def decode_fields(self, f: Fields) -> Any:
        """Decode the object behind ``f`` (its tag, if any, already read)."""
        if self.unknown_first:
            for member in self.members:
                required = isinstance(member, Inline) or member.presence is Presence.REQUIRED
                if required and member.key not in f.data:
                    f.missing(member.key)
            f.done(self.known)
        values: dict[str, Any] = {}
        nulls: set[str] = set()
        _read(f, self.read_order, values, nulls)
        if self.records_nulls:
            values["wire_nulls"] = frozenset(nulls) if nulls else _NO_NULLS
        result = self.cls(**values)
        if self.check is not None:
            try:
                self.check(result)
            except ValueError as exc:
                f.ctx.fail(f.where, str(exc))
        if not self.unknown_first:
            f.done(self.known)
        return result

    def _gen_fast(self, wrapped_in: str | None = None) -> Callable[[Any], Any]:
        # ``wrapped_in``: the decoder of ``{tag: ..., wrapped_in: <this object>}`` instead, in
        # one function (see Wrap): a tool call's request is decoded on every delegate call.
        src = Source()
        src.emit(0, "def fast(d):")
        if wrapped_in is not None:
            src.emit(1, "if type(d) is not dict or len(d) != 2: raise Off")
            src.emit(1, f"d = d.get({wrapped_in!r})")
        src.emit(1, "if type(d) is not dict: raise Off")
        nulls = None
        if self.records_nulls:
            nulls = "nulls"
            src.emit(1, f"nulls = {src.ref(_NO_NULLS)}")
        values: dict[str, str] = {}
        _gen_read(src, "d", self.members, self.tag is not None, 1, values, nulls)
        if nulls is not None:
            values["wire_nulls"] = nulls
        _gen_build(src, self.cls, values, 1, "o")
        if self.check is not None:
            src.emit(1, "try:")
            src.emit(2, f"{src.ref(self.check)}(o)")
            src.emit(1, "except ValueError:")
            src.emit(2, "raise Off from None")
        src.emit(1, "return o")
        where = "" if wrapped_in is None else f" in {wrapped_in!r}"
        return src.function("fast", f"{self.cls.__name__}{where} fast decoder")

    def gen_wrapped_fast(self, key: str) -> Callable[[Any], Any]:
        """The fast decoder of this object wrapped as ``key`` in a tagged object (see Wrap)."""
        return self._gen_fast(key)

    def _gen_encode(self) -> Callable[[Any], Any]:
        src = Source()
        src.emit(0, "def encode(o):")
        nulls = "None"
        if self.records_nulls:
            nulls = "nulls"
            src.emit(1, "nulls = o.wire_nulls")
        out = _gen_write(src, "o", self.members, self.tag, 1, nulls)
        src.emit(1, f"return {out}")
        return src.function("encode", f"{self.cls.__name__} encoder")


class Wrap(Node):
    """A tagged object ``{tag_key: tag, key: value}`` standing for the value alone."""

    def __init__(self, tag: tuple[str, str], key: str, node: Node) -> None:
        self.cls = node.cls
        self.tag = tag = (tag[0], str(tag[1]))
        self.key = key
        self.node = node
        self.known = frozenset({tag[0], key})
        inner_fast, inner_encode = node.fast, node.encode
        tag_key, tag_value = tag

        def fast(data: Any) -> Any:
            if type(data) is not dict or len(data) != 2:
                raise OffHappyPath
            return inner_fast(data.get(key))

        def encode(value: Any) -> dict[str, Any]:
            return {tag_key: tag_value, key: inner_encode(value)}

        # Around a struct, one generated function reads both levels.
        self.fast = node.gen_wrapped_fast(key) if isinstance(node, Struct) else fast
        self.encode = encode

    def decode(self, data: object, where: str, ctx: DecodeContext) -> Any:
        """Decode precisely (only as a union's variant: the tag is not checked here)."""
        return self.decode_fields(Fields(data, where, ctx))

    def decode_fields(self, f: Fields) -> Any:
        """Decode the wrapped value, then check for unknown keys."""
        value = self.node.decode(f.raw(self.key), f"{f.where}.{self.key}", f.ctx)
        f.done(self.known)
        return value


Variant = Struct | Wrap


class Union(Node):
    """An internally tagged union: the value of ``key`` picks the variant.

    ``where``: how the location reads inside a variant: unchanged (``"keep"``), replaced by
    the tag (``"tag"``, for whole messages) or suffixed with it (``"call"``, for
    ``request(session/open)``). Unknown tags fail in both modes.
    """

    def __init__(self, key: str, variants: Sequence[Variant], *, where: str = "keep") -> None:
        self.key = key
        self.where = where
        self.by_tag: dict[str, Variant] = {}
        for variant in variants:
            tag = variant.tag
            if tag is None or tag[0] != key:
                raise TypeError(f"{variant.cls.__name__} is not tagged by {key!r}")
            self.by_tag[tag[1]] = variant
        self.cls = object
        self.fast_by_tag = fast_by_tag = {tag: variant.fast for tag, variant in self.by_tag.items()}
        self.encode_by_class = encode_by_class = {v.cls: v.encode for v in variants}

        def fast(data: Any) -> Any:
            if type(data) is not dict:
                raise OffHappyPath
            tag = data.get(key)
            decode = fast_by_tag.get(tag) if type(tag) is str else None
            if decode is None:
                raise OffHappyPath
            return decode(data)

        def encode(value: Any) -> Any:
            return encode_by_class[type(value)](value)

        self.fast = fast
        self.encode = encode

    def decode(self, data: object, where: str, ctx: DecodeContext) -> Any:
        """Read the tag, then decode the variant it names."""
        f = Fields(data, where, ctx)
        tag = f.tag(self.key, self.by_tag)
        if self.where == "tag":
            f.where = tag
        elif self.where == "call":
            f.where = f"{where}({tag})"
        return self.by_tag[tag].decode_fields(f)


@attrs.frozen
class ExternalVariant:
    """One arm of an :class:`External`: the wire tag, the attribute's value, and the body.

    The body is either ``members`` of the class (an object) or ``body``: an ``(attribute,
    node)`` pair, the whole body being one value. ``order`` is as for :class:`Struct`.
    """

    tag: str
    value: object
    members: tuple[Field | Inline, ...] = ()
    body: tuple[str, Node] | None = None
    order: tuple[str, ...] = ()


class External(Node):
    """An externally tagged enum ``{"Tag": body}``; the tag sets attribute ``attr``."""

    def __init__(
        self, cls: type, attr: str, variants: Sequence[ExternalVariant], *, method: bool = True
    ) -> None:
        self.cls = cls
        self.attr = attr
        self.variants = {variant.tag: variant for variant in variants}
        tags = list(self.variants)
        self._shape_error = "expected a map with exactly one of " + ", ".join(
            f"`{tag}`" for tag in tags
        )
        self._expected = ", ".join(tags)
        self.fast = self._gen_fast()
        self.encode = self._gen_encode()
        self._attach(method)

    def decode(self, data: object, where: str, ctx: DecodeContext) -> Any:
        """Decode ``{"Tag": body}`` precisely."""
        if type(data) is not dict or len(data) != 1:
            ctx.fail(where, self._shape_error)
        ((tag, body),) = data.items()
        variant = self.variants.get(tag)
        if variant is None:
            ctx.fail(where, f"unknown variant `{tag}`, expected one of {self._expected}")
        where = f"{where}.{tag}"
        values: dict[str, Any] = {self.attr: variant.value}
        if variant.body is not None:
            attr, node = variant.body
            values[attr] = node.decode(body, where, ctx)
        else:
            f = Fields(body, where, ctx)
            _read(f, _in_order(variant.members, variant.order), values, set())
            f.done(_known(None, variant.members))
        return self.cls(**values)

    def _gen_fast(self) -> Callable[[Any], Any]:
        src = Source()
        src.emit(0, "def fast(d):")
        src.emit(1, "if type(d) is not dict or len(d) != 1: raise Off")
        src.emit(1, "((t, b),) = d.items()")
        for variant in self.variants.values():
            src.emit(1, f"if t == {variant.tag!r}:")
            values = {self.attr: src.ref(variant.value)}
            if variant.body is not None:
                attr, node = variant.body
                values[attr] = f"{src.ref(node.fast)}(b)"
            else:
                src.emit(2, "if type(b) is not dict: raise Off")
                _gen_read(src, "b", variant.members, False, 2, values, None)
            _gen_build(src, self.cls, values, 2, "o")
            src.emit(2, "return o")
        src.emit(1, "raise Off")
        return src.function("fast", f"{self.cls.__name__} fast decoder")

    def _gen_encode(self) -> Callable[[Any], Any]:
        src = Source()
        src.emit(0, "def encode(o):")
        src.emit(1, f"k = o.{self.attr}")
        for variant in self.variants.values():
            src.emit(1, f"if k == {src.ref(variant.value)}:")
            if variant.body is not None:
                attr, node = variant.body
                src.emit(2, f"return {{{variant.tag!r}: {src.ref(node.encode)}(o.{attr})}}")
            else:
                out = _gen_write(src, "o", variant.members, None, 2, "None")
                src.emit(2, f"return {{{variant.tag!r}: {out}}}")
        src.emit(1, f"raise ValueError(f'no wire tag for {self.attr}={{k!r}}')")
        return src.function("encode", f"{self.cls.__name__} encoder")
