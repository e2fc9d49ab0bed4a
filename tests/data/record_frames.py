#!/usr/bin/env python3
"""Record real code-mode host frames into a JSON Lines fixture file.

Usage::

    python tests/data/record_frames.py HOST_BINARY OUT.jsonl [--only NAME ...]
    python tests/data/record_frames.py --summarize OUT.jsonl

The script starts ``HOST_BINARY`` (a ``codex-code-mode-host`` executable) once per scenario,
speaks the code-mode host protocol to it over stdio, and records every frame that crosses the
pipe in either direction.  Each line of ``OUT.jsonl`` is one frame::

    {"scenario": "<name>", "direction": "client->host" | "host->client", "payload": "<text>"}

``payload`` is the frame payload (the bytes after the 4-byte little-endian length header)
decoded as UTF-8, so ``payload.encode("utf-8")`` reproduces the exact bytes on the wire:
host frames are stored as the host wrote them, client frames as this script sent them (compact
JSON).  Lines appear in wire order per scenario; within a scenario the relative order of the
two directions is the order in which this script sent and received frames.

Every scenario begins with its own ``connection/hello`` and ends by closing the host's stdin
(a clean EOF) and reaping the process, so each scenario can be replayed on its own.  Features
that only newer hosts understand (``operation/yield``, ``outputTruncation``,
``maxOutputTokens``, ``catalog_revision``) are used only when the matching capability came back
in ``connection/ready``; scenarios that need one are skipped otherwise.  Older hosts therefore
only ever receive messages they accept.

Every read has a deadline, so a misbehaving host makes the script fail instead of hanging.  A
scenario whose expected frames do not arrive aborts the run with a non-zero exit status.
After recording, the script prints how many frames of each message type and nested tag the
file holds.

The script depends only on the Python standard library (3.11+).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

PROTOCOL_VERSION = 1

#: Every capability a code-mode host is known to offer (0.150 - 0.171).
KNOWN_CAPABILITIES = [
    "session-cell-execution-resource-limits",
    "yield-observation",
    "bounded-output-v1",
    "delegate-capacity-4096",
    "tool-catalog-revision-v1",
]

#: Default deadline, in seconds, for any single expected frame.
FRAME_TIMEOUT = 15.0

#: Frame payload limit of the protocol (64 MiB).
MAX_FRAME_BYTES = 64 * 1024 * 1024

CLIENT_TO_HOST = "client->host"
HOST_TO_CLIENT = "host->client"

#: A valid 1x1 RGBA PNG.
PNG_DATA_URI = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def _wav_data_uri(duration_ms: int = 50, rate: int = 8000) -> str:
    """Return a silent 8-bit mono WAV clip as a data URI (hosts drop clips under 25 ms)."""
    samples = bytes([128]) * (rate * duration_ms // 1000)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)
    body = (
        b"WAVE"
        + b"fmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", len(samples))
        + samples
    )
    wav = b"RIFF" + struct.pack("<I", len(body)) + body
    return "data:audio/wav;base64," + base64.b64encode(wav).decode("ascii")


def encode_payload(message: dict[str, Any]) -> bytes:
    """Encode a message as compact UTF-8 JSON, the way the host writes its own frames."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class ScenarioError(Exception):
    """The host did not behave as a scenario expected."""


class HostExitedError(ScenarioError):
    """The host closed its stdout while a frame was still expected."""


class Recorder:
    """Collects recorded frames in wire order."""

    def __init__(self) -> None:
        self.records: list[dict[str, str]] = []

    def add(self, scenario: str, direction: str, payload: bytes) -> None:
        self.records.append(
            {"scenario": scenario, "direction": direction, "payload": payload.decode("utf-8")}
        )

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            for record in self.records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")


