"""Value types shared by the wire and the public API: content items, runtime responses, tools.

These are the things a cell produces and consumes. The same frozen classes are used on the wire
and by callers, so nothing is copied between "wire" and "public" twins.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from ._wire import (
    JSON,
    DecodeContext,
    Fields,
    OffHappyPath,
    is_opt_u64,
    is_u64,
    null_keys,
    slot_builder,
)

__all__ = [
    "AudioItem",
    "CellLimits",
    "ContentItem",
    "ImageItem",
    "Notification",
    "RuntimeResponse",
    "TextItem",
    "ToolCall",
    "ToolDefinition",
    "WaitOutcome",
    "decode_content_item",
]


def _put_optional(
    out: dict[str, Any], key: str, value: object, nulls: frozenset[str] | None, *, null: bool
) -> None:
    """Write an optional key: its value, or ``null``/nothing as recorded or by convention.

    ``nulls`` is the set of keys a decoded message carried as explicit ``null`` (``None`` for a
    message built in code, which then follows the convention given by ``null``).
    """
    if value is not None:
        out[key] = value
    elif null if nulls is None else key in nulls:
        out[key] = None


# --------------------------------------------------------------------------- content items


@attrs.frozen
class TextItem:
    """An ``input_text`` content item (from ``text(...)`` in a cell)."""

    TYPE: ClassVar[str] = "input_text"
    text: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "input_text", "text": self.text}


@attrs.frozen
class ImageItem:
    """An ``input_image`` content item; ``image_url`` is a data URI, ``detail`` may be absent."""

    TYPE: ClassVar[str] = "input_image"
    image_url: str
    detail: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict (``detail`` omitted when ``None``, as the host does)."""
        out: dict[str, Any] = {"type": "input_image", "image_url": self.image_url}
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@attrs.frozen
class AudioItem:
    """An ``input_audio`` content item; ``audio_url`` is a data URI."""

    TYPE: ClassVar[str] = "input_audio"
    audio_url: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire dict."""
        return {"type": "input_audio", "audio_url": self.audio_url}


ContentItem = TextItem | ImageItem | AudioItem

# Constructors for the fast decoders (see _wire.slot_builder).
_new_text_item = slot_builder(TextItem)
_new_image_item = slot_builder(ImageItem)
_new_audio_item = slot_builder(AudioItem)

_CONTENT_KEYS = {
    "input_text": frozenset({"type", "text"}),
    "input_image": frozenset({"type", "image_url", "detail"}),
    "input_audio": frozenset({"type", "audio_url"}),
}


def _fast_content_item(data: Any) -> ContentItem:
    # The happy path of decode_content_item (see _wire.OffHappyPath).
    if type(data) is dict:
        kind = data.get("type")
        if kind == "input_text":
            text = data.get("text")
            if type(text) is str and len(data) == 2:
                return _new_text_item(text)
        elif kind == "input_image":
            url = data.get("image_url")
            if type(url) is str:
                # ``detail`` is omitted when unset, else a string (the runtime always sets it).
                if len(data) == 2:
                    return _new_image_item(url, None)
                detail = data.get("detail")
                if type(detail) is str and len(data) == 3:
                    return _new_image_item(url, detail)
        elif kind == "input_audio":
            url = data.get("audio_url")
            if type(url) is str and len(data) == 2:
                return _new_audio_item(url)
    raise OffHappyPath


def decode_content_item(data: object, where: str, ctx: DecodeContext) -> ContentItem:
    """Decode one content item."""
    f = Fields(data, where, ctx)
    kind = f.tag("type", _CONTENT_KEYS)
    item: ContentItem
    if kind == "input_text":
        item = TextItem(f.req_str("text"))
    elif kind == "input_image":
        item = ImageItem(f.req_str("image_url"), f.opt_str("detail"))
    else:
        item = AudioItem(f.req_str("audio_url"))
    f.done(_CONTENT_KEYS[kind])
    return item


# --------------------------------------------------------------------------- runtime responses

RuntimeKind = Literal["yielded", "terminated", "result"]

_KIND_TO_TAG: dict[str, str] = {
    "yielded": "Yielded",
    "terminated": "Terminated",
    "result": "Result",
}
_TAG_TO_KIND: dict[str, RuntimeKind] = {
    "Yielded": "yielded",
    "Terminated": "terminated",
    "Result": "result",
}
_RUNTIME_KEYS = {
    "Yielded": frozenset({"cell_id", "content_items", "code_mode_host_duration_ns"}),
    "Terminated": frozenset({"cell_id", "content_items", "code_mode_host_duration_ns"}),
    "Result": frozenset(
        {
            "cell_id",
            "content_items",
            "error_text",
            "result_buffered_for_ns",
            "code_mode_host_duration_ns",
        }
    ),
}


@attrs.frozen
class RuntimeResponse:
    """One observation of a cell: ``kind`` is ``"yielded"``, ``"terminated"`` or ``"result"``.

    ``yielded`` means the cell is still running (call ``wait`` for more); ``result`` means it
    finished (``error_text`` is set if the script threw); ``terminated`` means it was stopped.
    Content items hold only the output produced since the previous observation.

    The timing fields are ``None`` when the host did not send them (0.150 sends neither;
    ``result_buffered_for_ns`` only exists on ``result`` from 0.171 on).
    """

    kind: RuntimeKind
    cell_id: str
    content_items: tuple[ContentItem, ...] = ()
    error_text: str | None = None
    result_buffered_for_ns: int | None = None
    code_mode_host_duration_ns: int | None = None

    @property
    def text(self) -> str:
        """The text items joined with newlines (images and audio are skipped)."""
        return "\n".join(item.text for item in self.content_items if type(item) is TextItem)

    @property
    def host_duration_ns(self) -> int | None:
        """Alias of ``code_mode_host_duration_ns``: host time spent on this observation."""
        return self.code_mode_host_duration_ns

    @property
    def is_final(self) -> bool:
        """True for ``result`` and ``terminated``: the cell will produce nothing more."""
        return self.kind != "yielded"

    def to_wire(self) -> dict[str, Any]:
        """Return the externally tagged wire dict, keys in the host's order."""
        body: dict[str, Any] = {
            "cell_id": self.cell_id,
            "content_items": [item.to_wire() for item in self.content_items],
        }
        if self.kind == "result":
            body["error_text"] = self.error_text
            if self.result_buffered_for_ns is not None:
                body["result_buffered_for_ns"] = self.result_buffered_for_ns
        if self.code_mode_host_duration_ns is not None:
            body["code_mode_host_duration_ns"] = self.code_mode_host_duration_ns
        return {_KIND_TO_TAG[self.kind]: body}

    @classmethod
    def _fast(cls, data: Any) -> RuntimeResponse:
        # The happy path of from_wire: the complete 0.171 field set (see _wire.OffHappyPath).
        if type(data) is not dict or len(data) != 1:
            raise OffHappyPath
        ((tag, body),) = data.items()
        kind = _TAG_TO_KIND.get(tag)
        if kind is None or type(body) is not dict:
            raise OffHappyPath
        cell_id = body.get("cell_id")
        items = body.get("content_items")
        duration = body.get("code_mode_host_duration_ns")
        if type(cell_id) is not str or type(items) is not list or not is_u64(duration):
            raise OffHappyPath
        content = tuple(map(_fast_content_item, items)) if items else ()
        if kind != "result":
            if len(body) != 3:
                raise OffHappyPath
            return _new_runtime_response(kind, cell_id, content, None, None, duration)
        buffered = body.get("result_buffered_for_ns")
        error_text = body.get("error_text")
        if (
            len(body) != 5
            or not is_u64(buffered)
            or (error_text is None and "error_text" not in body)
            or (error_text is not None and type(error_text) is not str)
        ):
            raise OffHappyPath
        return _new_runtime_response(kind, cell_id, content, error_text, buffered, duration)

    @classmethod
    def from_wire(cls, data: object, where: str, ctx: DecodeContext) -> RuntimeResponse:
        """Decode ``{"Yielded"|"Terminated"|"Result": {...}}``."""
        if type(data) is not dict or len(data) != 1:
            ctx.fail(where, "expected a map with exactly one of `Yielded`, `Terminated`, `Result`")
        ((tag, body),) = data.items()
        if tag not in _TAG_TO_KIND:
            ctx.fail(where, f"unknown variant `{tag}`, expected one of Yielded, Terminated, Result")
        where = f"{where}.{tag}"
        f = Fields(body, where, ctx)
        items = tuple(
            decode_content_item(item, f"{where}.content_items[{i}]", ctx)
            for i, item in enumerate(f.req_list("content_items"))
        )
        is_result = tag == "Result"
        buffered: int | None
        duration: int | None
        if ctx.strict:
            # The 0.171 schema: every field always present (the reference client is strict).
            duration = f.req_u64("code_mode_host_duration_ns")
            buffered = f.req_u64("result_buffered_for_ns") if is_result else None
            if is_result and "error_text" not in f.data:
                f.missing("error_text")
        else:
            duration = f.opt_u64("code_mode_host_duration_ns")
            buffered = f.opt_u64("result_buffered_for_ns") if is_result else None
        error_text = f.opt_str("error_text") if is_result else None
        response = cls(
            _TAG_TO_KIND[tag],
            f.req_str("cell_id"),
            items,
            error_text,
            buffered,
            duration,
        )
        f.done(_RUNTIME_KEYS[tag])
        return response


