"""A minimal blocking client for the code-mode host protocol: the baseline for the benchmarks.

It is deliberately as thin as a blocking Python client can be: ``subprocess`` pipes used as raw
file descriptors (one ``os.read`` of whatever the pipe holds into one buffer, one ``os.write``
per frame, no buffered file objects, no ``select``), ``json`` and ``struct``, no event loop, no
threads. It splits frames out of its buffer, answers every
``tool/invoke`` delegate request on the spot with the call's input as the result (an echo
tool), and returns when the execute's ``execute/initialResponse`` carries a ``Result``.

It does only what the benchmarks need; it is not a general client (no yields, no waits, no
cancellation, no error recovery beyond raising).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
from collections import deque
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ECHO_TOOL",
    "HELLO",
    "HELLO_CAPABILITIES",
    "MinimalClient",
    "MinimalClientError",
    "delegate_answer",
    "encode_frame",
    "execute_request",
    "final_result",
    "response_value",
]

_HEADER = struct.Struct("<I")

#: The capabilities offered as optional in ``connection/hello`` (the same set codemode-trio
#: offers by default).
HELLO_CAPABILITIES: Sequence[str] = (
    "session-cell-execution-resource-limits",
    "yield-observation",
    "bounded-output-v1",
    "delegate-capacity-4096",
    "tool-catalog-revision-v1",
)

#: The wire definition of the echo tool: what codemode-trio sends for
#: ``@tools.function(description="echo") async def echo(i: int) -> ...``.
ECHO_TOOL: dict[str, Any] = {
    "name": "echo",
    "tool_name": {"name": "echo", "namespace": None},
    "description": "echo",
    "kind": "function",
    "input_schema": {
        "type": "object",
        "properties": {"i": {"type": "integer"}},
        "required": ["i"],
    },
    "output_schema": None,
}


class MinimalClientError(Exception):
    """The host answered with an error, sent something unexpected, or went away."""


# --------------------------------------------------------------------------- messages
# Shared with the single-task Trio client in _minimal_trio_client.py: the two differ only in
# how they wait for bytes.

HELLO: dict[str, Any] = {
    "type": "connection/hello",
    "supportedVersions": [1],
    "requiredCapabilities": [],
    "optionalCapabilities": list(HELLO_CAPABILITIES),
}


def encode_frame(message: dict[str, Any]) -> bytes:
    """A message as one length-prefixed frame."""
    payload = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    return _HEADER.pack(len(payload)) + payload


def delegate_answer(message: dict[str, Any]) -> dict[str, Any]:
    """The response to a ``delegate/request``: an echo for tools, delivered for notes."""
    request = message["request"]
    if request["type"] == "tool/invoke":
        value = {"type": "tool/result", "result": request["invocation"]["input"]}
    else:
        value = {"type": "notification/delivered"}
    return {
        "type": "delegate/response",
        "id": message["id"],
        "result": {"status": "ok", "value": value},
    }


def execute_request(
    session_id: str,
    source: str,
    tools: Sequence[dict[str, Any]],
    yield_time_ms: int | None,
    call_number: int,
) -> dict[str, Any]:
    """The ``session/execute`` request for ``source``."""
    return {
        "method": "session/execute",
        "sessionId": session_id,
        "request": {
            "tool_call_id": f"call-{call_number}",
            "enabled_tools": list(tools),
            "source": source,
            "yield_time_ms": yield_time_ms,
            "max_output_tokens": None,
        },
    }


def response_value(message: dict[str, Any], request_id: int) -> dict[str, Any] | None:
    """The value of the ``operation/response`` to ``request_id`` (raise if it is an error);
    ``None`` for any other frame."""
    if message["type"] != "operation/response" or message["id"] != request_id:
        return None
    result = message["result"]
    if result["status"] != "ok":
        raise MinimalClientError(result["message"])
    value: dict[str, Any] = result["value"]
    return value


def final_result(message: dict[str, Any]) -> dict[str, Any]:
    """The ``Result`` of an ``execute/initialResponse``, or raise."""
    result = message["result"]
    if result["status"] != "ok":
        raise MinimalClientError(result["message"])
    response: dict[str, Any] = result["value"]
    final = response.get("Result")
    if final is None:
        raise MinimalClientError(f"cell did not finish: {response!r:.200}")
    return final  # type: ignore[no-any-return]


class MinimalClient:
    """One host process and one open session, driven synchronously.

    Use as a context manager; leaving it closes the host's stdin and reaps the process.
    """

    def __init__(self, host_path: str, *, session_id: str = "bench") -> None:
        self.session_id = session_id
        self.frames_sent = 0
        self.frames_received = 0
        self._next_id = 1
        self._process = subprocess.Popen(
            [host_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # The host logs only human-readable WARN lines there; discarding them means the pipe
            # can never fill without a thread to drain it.
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._stdin = self._process.stdin
        self._out_fd = self._process.stdin.fileno()
        self._in_fd = self._process.stdout.fileno()
        self._buffer = bytearray()
        self._frames: deque[bytes] = deque()
        try:
            self._handshake()
            self._open_session()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> MinimalClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def pid(self) -> int:
        """The host's process id."""
        return self._process.pid

    def close(self) -> None:
        """Close stdin (the host exits at once on EOF) and reap the process."""
        if self._process.returncode is not None:
            return
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()  # type: ignore[union-attr]

    # ----------------------------------------------------------------------- frames

    def _send(self, message: dict[str, Any]) -> None:
        data = encode_frame(message)
        written = os.write(self._out_fd, data)
        while written < len(data):  # a pipe takes a whole small frame; a big one may not fit
            written += os.write(self._out_fd, data[written:])
        self.frames_sent += 1

    def _receive(self) -> dict[str, Any]:
        frames = self._frames
        while not frames:
            chunk = os.read(self._in_fd, 1 << 16)
            if not chunk:
                raise MinimalClientError("code-mode host closed its stdout")
            buffer = self._buffer
            buffer += chunk
            start = 0
            while len(buffer) - start >= 4:
                (length,) = _HEADER.unpack_from(buffer, start)
                end = start + 4 + length
                if end > len(buffer):
                    break
                frames.append(bytes(buffer[start + 4 : end]))
                start = end
            del buffer[:start]
        self.frames_received += 1
        message: dict[str, Any] = json.loads(frames.popleft())
        return message

    def _request(self, request: dict[str, Any]) -> int:
        request_id = self._next_id
        self._next_id += 1
        self._send({"type": "operation/request", "id": request_id, "request": request})
        return request_id

    def _response(self, request_id: int) -> dict[str, Any]:
        """Read frames until the ``operation/response`` to ``request_id``; return its value."""
        while True:
            message = self._receive()
            value = response_value(message, request_id)
            if value is not None:
                return value
            self._handle_other(message)

    def _handle_other(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "delegate/request":
            self._answer_delegate(message)
        elif kind not in ("cell/closed", "delegate/cancel"):
            raise MinimalClientError(f"unexpected frame {message!r:.200}")

    def _answer_delegate(self, message: dict[str, Any]) -> None:
        self._send(delegate_answer(message))

    # ----------------------------------------------------------------------- protocol

    def _handshake(self) -> None:
        self._send(HELLO)
        answer = self._receive()
        if answer["type"] != "connection/ready":
            raise MinimalClientError(f"handshake refused: {answer!r}")

    def _open_session(self) -> None:
        self._response(self._request({"method": "session/open", "sessionId": self.session_id}))

    def run(
        self,
        source: str,
        *,
        tools: Sequence[dict[str, Any]] = (ECHO_TOOL,),
        yield_time_ms: int | None = None,
    ) -> dict[str, Any]:
        """Execute ``source`` and return the ``Result`` of its initial response.

        Every delegate request that arrives meanwhile is answered at once. The cell must
        finish before ``yield_time_ms``: a ``Yielded`` initial response is an error here.
        """
        request_id = self._request(
            execute_request(self.session_id, source, tools, yield_time_ms, self._next_id)
        )
        started = self._response(request_id)
        if started.get("type") != "execution/started":
            raise MinimalClientError(f"unexpected execute response {started!r}")
        while True:
            message = self._receive()
            if message["type"] == "execute/initialResponse" and message["id"] == request_id:
                return final_result(message)
            self._handle_other(message)