class HostConnection:
    """One host process, spoken to over stdio, with every frame recorded.

    Frames the host sends are parsed into an inbox; ``expect`` removes and returns the first
    inbox frame that matches a predicate, reading more frames (with a deadline) as needed.
    """

    def __init__(self, binary: str, scenario: str, recorder: Recorder) -> None:
        self.scenario = scenario
        self.recorder = recorder
        self.process = subprocess.Popen(
            [binary],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._buffer = bytearray()
        self._eof = False
        self.inbox: list[dict[str, Any]] = []
        self.stderr_chunks: list[bytes] = []
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()
        self._next_request_id = 1
        self.capabilities: list[str] = []
        #: Why draining stdout at close failed (a truncated last frame), if it did.
        self.close_error: str | None = None

    # -- transport -------------------------------------------------------------------------

    def _drain_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        while chunk := os.read(stderr.fileno(), 65536):
            self.stderr_chunks.append(chunk)

    @property
    def stderr_text(self) -> str:
        return b"".join(self.stderr_chunks).decode("utf-8", "replace")

    def send(self, message: dict[str, Any]) -> None:
        """Send one message as a frame and record it."""
        payload = encode_payload(message)
        self.recorder.add(self.scenario, CLIENT_TO_HOST, payload)
        assert self.process.stdin is not None
        self.process.stdin.write(struct.pack("<I", len(payload)) + payload)
        self.process.stdin.flush()

    def _take_frame(self) -> bytes | None:
        if len(self._buffer) < 4:
            return None
        (length,) = struct.unpack_from("<I", self._buffer)
        if length > MAX_FRAME_BYTES:
            raise ScenarioError(f"host sent an oversized frame header ({length} bytes)")
        if len(self._buffer) < 4 + length:
            return None
        payload = bytes(self._buffer[4 : 4 + length])
        del self._buffer[: 4 + length]
        return payload

    def read_frame(self, deadline: float) -> dict[str, Any] | None:
        """Read and record one host frame; None at the deadline; HostExitedError on EOF."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while True:
            payload = self._take_frame()
            if payload is not None:
                self.recorder.add(self.scenario, HOST_TO_CLIENT, payload)
                message: dict[str, Any] = json.loads(payload)
                return message
            if self._eof:
                if self._buffer:
                    raise ScenarioError("host closed stdout inside a frame")
                raise HostExitedError(
                    f"host closed stdout (exit status {self.process.poll()}); "
                    f"stderr: {self.stderr_text.strip()!r}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True

    def expect(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = FRAME_TIMEOUT,
    ) -> dict[str, Any]:
        """Return (and remove from the inbox) the first host frame matching ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            for index, message in enumerate(self.inbox):
                if predicate(message):
                    return self.inbox.pop(index)
            try:
                received = self.read_frame(deadline)
            except HostExitedError as exc:
                raise HostExitedError(f"[{self.scenario}] waiting for {what}: {exc}") from None
            if received is None:
                raise ScenarioError(
                    f"[{self.scenario}] no {what} within {timeout}s; unmatched: {self.inbox!r}"
                )
            self.inbox.append(received)

    def pump(self, seconds: float) -> None:
        """Read whatever the host sends during ``seconds`` into the inbox."""
        deadline = time.monotonic() + seconds
        while True:
            message = self.read_frame(deadline)
            if message is None:
                return
            self.inbox.append(message)

    def close(self, timeout: float = 10.0) -> None:
        """Close stdin (clean EOF), record any frames still in flight and reap the process."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with suppress(BrokenPipeError):
                self.process.stdin.close()
        deadline = time.monotonic() + timeout
        try:
            while True:
                message = self.read_frame(deadline)
                if message is None:
                    break
                self.inbox.append(message)
        except HostExitedError:
            pass
        except ScenarioError as exc:
            self.close_error = str(exc)
        try:
            self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._stderr_thread.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()

    # -- protocol helpers -------------------------------------------------------------------

    def hello(
        self,
        versions: list[int] | None = None,
        required: list[str] | None = None,
        optional: list[str] | None = None,
    ) -> None:
        self.send(
            {
                "type": "connection/hello",
                "supportedVersions": [PROTOCOL_VERSION] if versions is None else versions,
                "requiredCapabilities": [] if required is None else required,
                "optionalCapabilities": KNOWN_CAPABILITIES if optional is None else optional,
            }
        )

    def handshake(self, optional: list[str] | None = None) -> list[str]:
        """Send hello and wait for ``connection/ready``; return the negotiated capabilities."""
        self.hello(optional=optional)
        ready = self.expect(lambda m: m["type"].startswith("connection/"), "handshake reply")
        if ready["type"] != "connection/ready":
            raise ScenarioError(f"[{self.scenario}] handshake refused: {ready!r}")
        self.capabilities = list(ready["capabilities"])
        return self.capabilities

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def request(self, request: dict[str, Any]) -> int:
        """Send an ``operation/request`` and return its id."""
        request_id = self._next_request_id
        self._next_request_id += 1
        self.send({"type": "operation/request", "id": request_id, "request": request})
        return request_id

    def response(self, request_id: int, timeout: float = FRAME_TIMEOUT) -> dict[str, Any]:
        """Return the ``result`` of the ``operation/response`` for ``request_id``."""
        message = self.expect(
            lambda m: m["type"] == "operation/response" and m["id"] == request_id,
            f"operation/response {request_id}",
            timeout,
        )
        result: dict[str, Any] = message["result"]
        return result

    def ok(self, request_id: int, timeout: float = FRAME_TIMEOUT) -> dict[str, Any]:
        result = self.response(request_id, timeout)
        if result["status"] != "ok":
            raise ScenarioError(f"[{self.scenario}] request {request_id} failed: {result!r}")
        value: dict[str, Any] = result["value"]
        return value

    def error(self, request_id: int, timeout: float = FRAME_TIMEOUT) -> str:
        result = self.response(request_id, timeout)
        if result["status"] != "error":
            raise ScenarioError(f"[{self.scenario}] request {request_id} succeeded: {result!r}")
        message: str = result["message"]
        return message

    def initial_response(self, request_id: int, timeout: float = FRAME_TIMEOUT) -> dict[str, Any]:
        message = self.expect(
            lambda m: m["type"] == "execute/initialResponse" and m["id"] == request_id,
            f"execute/initialResponse {request_id}",
            timeout,
        )
        result: dict[str, Any] = message["result"]
        return result

    def delegate_request(self, kind: str, timeout: float = FRAME_TIMEOUT) -> dict[str, Any]:
        return self.expect(
            lambda m: m["type"] == "delegate/request" and m["request"]["type"] == kind,
            f"delegate/request {kind}",
            timeout,
        )

    def delegate_cancel(self, delegate_id: int) -> dict[str, Any]:
        return self.expect(
            lambda m: m["type"] == "delegate/cancel" and m["id"] == delegate_id,
            f"delegate/cancel {delegate_id}",
        )

    def cell_closed(self, session_id: str, cell_id: str) -> dict[str, Any]:
        return self.expect(
            lambda m: (
                m["type"] == "cell/closed"
                and m["sessionId"] == session_id
                and m["cellId"] == cell_id
            ),
            f"cell/closed {session_id}/{cell_id}",
        )

    def reply(self, delegate_id: int, result: dict[str, Any]) -> None:
        self.send({"type": "delegate/response", "id": delegate_id, "result": result})

    def reply_tool(self, delegate_id: int, value: Any) -> None:
        self.reply(delegate_id, {"status": "ok", "value": {"type": "tool/result", "result": value}})

    def reply_error(self, delegate_id: int, message: str) -> None:
        self.reply(delegate_id, {"status": "error", "message": message})

    def reply_delivered(self, delegate_id: int) -> None:
        self.reply(delegate_id, {"status": "ok", "value": {"type": "notification/delivered"}})

    # -- requests ---------------------------------------------------------------------------

    def open_session(self, session_id: str, **fields: Any) -> int:
        return self.request({"method": "session/open", "sessionId": session_id, **fields})

    def open_ok(self, session_id: str, **fields: Any) -> None:
        value = self.ok(self.open_session(session_id, **fields))
        check(value == {"type": "session/ready", "sessionId": session_id}, value)

    def execute(
        self,
        session_id: str,
        source: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_call_id: str = "call-1",
        yield_time_ms: int | None = None,
        max_output_tokens: int | None = None,
        catalog_revision: int | None = None,
    ) -> int:
        request: dict[str, Any] = {
            "tool_call_id": tool_call_id,
            "enabled_tools": [] if tools is None else tools,
            "source": source,
            "yield_time_ms": yield_time_ms,
            "max_output_tokens": max_output_tokens,
        }
        if catalog_revision is not None:
            request["catalog_revision"] = catalog_revision
        return self.request(
            {"method": "session/execute", "sessionId": session_id, "request": request}
        )

    def started(self, request_id: int) -> str:
        """Wait for ``execution/started`` and return the cell id."""
        value = self.ok(request_id)
        check(value["type"] == "execution/started", value)
        cell_id: str = value["cellId"]
        return cell_id

    def wait(
        self,
        session_id: str,
        cell_id: str,
        yield_time_ms: int,
        max_output_tokens: int | None = None,
    ) -> int:
        request: dict[str, Any] = {
            "method": "session/wait",
            "sessionId": session_id,
            "request": {"cell_id": cell_id, "yield_time_ms": yield_time_ms},
        }
        if max_output_tokens is not None:
            request["maxOutputTokens"] = max_output_tokens
        return self.request(request)

    def terminate(self, session_id: str, cell_id: str, max_output_tokens: int | None = None) -> int:
        request: dict[str, Any] = {
            "method": "session/terminate",
            "sessionId": session_id,
            "cellId": cell_id,
        }
        if max_output_tokens is not None:
            request["maxOutputTokens"] = max_output_tokens
        return self.request(request)

    def shutdown(self, session_id: str) -> int:
        return self.request({"method": "session/shutdown", "sessionId": session_id})

    def shutdown_ok(self, session_id: str) -> None:
        value = self.ok(self.shutdown(session_id))
        check(value == {"type": "session/closed", "sessionId": session_id}, value)


def tool_definition(
    name: str,
    description: str,
    *,
    namespace: str | None = None,
    kind: str = "function",
    input_schema: Any = None,
    output_schema: Any = None,
) -> dict[str, Any]:
    """Build a ``WireToolDefinition`` (all six fields, as the host expects)."""
    return {
        "name": name,
        "tool_name": {"name": name, "namespace": namespace},
        "description": description,
        "kind": kind,
        "input_schema": input_schema,
        "output_schema": output_schema,
    }


ECHO_TOOL = tool_definition(
    "echo",
    "Echo the input back.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}, "n": {"type": "number"}},
        "additionalProperties": True,
    },
)

LOOKUP_TOOL = tool_definition(
    "lookup",
    "Look a key up in a demo MCP server.",
    namespace="mcp__demo",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}}},
    output_schema={"type": "object"},
)

PATCH_TOOL = tool_definition("apply-patch", "Apply a freeform patch.", kind="freeform")


def check(condition: object, detail: object) -> None:
    """Fail the scenario (with the offending frame or value) unless ``condition`` holds."""
    if not condition:
        raise ScenarioError(f"unexpected host behaviour: {detail!r}")


def value_of(result: dict[str, Any]) -> dict[str, Any]:
    check(result["status"] == "ok", result)
    value: dict[str, Any] = result["value"]
    return value


def runtime_variant(response: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Split an externally tagged runtime response into (variant, body)."""
    ((variant, body),) = response.items()
    return variant, body


def outcome(value: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Split a ``wait/completed`` value into (LiveCell|MissingCell, variant, body)."""
    check(value["type"] == "wait/completed", value)
    ((liveness, response),) = value["outcome"].items()
    variant, body = runtime_variant(response)
    return liveness, variant, body


# -- scenarios ---------------------------------------------------------------------------------

Scenario = Callable[[HostConnection], None]

#: (name, capabilities the scenario needs, function), in recording order.
SCENARIOS: list[tuple[str, tuple[str, ...], Scenario]] = []


def scenario(name: str, *requires: str) -> Callable[[Scenario], Scenario]:
    def register(function: Scenario) -> Scenario:
        SCENARIOS.append((name, requires, function))
        return function

    return register


@scenario("handshake_ready")
def _handshake_ready(host: HostConnection) -> None:
    """Every known capability offered as optional, plus one the host has never heard of."""
    host.handshake(optional=[*KNOWN_CAPABILITIES, "x-unknown-capability"])


def _expect_rejection(host: HostConnection, reason_type: str) -> None:
    reply = host.expect(lambda m: m["type"].startswith("connection/"), "handshake reply")
    check(reply["type"] == "connection/rejected", reply)
    check(reply["reason"]["type"] == reason_type, reply)


@scenario("handshake_rejected_no_compatible_version")
def _handshake_no_compatible_version(host: HostConnection) -> None:
    host.hello(versions=[2], required=[], optional=[])
    _expect_rejection(host, "noCompatibleVersion")


@scenario("handshake_rejected_missing_required_capability")
def _handshake_missing_capability(host: HostConnection) -> None:
    host.hello(required=["x-required-capability"], optional=[])
    _expect_rejection(host, "missingRequiredCapability")


@scenario("handshake_rejected_invalid_hello")
def _handshake_invalid_hello(host: HostConnection) -> None:
    """A well-formed request sent before the hello."""
    host.open_session("s1")
    _expect_rejection(host, "invalidHello")


@scenario("session_open")
def _session_open(host: HostConnection) -> None:
    """Open sessions with every shape of limits; duplicate and reused ids fail."""
    host.handshake()
    limits = {"maxYieldTimeMs": 30000, "maxHeapSizeBytes": 268435456}
    if host.has("bounded-output-v1"):
        host.open_ok("s-limits", cellExecutionLimits=limits, outputTruncation="client")
    else:
        host.open_ok("s-limits", cellExecutionLimits=limits)
    host.open_ok("s-yield-only", cellExecutionLimits={"maxYieldTimeMs": 5000})
    host.open_ok("s-empty-limits", cellExecutionLimits={})
    host.open_ok("s-null-limits", cellExecutionLimits=None)
    host.open_ok("s-plain")
    message = host.error(host.open_session("s-limits"))
    check(message == "code-mode session ID `s-limits` is already open", message)
    host.shutdown_ok("s-plain")
    message = host.error(host.open_session("s-plain"))
    check(message == "code-mode session ID `s-plain` was reused", message)
    for session_id in ("s-limits", "s-yield-only", "s-empty-limits", "s-null-limits"):
        host.shutdown_ok(session_id)


@scenario("execute_tool_call")
def _execute_tool_call(host: HostConnection) -> None:
    """A cell calls two tools; the client answers; the cell finishes with a Result."""
    host.handshake()
    host.open_ok("s1")
    source = (
        'const r = await tools.echo({text: "h\\u00e9llo \\u2603", n: 1});\n'
        'const m = await tools.lookup({key: "k"});\n'
        "text(JSON.stringify(r));\n"
        "text(JSON.stringify(m));\n"
    )
    execute_id = host.execute(
        "s1", source, tools=[ECHO_TOOL, LOOKUP_TOOL, PATCH_TOOL], tool_call_id="call-tools"
    )
    cell_id = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    invocation = call["request"]["invocation"]
    check(invocation["tool_name"]["name"] == "echo", call)
    host.reply_tool(call["id"], {"echo": invocation["input"]})
    call = host.delegate_request("tool/invoke")
    check(call["request"]["invocation"]["tool_name"]["namespace"] == "mcp__demo", call)
    host.reply_tool(call["id"], {"content": [{"type": "text", "text": "value"}], "isError": False})
    variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Result" and body["error_text"] is None, body)
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("execute_tool_error")
def _execute_tool_error(host: HostConnection) -> None:
    """Error replies to tool calls: one uncaught (becomes error_text), one caught in JS."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute("s1", "await tools.echo({fail: true});", tools=[ECHO_TOOL])
    cell_id = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    host.reply_error(call["id"], "tool exploded")
    variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Result" and body["error_text"] == "tool exploded", body)
    host.cell_closed("s1", cell_id)

    source = "try { await tools.echo({}); } catch (e) { text('caught: ' + e); }"
    execute_id = host.execute("s1", source, tools=[ECHO_TOOL])
    cell_id = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    host.reply_error(call["id"], "not today")
    variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Result" and body["error_text"] is None, body)
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("notify")
def _notify(host: HostConnection) -> None:
    """notify() sends notification/send; the result waits for the acknowledgement."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute(
        "s1", "notify('hello there'); notify(42); text('notified');", tool_call_id="call-notify"
    )
    cell_id = host.started(execute_id)
    for _ in range(2):
        note = host.delegate_request("notification/send")
        check(note["request"]["callId"] == "call-notify", note)
        host.reply_delivered(note["id"])
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Result", variant)
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("yield_and_wait")
def _yield_and_wait(host: HostConnection) -> None:
    """A cell yields while blocked in a tool call; waits observe Yielded and then Result."""
    host.handshake()
    host.open_ok("s1")
    source = (
        "text('before');\n"
        "const r = await tools.echo({step: 1});\n"
        "text('after ' + JSON.stringify(r));\n"
    )
    execute_id = host.execute("s1", source, tools=[ECHO_TOOL], yield_time_ms=200)
    cell_id = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Yielded", variant)
    liveness, variant, _ = outcome(host.ok(host.wait("s1", cell_id, 100)))
    check((liveness, variant) == ("LiveCell", "Yielded"), (liveness, variant))
    host.reply_tool(call["id"], {"ok": True})
    liveness, variant, _ = outcome(host.ok(host.wait("s1", cell_id, 5000)))
    check((liveness, variant) == ("LiveCell", "Result"), (liveness, variant))
    host.cell_closed("s1", cell_id)

    # yield_control() yields at once; the finished result waits until a later wait collects it.
    execute_id = host.execute("s1", "text('a'); yield_control(); text('b');", yield_time_ms=5000)
    cell_id = host.started(execute_id)
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Yielded", variant)
    time.sleep(0.3)
    liveness, variant, _ = outcome(host.ok(host.wait("s1", cell_id, 1000)))
    check((liveness, variant) == ("LiveCell", "Result"), (liveness, variant))
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("terminate")
def _terminate(host: HostConnection) -> None:
    """Terminate a cell blocked in a tool call; terminate an unknown cell."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute(
        "s1", "text('working'); await tools.echo({});", tools=[ECHO_TOOL], yield_time_ms=100
    )
    cell_id = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Yielded", variant)
    liveness, variant, _ = outcome(host.ok(host.terminate("s1", cell_id)))
    check((liveness, variant) == ("LiveCell", "Terminated"), (liveness, variant))
    host.delegate_cancel(call["id"])
    host.cell_closed("s1", cell_id)
    liveness, variant, body = outcome(host.ok(host.terminate("s1", "999")))
    check((liveness, variant) == ("MissingCell", "Result"), body)
    host.shutdown_ok("s1")


@scenario("wait_missing_cell")
def _wait_missing_cell(host: HostConnection) -> None:
    host.handshake()
    host.open_ok("s1")
    liveness, variant, body = outcome(host.ok(host.wait("s1", "999", 0)))
    check((liveness, variant) == ("MissingCell", "Result"), body)
    check(body["error_text"] == "exec cell 999 not found", body)
    host.shutdown_ok("s1")


@scenario("operation_errors")
def _operation_errors(host: HostConnection) -> None:
    """Requests the host refuses with an operation/response error."""
    host.handshake()
    message = host.error(host.execute("nope", "text(1)"))
    check(message == "unknown code-mode session nope", message)
    message = host.error(host.wait("nope", "1", 0))
    check(message == "unknown code-mode session nope", message)
    message = host.error(host.terminate("nope", "1"))
    check(message == "unknown code-mode session nope", message)
    message = host.error(host.shutdown("nope"))
    check(message == "unknown code-mode session nope", message)
    host.open_ok("s1")
    message = host.error(host.execute("s1", "text(1)", max_output_tokens=-1))
    check(message.startswith("invalid code-mode execute request"), message)
    # A second wait while one is in flight.
    execute_id = host.execute("s1", "await new Promise(() => {});", yield_time_ms=50)
    cell_id = host.started(execute_id)
    host.initial_response(execute_id)
    first = host.wait("s1", cell_id, 500)
    message = host.error(host.wait("s1", cell_id, 0))
    check(message == f"exec cell {cell_id} already has an active observer", message)
    liveness, variant, _ = outcome(host.ok(first))
    check((liveness, variant) == ("LiveCell", "Yielded"), (liveness, variant))
    host.ok(host.terminate("s1", cell_id))
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("cancel_wait")
def _cancel_wait(host: HostConnection) -> None:
    """operation/cancel ends an in-flight wait with `code-mode request cancelled`."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute("s1", "await new Promise(() => {});", yield_time_ms=50)
    cell_id = host.started(execute_id)
    host.initial_response(execute_id)
    wait_id = host.wait("s1", cell_id, 30000)
    time.sleep(0.1)
    host.send({"type": "operation/cancel", "id": wait_id})
    message = host.error(wait_id)
    check(message == "code-mode request cancelled", message)
    host.ok(host.terminate("s1", cell_id))
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("yield_observation", "yield-observation")
def _yield_observation(host: HostConnection) -> None:
    """operation/yield makes a wait, and a pending initial response, return Yielded now."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute("s1", "text('tick'); await new Promise(() => {});", yield_time_ms=50)
    cell_id = host.started(execute_id)
    host.initial_response(execute_id)
    wait_id = host.wait("s1", cell_id, 30000)
    time.sleep(0.1)
    host.send({"type": "operation/yield", "id": wait_id})
    liveness, variant, _ = outcome(host.ok(wait_id, timeout=5))
    check((liveness, variant) == ("LiveCell", "Yielded"), (liveness, variant))

    execute_id = host.execute("s1", "await new Promise(() => {});", yield_time_ms=30000)
    second = host.started(execute_id)
    time.sleep(0.1)
    host.send({"type": "operation/yield", "id": execute_id})
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id, timeout=5)))
    check(variant == "Yielded", variant)
    for cell in (cell_id, second):
        host.ok(host.terminate("s1", cell))
        host.cell_closed("s1", cell)
    host.shutdown_ok("s1")