@attrs.frozen
class WaitOutcome:
    """The answer to a wait or terminate: ``live`` is False for ``MissingCell``.

    A missing cell (unknown, closed, or another session's) is not an error: its ``response`` is
    a ``result`` whose ``error_text`` reads ``exec cell <id> not found``.
    """

    live: bool
    response: RuntimeResponse

    def to_wire(self) -> dict[str, Any]:
        """Return ``{"LiveCell": ...}`` or ``{"MissingCell": ...}``."""
        return {("LiveCell" if self.live else "MissingCell"): self.response.to_wire()}

    @classmethod
    def _fast(cls, data: Any) -> WaitOutcome:
        # The happy path of from_wire (see _wire.OffHappyPath).
        if type(data) is not dict or len(data) != 1:
            raise OffHappyPath
        ((tag, body),) = data.items()
        if tag == "LiveCell":
            return _new_wait_outcome(True, RuntimeResponse._fast(body))
        if tag == "MissingCell":
            return _new_wait_outcome(False, RuntimeResponse._fast(body))
        raise OffHappyPath

    @classmethod
    def from_wire(cls, data: object, where: str, ctx: DecodeContext) -> WaitOutcome:
        """Decode a wait outcome."""
        if type(data) is not dict or len(data) != 1:
            ctx.fail(where, "expected a map with exactly one of `LiveCell`, `MissingCell`")
        ((tag, body),) = data.items()
        if tag not in ("LiveCell", "MissingCell"):
            ctx.fail(where, f"unknown variant `{tag}`, expected one of LiveCell, MissingCell")
        return cls(tag == "LiveCell", RuntimeResponse.from_wire(body, f"{where}.{tag}", ctx))


