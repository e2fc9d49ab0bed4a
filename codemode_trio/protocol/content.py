"""Value types shared by the wire and the public API: content items, runtime responses, tools.

These are the things a cell produces and consumes. The same frozen classes are used on the wire
and by callers, so nothing is copied between "wire" and "public" twins.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import attrs

from ._wire import JSON
from .schema import (
    RAW,
    STR,
    U64,
    Choice,
    External,
    ExternalVariant,
    Field,
    Inline,
    Presence,
    Struct,
    StructList,
    Union,
    WireValue,
)

__all__ = [
    "CELL_LIMITS",
    "CONTENT_ITEM",
    "NOTIFICATION",
    "RUNTIME_RESPONSE",
    "TOOL_CALL",
    "TOOL_DEFINITION",
    "WAIT_OUTCOME",
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
]

KEYED = Presence.KEYED
OPTIONAL = Presence.OPTIONAL
STRICT = Presence.STRICT

# --------------------------------------------------------------------------- content items


@attrs.frozen
class TextItem(WireValue):
    """An ``input_text`` content item (from ``text(...)`` in a cell)."""

    TYPE: ClassVar[str] = "input_text"
    text: str


@attrs.frozen
class ImageItem(WireValue):
    """An ``input_image`` content item; ``image_url`` is a data URI, ``detail`` may be absent."""

    TYPE: ClassVar[str] = "input_image"
    image_url: str
    detail: str | None = None


@attrs.frozen
class AudioItem(WireValue):
    """An ``input_audio`` content item; ``audio_url`` is a data URI."""

    TYPE: ClassVar[str] = "input_audio"
    audio_url: str


#: Any item of a response's ``content_items``: text, an image or audio.
ContentItem = TextItem | ImageItem | AudioItem

#: One content item, tagged by ``type``. ``detail`` is omitted when unset, as the host does.
CONTENT_ITEM = Union(
    "type",
    [
        Struct(TextItem, [Field("text", "text", STR)], tag=("type", TextItem.TYPE)),
        Struct(
            ImageItem,
            [Field("image_url", "image_url", STR), Field("detail", "detail", STR, OPTIONAL)],
            tag=("type", ImageItem.TYPE),
        ),
        Struct(AudioItem, [Field("audio_url", "audio_url", STR)], tag=("type", AudioItem.TYPE)),
    ],
)

# --------------------------------------------------------------------------- runtime responses

RuntimeKind = Literal["yielded", "terminated", "result"]


@attrs.frozen
class RuntimeResponse(WireValue):
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


_CELL_ID = Field("cell_id", "cell_id", STR)
_CONTENT_ITEMS = Field("content_items", "content_items", StructList(CONTENT_ITEM))
# The timing fields are always there from 0.171 on (the reference client is strict); older
# hosts omit them, which tolerant decoding reads as None and encoding leaves out again.
_DURATION = Field("code_mode_host_duration_ns", "code_mode_host_duration_ns", U64, STRICT)
# The body of ``Yielded`` and ``Terminated``.
_PROGRESS = (_CELL_ID, _CONTENT_ITEMS, _DURATION)

# The order the precise decoder checks a body in: a 0.150 frame, which lacks both timing
# fields, is refused (strict) for the one 0.160 already sends.
_TIMING_FIRST = (
    "content_items",
    "code_mode_host_duration_ns",
    "result_buffered_for_ns",
    "error_text",
    "cell_id",
)

#: ``{"Yielded"|"Terminated"|"Result": {...}}``, keys in the host's order.
RUNTIME_RESPONSE = External(
    RuntimeResponse,
    "kind",
    [
        ExternalVariant("Yielded", "yielded", _PROGRESS, order=_TIMING_FIRST),
        ExternalVariant("Terminated", "terminated", _PROGRESS, order=_TIMING_FIRST),
        ExternalVariant(
            "Result",
            "result",
            (
                _CELL_ID,
                _CONTENT_ITEMS,
                # An Option the host always writes: ``null`` when the script did not throw.
                Field("error_text", "error_text", STR, KEYED, write_null=True),
                Field("result_buffered_for_ns", "result_buffered_for_ns", U64, STRICT),
                _DURATION,
            ),
            order=_TIMING_FIRST,
        ),
    ],
)


@attrs.frozen
class WaitOutcome(WireValue):
    """The answer to a wait or terminate: ``live`` is False for ``MissingCell``.

    A missing cell (unknown, closed, or another session's) is not an error: its ``response`` is
    a ``result`` whose ``error_text`` reads ``exec cell <id> not found``.
    """

    live: bool
    response: RuntimeResponse


#: ``{"LiveCell"|"MissingCell": <runtime response>}``.
WAIT_OUTCOME = External(
    WaitOutcome,
    "live",
    [
        ExternalVariant("LiveCell", True, body=("response", RUNTIME_RESPONSE)),
        ExternalVariant("MissingCell", False, body=("response", RUNTIME_RESPONSE)),
    ],
)

# --------------------------------------------------------------------------- tools

_TOOL_KINDS = ("function", "freeform")


@attrs.frozen
class ToolDefinition(WireValue):
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


#: A ``WireToolDefinition``: all six fields, ``null`` where empty.
TOOL_DEFINITION = Struct(
    ToolDefinition,
    [
        Field("name", "name", STR),
        Inline(
            "tool_name",
            (
                # ``is None``, not falsiness: an empty ``tool_name`` is legal and sent as is.
                Field("name", "tool_name", STR, fallback="name"),
                Field("namespace", "namespace", STR, KEYED, write_null=True),
            ),
        ),
        Field("description", "description", STR),
        Field("kind", "kind", Choice(_TOOL_KINDS, "`function` or `freeform`")),
        Field("input_schema", "input_schema", RAW, OPTIONAL, write_null=True),
        Field("output_schema", "output_schema", RAW, OPTIONAL, write_null=True),
    ],
    # The keys checked first: this fixes which fault a frame with several reports.
    order=("name", "tool_name", "kind"),
)


@attrs.frozen
class ToolCall(WireValue):
    """One nested tool call from a cell (``tools.NAME(input)`` in JavaScript).

    ``call_id`` is the host's per-cell runtime id (``tool-1``, ``tool-2``…); ``name`` and
    ``namespace`` are the ``tool_name`` of the matching :class:`ToolDefinition`; ``input`` is
    the first JavaScript argument as JSON (``None`` when absent). ``traceparent`` is the W3C
    trace parent of the host's span for the call when the host sends one (the gRPC API may; the
    stdio protocol has no such field); it takes no part in equality.
    """

    cell_id: str
    call_id: str
    name: str
    namespace: str | None = None
    kind: str = "function"
    input: JSON = None
    traceparent: str | None = attrs.field(default=None, eq=False)


#: The ``invocation`` of a ``tool/invoke`` delegate request.
TOOL_CALL = Struct(
    ToolCall,
    [
        Field("cell_id", "cell_id", STR),
        Field("runtime_tool_call_id", "call_id", STR),
        Inline(
            "tool_name",
            (
                Field("name", "name", STR),
                Field("namespace", "namespace", STR, KEYED, write_null=True),
            ),
        ),
        # A kind a newer host adds passes through tolerant decoding untouched.
        Field("tool_kind", "kind", Choice(_TOOL_KINDS, None, strict_only=True)),
        Field("input", "input", RAW, KEYED, write_null=True),
    ],
    # The keys checked first: this fixes which fault a frame with several reports.
    order=("tool_name", "tool_kind", "input"),
)


@attrs.frozen
class Notification(WireValue):
    """A ``notify(text)`` from a cell; ``call_id`` is the execute's ``tool_call_id``."""

    call_id: str
    cell_id: str
    text: str


#: A ``notification/send`` delegate request's body (its fields sit beside the tag).
NOTIFICATION = Struct(
    Notification,
    [Field("callId", "call_id", STR), Field("cellId", "cell_id", STR), Field("text", "text", STR)],
    tag=("type", "notification/send"),
)


@attrs.frozen
class CellLimits(WireValue):
    """Per-session cell limits sent with ``session/open`` (``None`` = unlimited).

    ``max_yield_time_ms`` caps every yield deadline in the session. ``max_heap_size_bytes`` is
    accepted by the host; ``docs/host-binary.md`` says what the host actually enforces.
    """

    max_yield_time_ms: int | None = None
    max_heap_size_bytes: int | None = None
    wire_nulls: frozenset[str] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def is_default(self) -> bool:
        """True when neither limit is set (nothing needs to be sent)."""
        return self.max_yield_time_ms is None and self.max_heap_size_bytes is None


#: ``cellExecutionLimits``, camelCase; unset limits are omitted.
CELL_LIMITS = Struct(
    CellLimits,
    [
        Field("maxYieldTimeMs", "max_yield_time_ms", U64, OPTIONAL),
        Field("maxHeapSizeBytes", "max_heap_size_bytes", U64, OPTIONAL),
    ],
)