@scenario("media_output")
def _media_output(host: HostConnection) -> None:
    """image() with and without detail, and audio(): input_image / input_audio items."""
    host.handshake()
    host.open_ok("s1")
    source = (
        f"image({json.dumps(PNG_DATA_URI)}, 'low');\n"
        f"image({json.dumps(PNG_DATA_URI)});\n"
        f"audio({json.dumps(_wav_data_uri())});\n"
        "text('done');\n"
    )
    execute_id = host.execute("s1", source)
    cell_id = host.started(execute_id)
    variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Result" and body["error_text"] is None, body)
    kinds = [item["type"] for item in body["content_items"]]
    check(kinds == ["input_image", "input_image", "input_audio", "input_text"], kinds)
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("js_errors")
def _js_errors(host: HostConnection) -> None:
    """A thrown Error keeps earlier output; a syntax error; a thrown string."""
    host.handshake()
    host.open_ok("s1")
    for source in (
        "text('early'); throw new Error('boom');",
        "this is not javascript",
        "throw 'a string';",
    ):
        execute_id = host.execute("s1", source)
        cell_id = host.started(execute_id)
        variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
        check(variant == "Result" and body["error_text"], body)
        host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("server_truncation", "bounded-output-v1")
def _server_truncation(host: HostConnection) -> None:
    """outputTruncation: server, with max_output_tokens / maxOutputTokens budgets."""
    host.handshake()
    host.open_ok("s1", outputTruncation="server")
    execute_id = host.execute("s1", "text('x'.repeat(1000));", max_output_tokens=10)
    cell_id = host.started(execute_id)
    variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Result", body)
    check(body["content_items"][0]["text"].startswith("Warning: truncated output"), body)
    host.cell_closed("s1", cell_id)

    source = (
        "text('a'.repeat(40));\n"
        "await tools.echo({});\n"
        "for (let i = 0; i < 20; i++) text('line ' + i + ' ' + 'b'.repeat(50));\n"
        "await tools.echo({});\n"
        "text('c'.repeat(400));\n"
        "await new Promise(() => {});\n"
    )
    execute_id = host.execute(
        "s1", source, tools=[ECHO_TOOL], yield_time_ms=100, max_output_tokens=100
    )
    cell_id = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Yielded", variant)
    host.reply_tool(call["id"], None)
    call = host.delegate_request("tool/invoke")
    liveness, variant, body = outcome(host.ok(host.wait("s1", cell_id, 100, max_output_tokens=20)))
    check((liveness, variant) == ("LiveCell", "Yielded"), body)
    host.reply_tool(call["id"], None)
    time.sleep(0.1)
    liveness, variant, _ = outcome(host.ok(host.terminate("s1", cell_id, max_output_tokens=5)))
    check((liveness, variant) == ("LiveCell", "Terminated"), (liveness, variant))
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