_new_runtime_response = slot_builder(RuntimeResponse)
_new_wait_outcome = slot_builder(WaitOutcome)

# --------------------------------------------------------------------------- tools

_TOOL_DEF_KEYS = frozenset(
    {"name", "tool_name", "description", "kind", "input_schema", "output_schema"}
)
_TOOL_NAME_KEYS = frozenset({"name", "namespace"})
_TOOL_KINDS = {"function": None, "freeform": None}
_TOOL_DEF_OPTIONAL = ("input_schema", "output_schema")


def _fast_tool_name(data: Any) -> tuple[str, str | None]:
    # The happy path of _decode_tool_name: both keys present (strict requires ``namespace``).
    if type(data) is dict and len(data) == 2:
        name = data.get("name")
        namespace = data.get("namespace")
        if type(name) is str and (
            type(namespace) is str or (namespace is None and "namespace" in data)
        ):
            return name, namespace
    raise OffHappyPath


def _decode_tool_name(data: object, where: str, ctx: DecodeContext) -> tuple[str, str | None]:
    f = Fields(data, where, ctx)
    name = f.req_str("name")
    if ctx.strict and "namespace" not in f.data:
        f.missing("namespace")
    namespace = f.opt_str("namespace")
    f.done(_TOOL_NAME_KEYS)
    return name, namespace


