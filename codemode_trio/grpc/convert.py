"""Conversions between the host's protobuf messages and the public content classes.

The gRPC API carries the same values as the stdio protocol in another shape: JSON payloads as
bytes, enums for kinds and image detail, a ``oneof`` for the outcome. Everything above this
module works with :class:`~codemode_trio.RuntimeResponse`, :class:`~codemode_trio.ToolCall`
and friends only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..errors import HostProtocolViolation, UsageError
from ..protocol.content import (
    AudioItem,
    CellLimits,
    ContentItem,
    ImageItem,
    Notification,
    RuntimeResponse,
    TextItem,
    ToolCall,
    ToolDefinition,
    WaitOutcome,
)
from ..protocol.values import JSON
from . import codemode_pb2 as pb

__all__ = [
    "encode_json",
    "outcome_to_response",
    "tool_call_from_pb",
    "tool_definitions_to_pb",
    "wait_response_to_outcome",
]

_KIND_TO_PB = {"function": pb.TOOL_KIND_FUNCTION, "freeform": pb.TOOL_KIND_FREEFORM}
_PB_TO_KIND = {pb.TOOL_KIND_FUNCTION: "function", pb.TOOL_KIND_FREEFORM: "freeform"}
_PB_TO_DETAIL = {
    pb.IMAGE_DETAIL_AUTO: "auto",
    pb.IMAGE_DETAIL_LOW: "low",
    pb.IMAGE_DETAIL_HIGH: "high",
    pb.IMAGE_DETAIL_ORIGINAL: "original",
}


# Built once: json.dumps with options, and json.loads of bytes, build or look up their
# machinery on every call, a measurable share of a tool call's own cost. Same settings.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder()


def encode_json(value: JSON, what: str) -> bytes:
    """Serialize a JSON value compactly, as the stdio transport does."""
    try:
        return _ENCODER.encode(value).encode()
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{what} is not JSON: {exc}") from exc


def tool_definitions_to_pb(tools: Iterable[ToolDefinition]) -> list[pb.ToolDefinition]:
    """Convert tool definitions for an ``ExecuteRequest``."""
    out: list[pb.ToolDefinition] = []
    for tool in tools:
        kind = _KIND_TO_PB.get(tool.kind)
        if kind is None:
            raise UsageError(f"tool kind must be 'function' or 'freeform', not {tool.kind!r}")
        tool_name = tool.name if tool.tool_name is None else tool.tool_name
        name = pb.ToolName(name=tool_name, namespace=tool.namespace)
        definition = pb.ToolDefinition(
            name=tool.name, tool_name=name, description=tool.description, kind=kind
        )
        if tool.input_schema is not None:
            definition.input_schema_json = encode_json(tool.input_schema, "input_schema")
        if tool.output_schema is not None:
            definition.output_schema_json = encode_json(tool.output_schema, "output_schema")
        out.append(definition)
    return out


def limits_to_pb(limits: CellLimits) -> pb.SessionCellExecutionLimits:
    """Convert session cell limits for an ``OpenSessionRequest``."""
    return pb.SessionCellExecutionLimits(
        max_yield_time_ms=limits.max_yield_time_ms, max_heap_size_bytes=limits.max_heap_size_bytes
    )


def _content_item(item: pb.ContentItem) -> ContentItem:
    which = item.WhichOneof("item")
    if which == "text":
        return TextItem(item.text.text)
    if which == "image":
        image = item.image
        detail = _PB_TO_DETAIL.get(image.detail) if image.HasField("detail") else None
        return ImageItem(image.image_url, detail)
    if which == "audio":
        return AudioItem(item.audio.audio_url)
    raise HostProtocolViolation("code-mode host sent a content item of no known kind")


def outcome_to_response(outcome: pb.ExecutionOutcome) -> RuntimeResponse:
    """Convert an ``ExecutionOutcome`` into a :class:`RuntimeResponse`."""
    which = outcome.WhichOneof("outcome")
    items = tuple(_content_item(item) for item in outcome.content_items)
    duration = outcome.code_mode_host_duration_ns
    if which == "yielded" or which == "terminated":
        return RuntimeResponse(which, outcome.cell_id, items, None, None, duration)
    if which == "completed":
        completed = outcome.completed
        error = completed.error_text if completed.HasField("error_text") else None
        return RuntimeResponse("result", outcome.cell_id, items, error, None, duration)
    raise HostProtocolViolation(
        f"code-mode host sent an outcome for cell {outcome.cell_id} with no result"
    )


def wait_response_to_outcome(response: pb.WaitResponse) -> WaitOutcome:
    """Convert a ``WaitResponse`` (live or missing cell) into a :class:`WaitOutcome`."""
    which = response.WhichOneof("state")
    if which is None:
        raise HostProtocolViolation("code-mode host returned an invalid cell response")
    return WaitOutcome(which == "live_cell", outcome_to_response(getattr(response, which)))


def tool_call_from_pb(call: pb.ToolCall) -> ToolCall:
    """Convert a subscription's ``ToolCall`` into the :class:`ToolCall` a delegate gets."""
    namespace = call.tool_name.namespace if call.tool_name.HasField("namespace") else None
    kind = _PB_TO_KIND.get(call.tool_kind, "function")
    payload: JSON = None
    if call.HasField("input_json"):
        try:
            # The host writes UTF-8 (what json.loads would detect), and loads' own steps add
            # only the detection.
            payload = _DECODER.decode(call.input_json.decode("utf-8", "surrogatepass"))
        except ValueError as exc:
            where = f"input of tool call {call.invocation_id}"
            raise HostProtocolViolation(f"{where} is not JSON: {exc}") from exc
    return ToolCall(
        call.cell_id,
        call.runtime_tool_call_id,
        call.tool_name.name,
        namespace,
        kind,
        payload,
        call.traceparent if call.HasField("traceparent") else None,
    )


def notification_from_pb(note: pb.Notification) -> Notification:
    """Convert a session-stream ``Notification``."""
    return Notification(note.call_id, note.cell_id, note.text)