@scenario("catalog_revision", "tool-catalog-revision-v1")
def _catalog_revision(host: HostConnection) -> None:
    """Register a tool catalog as a revision, reuse it, and hit each revision error."""
    host.handshake()
    host.open_ok("s1")
    source = "text(ALL_TOOLS.map((t) => t.name).join(','));"
    for tools in ([ECHO_TOOL, LOOKUP_TOOL], []):
        execute_id = host.execute("s1", source, tools=tools, catalog_revision=1)
        cell_id = host.started(execute_id)
        variant, body = runtime_variant(value_of(host.initial_response(execute_id)))
        check(variant == "Result", body)
        check(body["content_items"] == [{"type": "input_text", "text": "echo,lookup"}], body)
        host.cell_closed("s1", cell_id)
    for tools, revision, expected in (
        ([ECHO_TOOL], 1, "conflicting code-mode catalog revision"),
        ([], 2, "unknown code-mode catalog revision"),
        ([], 0, "invalid code-mode catalog revision"),
    ):
        message = host.error(host.execute("s1", source, tools=tools, catalog_revision=revision))
        check(message == expected, message)
    host.shutdown_ok("s1")


@scenario("shutdown_with_live_cells")
def _shutdown_with_live_cells(host: HostConnection) -> None:
    """Shutdown cancels pending tool calls and closes every cell before session/closed."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute("s1", "await tools.echo({});", tools=[ECHO_TOOL], yield_time_ms=50)
    blocked = host.started(execute_id)
    call = host.delegate_request("tool/invoke")
    host.initial_response(execute_id)
    execute_id = host.execute("s1", "await new Promise(() => {});", yield_time_ms=50)
    idle = host.started(execute_id)
    host.initial_response(execute_id)
    shutdown_id = host.shutdown("s1")
    host.delegate_cancel(call["id"])
    host.cell_closed("s1", blocked)
    host.cell_closed("s1", idle)
    value = host.ok(shutdown_id)
    check(value == {"type": "session/closed", "sessionId": "s1"}, value)
    message = host.error(host.execute("s1", "text(1)"))
    check(message == "unknown code-mode session s1", message)


@scenario("shutdown_with_pending_initial_response")
def _shutdown_pending_initial(host: HostConnection) -> None:
    """Shutdown while an execute's initial response is pending: it resolves Terminated."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute("s1", "text('x'); await new Promise(() => {});")
    cell_id = host.started(execute_id)
    time.sleep(0.1)
    shutdown_id = host.shutdown("s1")
    variant, _ = runtime_variant(value_of(host.initial_response(execute_id)))
    check(variant == "Terminated", variant)
    host.cell_closed("s1", cell_id)
    host.ok(shutdown_id)