@attrs.frozen
class ToolDefinition:
    """A tool a cell may call as ``tools.<name>(input)``.

    ``name`` is the JavaScript binding (the host normalises it to an identifier). ``tool_name``
    and ``namespace`` are echoed back unchanged in each call; ``tool_name`` defaults to
    ``name`` (an explicit ``tool_name`` equal to ``name`` is stored as ``None``, since the wire
    cannot tell the two apart). ``kind`` is ``"function"`` or ``"freeform"``.
    """

    name: str
    description: str = ""
    input_schema: JSON = None
    output_schema: JSON = None
    kind: str = "function"
    namespace: str | None = None
    tool_name: str | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        # Normalise so that a definition equals its own decoded copy.
        if self.tool_name == self.name:
            object.__setattr__(self, "tool_name", None)

    def to_wire(self) -> dict[str, Any]:
        """Return the wire ``WireToolDefinition`` (all six fields, ``null`` where empty)."""
        nulls = self.wire_nulls
        # ``is None``, not ``or``: an empty ``tool_name`` is legal and must be sent as is.
        tool_name: dict[str, Any] = {
            "name": self.name if self.tool_name is None else self.tool_name
        }
        _put_optional(tool_name, "namespace", self.namespace, nulls, null=True)
        out: dict[str, Any] = {
            "name": self.name,
            "tool_name": tool_name,
            "description": self.description,
            "kind": self.kind,
        }
        _put_optional(out, "input_schema", self.input_schema, nulls, null=True)
        _put_optional(out, "output_schema", self.output_schema, nulls, null=True)
        return out

    @classmethod
    def _fast(cls, data: Any) -> ToolDefinition:
        # The happy path of from_wire (see _wire.OffHappyPath).
        if type(data) is not dict or not data.keys() <= _TOOL_DEF_KEYS:
            raise OffHappyPath
        name = data.get("name")
        description = data.get("description")
        kind = data.get("kind")
        if (
            type(name) is not str
            or type(description) is not str
            or (kind != "function" and kind != "freeform")
        ):
            raise OffHappyPath
        tool_name, namespace = _fast_tool_name(data.get("tool_name"))
        nulls = null_keys(data, _TOOL_DEF_OPTIONAL)
        if namespace is None:
            nulls = nulls | {"namespace"}
        return cls(
            name,
            description,
            data.get("input_schema"),
            data.get("output_schema"),
            kind,
            namespace,
            tool_name,
            nulls,
        )

    @classmethod
    def from_wire(cls, data: object, where: str, ctx: DecodeContext) -> ToolDefinition:
        """Decode a ``WireToolDefinition``."""
        f = Fields(data, where, ctx)
        name = f.req_str("name")
        tool_name, namespace = _decode_tool_name(f.raw("tool_name"), f"{where}.tool_name", ctx)
        kind = f.req_str("kind")
        if kind not in _TOOL_KINDS:
            ctx.fail(
                f"{where}.kind", f"unknown variant `{kind}`, expected `function` or `freeform`"
            )
        input_schema = f.opt_raw("input_schema")
        output_schema = f.opt_raw("output_schema")
        nulls = set(f.nulls or ())
        tool_name_data = f.data["tool_name"]
        if "namespace" in tool_name_data and tool_name_data["namespace"] is None:
            nulls.add("namespace")
        definition = cls(
            name,
            f.req_str("description"),
            input_schema,
            output_schema,
            kind,
            namespace,
            tool_name,
            frozenset(nulls),
        )
        f.done(_TOOL_DEF_KEYS)
        return definition


_TOOL_CALL_KEYS = frozenset({"cell_id", "runtime_tool_call_id", "tool_name", "tool_kind", "input"})


@attrs.frozen
class ToolCall:
    """One nested tool call from a cell (``tools.NAME(input)`` in JavaScript).

    ``call_id`` is the host's per-cell runtime id (``tool-1``, ``tool-2``…); ``name`` and
    ``namespace`` are the ``tool_name`` of the matching :class:`ToolDefinition`; ``input`` is
    the first JavaScript argument as JSON (``None`` when absent).
    """

    cell_id: str
    call_id: str
    name: str
    namespace: str | None = None
    kind: str = "function"
    input: JSON = None

    def to_wire(self) -> dict[str, Any]:
        """Return the wire ``invocation`` dict."""
        return {
            "cell_id": self.cell_id,
            "runtime_tool_call_id": self.call_id,
            "tool_name": {"name": self.name, "namespace": self.namespace},
            "tool_kind": self.kind,
            "input": self.input,
        }

    @classmethod
    def _fast(cls, data: Any) -> ToolCall:
        # The happy path of from_wire: every field, a known kind (see _wire.OffHappyPath).
        if type(data) is not dict or len(data) != 5 or "input" not in data:
            raise OffHappyPath
        cell_id = data.get("cell_id")
        call_id = data.get("runtime_tool_call_id")
        kind = data.get("tool_kind")
        if (
            type(cell_id) is not str
            or type(call_id) is not str
            or (kind != "function" and kind != "freeform")
        ):
            raise OffHappyPath
        name, namespace = _fast_tool_name(data.get("tool_name"))
        return _new_tool_call(cell_id, call_id, name, namespace, kind, data["input"])

    @classmethod
    def from_wire(cls, data: object, where: str, ctx: DecodeContext) -> ToolCall:
        """Decode an ``invocation``."""
        f = Fields(data, where, ctx)
        name, namespace = _decode_tool_name(f.raw("tool_name"), f"{where}.tool_name", ctx)
        kind = f.req_str("tool_kind")
        if ctx.strict and kind not in _TOOL_KINDS:
            ctx.fail(f"{where}.tool_kind", f"unknown variant `{kind}`")
        if ctx.strict and "input" not in f.data:
            f.missing("input")
        call = cls(
            f.req_str("cell_id"),
            f.req_str("runtime_tool_call_id"),
            name,
            namespace,
            kind,
            f.opt_raw("input"),
        )
        f.done(_TOOL_CALL_KEYS)
        return call


