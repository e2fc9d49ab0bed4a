"""What a conformance scenario does: the frames it sends and where it waits for the host's.

A scenario is a list of steps. :class:`Send` writes bytes (one frame, raw bytes, or a frame
split into tiny writes); :class:`Expect` reads a number of frames and keeps them for comparison
(in order, or as a set where the protocol leaves the order open); :class:`CloseInput` ends the
host's input. The builders below write the client messages as plain JSON objects, because a
scenario must be able to send what no well-behaved client would.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any, TypeAlias

import attrs

__all__ = [
    "ALL_CAPABILITIES",
    "CloseInput",
    "Expect",
    "Send",
    "Step",
    "cancel",
    "delegate_error",
    "delegate_result",
    "execute",
    "frame",
    "hello",
    "notification_delivered",
    "open_session",
    "raw_frame",
    "shutdown",
    "terminate",
    "tool",
    "wait",
    "yield_request",
]

Json: TypeAlias = Any

ALL_CAPABILITIES = (
    "bounded-output-v1",
    "delegate-capacity-4096",
    "session-cell-execution-resource-limits",
    "tool-catalog-revision-v1",
    "yield-observation",
)
"""Every capability host 0.171.0 offers (SPEC §4.1)."""


def raw_frame(payload: bytes) -> bytes:
    """``payload`` behind its little-endian length, whatever its size or content."""
    return struct.pack("<I", len(payload)) + payload


def frame(message: Json) -> bytes:
    """One frame holding ``message`` as compact JSON (non-ASCII text kept as UTF-8)."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    return raw_frame(text.encode("utf-8"))


@attrs.frozen
class Send:
    """Write bytes to the host.

    ``data`` is the bytes, or a function that makes them when the step runs (so that a 64 MiB
    payload is not built at import time). ``chunk`` splits the write into pieces of that many
    bytes, each its own write.
    """

    data: bytes | Callable[[], bytes]
    chunk: int | None = None

    def payload(self) -> bytes:
        """The bytes to write."""
        return self.data() if callable(self.data) else self.data


@attrs.frozen
class Expect:
    """Read ``count`` frames; ``unordered`` compares them as a set (the spec leaves order open)."""

    count: int
    unordered: bool = False


@attrs.frozen
class CloseInput:
    """Close the host's input (EOF on its stdin), then collect whatever it still sends."""


Step: TypeAlias = Send | Expect | CloseInput


def _send(message: Json) -> Send:
    return Send(frame(message))


def hello(
    *,
    versions: list[Json] | None = None,
    required: list[str] | None = None,
    optional: list[str] | None = None,
) -> Send:
    """``connection/hello``; by default version 1 with every known capability optional."""
    return _send(
        {
            "type": "connection/hello",
            "supportedVersions": [1] if versions is None else versions,
            "requiredCapabilities": [] if required is None else required,
            "optionalCapabilities": list(ALL_CAPABILITIES) if optional is None else optional,
        }
    )


def request(request_id: int, body: Json) -> Send:
    """An ``operation/request`` with the given request object."""
    return _send({"type": "operation/request", "id": request_id, "request": body})


def open_session(request_id: int, session: str = "s1", **fields: Json) -> Send:
    """``session/open`` (extra fields such as ``cellExecutionLimits`` as keywords)."""
    return request(request_id, {"method": "session/open", "sessionId": session, **fields})


def tool(name: str = "echo", *, tool_name: str | None = None) -> Json:
    """A function tool definition with an open object schema."""
    return {
        "name": name,
        "tool_name": {"name": tool_name or name, "namespace": None},
        "description": f"{name} tool",
        "kind": "function",
        "input_schema": {"type": "object"},
        "output_schema": None,
    }


def execute(
    request_id: int,
    source: str,
    *,
    session: str = "s1",
    tools: list[Json] | None = None,
    yield_time_ms: int | None = 5000,
    call_id: str = "call-1",
    **extra: Json,
) -> Send:
    """``session/execute``; ``extra`` adds fields to the inner request (``catalog_revision``)."""
    inner = {
        "tool_call_id": call_id,
        "enabled_tools": tools or [],
        "source": source,
        "yield_time_ms": yield_time_ms,
        "max_output_tokens": None,
        **extra,
    }
    return request(
        request_id, {"method": "session/execute", "sessionId": session, "request": inner}
    )


def wait(request_id: int, cell: str, yield_time_ms: int = 5000, *, session: str = "s1") -> Send:
    """``session/wait`` on ``cell``."""
    body = {"cell_id": cell, "yield_time_ms": yield_time_ms}
    return request(request_id, {"method": "session/wait", "sessionId": session, "request": body})


def terminate(request_id: int, cell: str, *, session: str = "s1") -> Send:
    """``session/terminate`` of ``cell``."""
    return request(
        request_id, {"method": "session/terminate", "sessionId": session, "cellId": cell}
    )


def shutdown(request_id: int, session: str = "s1") -> Send:
    """``session/shutdown``."""
    return request(request_id, {"method": "session/shutdown", "sessionId": session})


def cancel(request_id: int) -> Send:
    """``operation/cancel`` of a request."""
    return _send({"type": "operation/cancel", "id": request_id})


def yield_request(request_id: int) -> Send:
    """``operation/yield`` of a request."""
    return _send({"type": "operation/yield", "id": request_id})


def _answer(delegate_id: int, result: Json) -> Send:
    return _send({"type": "delegate/response", "id": delegate_id, "result": result})


def delegate_result(delegate_id: int, result: Json) -> Send:
    """A ``tool/result`` answer to a delegate request."""
    value = {"type": "tool/result", "result": result}
    return _answer(delegate_id, {"status": "ok", "value": value})


def notification_delivered(delegate_id: int) -> Send:
    """A ``notification/delivered`` answer to a delegate request."""
    return _answer(delegate_id, {"status": "ok", "value": {"type": "notification/delivered"}})


def delegate_error(delegate_id: int, message: str) -> Send:
    """An error answer to a delegate request."""
    return _answer(delegate_id, {"status": "error", "message": message})