@scenario("initial_response_too_large")
def _initial_response_too_large(host: HostConnection) -> None:
    """Output larger than the frame limit turns the initial response into an error."""
    host.handshake()
    host.open_ok("s1")
    execute_id = host.execute("s1", "text('x'.repeat(65 * 1024 * 1024));")
    cell_id = host.started(execute_id)
    result = host.initial_response(execute_id, timeout=60)
    check(result["status"] == "error", result)
    host.cell_closed("s1", cell_id)
    host.shutdown_ok("s1")


# -- driver ------------------------------------------------------------------------------------


@contextmanager
def connection(binary: str, name: str, recorder: Recorder) -> Iterator[HostConnection]:
    host = HostConnection(binary, name, recorder)
    try:
        yield host
    finally:
        host.close()
        if host.inbox:
            print(f"  [{name}] unclaimed frames: {host.inbox!r}", file=sys.stderr)
        if host.close_error:
            print(f"  [{name}] at close: {host.close_error}", file=sys.stderr)
        if host.stderr_text.strip():
            print(f"  [{name}] host stderr: {host.stderr_text.strip()[:500]}", file=sys.stderr)


def record(binary: str, only: list[str] | None = None) -> Recorder:
    """Run every scenario the host supports and return the recorded frames."""
    recorder = Recorder()
    host_capabilities: set[str] | None = None
    for name, requires, function in SCENARIOS:
        if only and name not in only and name != "handshake_ready":
            continue
        if host_capabilities is not None and not set(requires) <= host_capabilities:
            print(f"skip {name}: host lacks {sorted(set(requires) - host_capabilities)}")
            continue
        started = time.monotonic()
        with connection(binary, name, recorder) as host:
            function(host)
            if name == "handshake_ready":
                host_capabilities = set(host.capabilities)
        print(f"ok   {name} ({time.monotonic() - started:.2f}s)")
    return recorder