_new_tool_call = slot_builder(ToolCall)

_NOTIFICATION_KEYS = frozenset({"type", "callId", "cellId", "text"})


@attrs.frozen
class Notification:
    """A ``notify(text)`` from a cell; ``call_id`` is the execute's ``tool_call_id``."""

    call_id: str
    cell_id: str
    text: str

    def to_wire(self) -> dict[str, Any]:
        """Return the wire ``notification/send`` dict."""
        return {
            "type": "notification/send",
            "callId": self.call_id,
            "cellId": self.cell_id,
            "text": self.text,
        }

    @classmethod
    def _fast(cls, data: dict[str, Any]) -> Notification:
        # The happy path of from_wire (see _wire.OffHappyPath).
        call_id = data.get("callId")
        cell_id = data.get("cellId")
        text = data.get("text")
        if (
            len(data) != 4
            or type(call_id) is not str
            or type(cell_id) is not str
            or type(text) is not str
        ):
            raise OffHappyPath
        return _new_notification(call_id, cell_id, text)

    @classmethod
    def from_wire(cls, f: Fields) -> Notification:
        """Decode the fields of a ``notification/send`` request."""
        note = cls(f.req_str("callId"), f.req_str("cellId"), f.req_str("text"))
        f.done(_NOTIFICATION_KEYS)
        return note


_new_notification = slot_builder(Notification)

_LIMIT_KEYS = frozenset({"maxYieldTimeMs", "maxHeapSizeBytes"})
_LIMIT_OPTIONAL = ("maxYieldTimeMs", "maxHeapSizeBytes")


@attrs.frozen
class CellLimits:
    """Per-session cell limits sent with ``session/open`` (``None`` = unlimited).

    ``max_yield_time_ms`` caps every yield deadline in the session. ``max_heap_size_bytes`` is
    accepted by the host; see the README for what the host actually enforces.
    """

    max_yield_time_ms: int | None = None
    max_heap_size_bytes: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def is_default(self) -> bool:
        """True when neither limit is set (nothing needs to be sent)."""
        return self.max_yield_time_ms is None and self.max_heap_size_bytes is None

    def to_wire(self) -> dict[str, Any]:
        """Return the camelCase wire dict; unset limits are omitted."""
        out: dict[str, Any] = {}
        _put_optional(out, "maxYieldTimeMs", self.max_yield_time_ms, self.wire_nulls, null=False)
        _put_optional(
            out, "maxHeapSizeBytes", self.max_heap_size_bytes, self.wire_nulls, null=False
        )
        return out

    @classmethod
    def _fast(cls, data: Any) -> CellLimits:
        # The happy path of from_wire (see _wire.OffHappyPath).
        if type(data) is not dict or not data.keys() <= _LIMIT_KEYS:
            raise OffHappyPath
        max_yield = data.get("maxYieldTimeMs")
        max_heap = data.get("maxHeapSizeBytes")
        if not is_opt_u64(max_yield) or not is_opt_u64(max_heap):
            raise OffHappyPath
        return _new_cell_limits(max_yield, max_heap, null_keys(data, _LIMIT_OPTIONAL))

    @classmethod
    def from_wire(cls, data: object, where: str, ctx: DecodeContext) -> CellLimits:
        """Decode ``cellExecutionLimits``."""
        f = Fields(data, where, ctx)
        limits = cls(f.opt_u64("maxYieldTimeMs"), f.opt_u64("maxHeapSizeBytes"))
        f.done(_LIMIT_KEYS)
        return attrs.evolve(limits, wire_nulls=f.nulls_frozen())


_new_cell_limits = slot_builder(CellLimits)