def frame_kinds(payload: str) -> list[str]:
    """Describe a frame by its message type and nested tags.

    The first entry is the message ``type``; later entries refine it (``"<type> <tag>"``),
    and each content item adds a ``"content_items <item type>"`` entry.
    """
    message = json.loads(payload)
    kind = message["type"]
    kinds = [kind]
    if kind == "connection/rejected":
        kinds.append(f"{kind} {message['reason']['type']}")
    elif kind == "operation/request":
        kinds.append(f"{kind} {message['request']['method']}")
    elif kind == "delegate/request":
        kinds.append(f"{kind} {message['request']['type']}")
    elif kind == "delegate/response":
        result = message["result"]
        tag = result["value"]["type"] if result["status"] == "ok" else "error"
        kinds.append(f"{kind} {tag}")
    elif kind in ("operation/response", "execute/initialResponse"):
        result = message["result"]
        if result["status"] == "error":
            kinds.append(f"{kind} error")
        elif kind == "execute/initialResponse":
            variant, body = runtime_variant(result["value"])
            kinds.append(f"{kind} {variant}")
            kinds.extend(f"content_items {item['type']}" for item in body["content_items"])
        else:
            value = result["value"]
            kinds.append(f"{kind} {value['type']}")
            if value["type"] == "wait/completed":
                liveness, variant, body = outcome(value)
                kinds.append(f"{kind} {value['type']} {liveness}/{variant}")
                kinds.extend(f"content_items {item['type']}" for item in body["content_items"])
    return kinds


def summarize(records: list[dict[str, str]]) -> str:
    """Count frames per direction, message type and nested tag, as an indented listing."""
    scenarios = {record["scenario"] for record in records}
    lines = [f"{len(records)} frames in {len(scenarios)} scenarios"]
    for direction in (CLIENT_TO_HOST, HOST_TO_CLIENT):
        counter: Counter[str] = Counter()
        selected = [record for record in records if record["direction"] == direction]
        for record in selected:
            counter.update(frame_kinds(record["payload"]))
        lines.append(f"{direction}: {len(selected)} frames")
        items = {
            kind: count for kind, count in counter.items() if kind.startswith("content_items ")
        }
        for kind, count in sorted(counter.items()):
            if kind in items:
                continue
            depth = kind.count(" ")
            label = kind.rsplit(" ", 1)[-1] if depth else kind
            lines.append(f"  {count:5d}  {'    ' * depth}{label}")
        if items:
            lines.append(f"  content_items in runtime responses: {sum(items.values())}")
            for kind, count in sorted(items.items()):
                lines.append(f"  {count:5d}      {kind.split(' ', 1)[1]}")
    return "\n".join(lines)


REQUIRED_HOST_KINDS = {
    "connection/ready",
    "connection/rejected noCompatibleVersion",
    "connection/rejected missingRequiredCapability",
    "connection/rejected invalidHello",
    "operation/response session/ready",
    "operation/response execution/started",
    "operation/response wait/completed",
    "operation/response session/closed",
    "operation/response error",
    "operation/response wait/completed LiveCell/Yielded",
    "operation/response wait/completed LiveCell/Result",
    "operation/response wait/completed LiveCell/Terminated",
    "operation/response wait/completed MissingCell/Result",
    "execute/initialResponse Result",
    "execute/initialResponse Yielded",
    "execute/initialResponse Terminated",
    "execute/initialResponse error",
    "delegate/request tool/invoke",
    "delegate/request notification/send",
    "delegate/cancel",
    "cell/closed",
    "content_items input_text",
    "content_items input_image",
    "content_items input_audio",
}

REQUIRED_CLIENT_KINDS = {
    "connection/hello",
    "operation/request session/open",
    "operation/request session/execute",
    "operation/request session/wait",
    "operation/request session/terminate",
    "operation/request session/shutdown",
    "operation/cancel",
    "delegate/response tool/result",
    "delegate/response notification/delivered",
    "delegate/response error",
}


def missing_kinds(records: list[dict[str, str]], capabilities: set[str]) -> list[str]:
    seen: set[str] = set()
    for record in records:
        seen.update(frame_kinds(record["payload"]))
    required = REQUIRED_HOST_KINDS | REQUIRED_CLIENT_KINDS
    if "yield-observation" in capabilities:
        required = required | {"operation/yield"}
    return sorted(required - seen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host_binary", nargs="?", help="path to a codex-code-mode-host executable")
    parser.add_argument("output", nargs="?", help="JSON Lines file to write")
    parser.add_argument("--only", action="append", help="record only this scenario (repeatable)")
    parser.add_argument(
        "--summarize", metavar="JSONL", help="print the summary of an existing recording and exit"
    )
    args = parser.parse_args(argv)
    if args.summarize:
        with open(args.summarize, encoding="utf-8") as recording:
            print(summarize([json.loads(line) for line in recording]))
        return 0
    if not (args.host_binary and args.output):
        parser.error("HOST_BINARY and OUT.jsonl are required")
    try:
        recorder = record(args.host_binary, args.only)
    except ScenarioError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    recorder.write(args.output)
    print(f"wrote {len(recorder.records)} frames to {args.output}")
    print(summarize(recorder.records))
    ready = next(
        json.loads(r["payload"])
        for r in recorder.records
        if r["direction"] == HOST_TO_CLIENT and '"connection/ready"' in r["payload"]
    )
    if not args.only:
        # Every message kind (and nested tag) the host can be made to send must be present.
        missing = missing_kinds(recorder.records, set(ready["capabilities"]))
        if missing:
            print(f"WARNING: frame kinds never recorded: {missing}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
