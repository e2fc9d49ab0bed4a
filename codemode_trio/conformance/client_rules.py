"""Watch both directions of a connection and list every protocol rule the client breaks.

Pure: feed it the client's bytes and the host's bytes as they pass; :attr:`violations` grows
with one :class:`Violation` per broken rule (SPEC §2, §4, §6, §9, §10, §11, §12, §18). It never
stops the exchange: the point is to report everything, not only the first fault.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Final

import attrs

from ..protocol.codec import decode_client_message
from ..protocol.errors import ProtocolViolation
from ..protocol.framing import HEADER_BYTES, MAX_FRAME_BYTES

__all__ = ["ClientRuleChecker", "Violation"]

# The host's windows of remembered ids (SPEC §11).
_REQUEST_WINDOW: Final = 4096
_DELEGATE_WINDOW: Final = 4096


@attrs.frozen
class Violation:
    """One broken rule: a short ``rule`` name and what exactly happened."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


class FrameSplitter:
    """Split a byte stream into payloads; an oversize header is reported, not raised."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.broken: int | None = None

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        """The payloads ``data`` completes, in order."""
        if self.broken is not None:
            return []
        self.buffer += data
        payloads: list[bytes] = []
        while len(self.buffer) >= HEADER_BYTES:
            length = int.from_bytes(self.buffer[:HEADER_BYTES], "little")
            if length > MAX_FRAME_BYTES:
                self.broken = length
                return payloads
            if len(self.buffer) < HEADER_BYTES + length:
                break
            payloads.append(bytes(self.buffer[HEADER_BYTES : HEADER_BYTES + length]))
            del self.buffer[: HEADER_BYTES + length]
        return payloads


class _Window:
    """The last ``size`` ids seen, for reuse checks."""

    def __init__(self, size: int) -> None:
        self.order: collections.deque[Any] = collections.deque()
        self.members: set[Any] = set()
        self.size = size

    def __contains__(self, item: object) -> bool:
        return item in self.members

    def add(self, item: Any) -> None:
        self.order.append(item)
        self.members.add(item)
        if len(self.order) > self.size:
            self.members.discard(self.order.popleft())


class ClientRuleChecker:
    """The state of one connection as far as the client's obligations go."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self._client = FrameSplitter()
        self._host = FrameSplitter()
        self._greeted = False
        self._reported_no_hello = False
        self._capabilities: set[str] = set()
        self._request_ids = _Window(_REQUEST_WINDOW)
        # Request id -> (method, session id, cell id) for requests not yet answered.
        self._in_flight: dict[int, tuple[str, str, str]] = {}
        self._sessions: set[str] = set()  # open, or being opened
        self._ever_opened: set[str] = set()
        # (session, cell) -> "initial" (its initial response is pending) or "live".
        self._cells: dict[tuple[str, str], str] = {}
        self._waiting: set[tuple[str, str]] = set()
        self._execute_cells: dict[int, tuple[str, str]] = {}
        self._delegates: dict[int, str] = {}  # pending delegate id -> kind
        self._cancelled = _Window(_DELEGATE_WINDOW)
        self._answered = _Window(_DELEGATE_WINDOW)

    def _break(self, rule: str, detail: str) -> None:
        self.violations.append(Violation(rule, detail))

    # ---------------------------------------------------------------- client side

    def client_bytes(self, data: bytes | bytearray) -> None:
        """Check more bytes the client sent."""
        was_broken = self._client.broken
        for payload in self._client.feed(data):
            self._client_frame(payload)
        if was_broken is None and self._client.broken is not None:
            self._break(
                "frame-too-large",
                f"a frame of {self._client.broken} bytes exceeds {MAX_FRAME_BYTES} bytes",
            )

    def client_eof(self) -> None:
        """The client closed its side: a frame cut off is a broken rule."""
        if self._client.broken is None and self._client.buffer:
            self._break("cut-off-frame", f"EOF with {len(self._client.buffer)} bytes of a frame")

    def _client_frame(self, payload: bytes) -> None:
        try:
            decode_client_message(payload, strict=True)
        except ProtocolViolation as exc:
            self._break("malformed-message", str(exc))
            return
        message = json.loads(payload)
        kind = message["type"]
        if kind == "connection/hello":
            if self._greeted:
                self._break("second-hello", "connection/hello sent again after the handshake")
            self._greeted = True
            return
        if not self._greeted and not self._reported_no_hello:
            self._break("hello-first", f"{kind} sent before connection/hello")
            self._reported_no_hello = True
        if kind == "operation/request":
            self._request(message["id"], message["request"])
        elif kind == "operation/yield" and "yield-observation" not in self._capabilities:
            self._break("capability", "operation/yield sent without yield-observation")
        elif kind == "delegate/response":
            self._delegate_response(message["id"])

    def _request(self, request_id: int, request: dict[str, Any]) -> None:
        method = request["method"]
        if request_id in self._in_flight or request_id in self._request_ids:
            self._break("request-id-reused", f"request id {request_id} ({method}) used before")
        self._request_ids.add(request_id)
        session = request["sessionId"]
        cell = ""
        if method == "session/open":
            self._check_field(request, "outputTruncation", "bounded-output-v1")
            self._check_field(
                request, "cellExecutionLimits", "session-cell-execution-resource-limits"
            )
            self._sessions.add(session)
            self._ever_opened.add(session)
        elif session not in self._sessions:
            how = "was shut down" if session in self._ever_opened else "was never opened"
            self._break("closed-session", f"{method} on session {session!r}, which {how}")
        if method == "session/execute":
            self._check_field(request["request"], "catalog_revision", "tool-catalog-revision-v1")
        elif method == "session/wait":
            cell = request["request"]["cell_id"]
            self._check_field(request, "maxOutputTokens", "bounded-output-v1")
            if self._cells.get((session, cell)) == "initial":
                self._break(
                    "wait-before-initial-response",
                    f"wait on cell {cell} of {session!r} before its initial response",
                )
            elif (session, cell) in self._waiting:
                self._break(
                    "wait-not-retired",
                    f"second wait on cell {cell} of {session!r} while one is in flight",
                )
            self._waiting.add((session, cell))
        elif method == "session/terminate":
            cell = request["cellId"]
            self._check_field(request, "maxOutputTokens", "bounded-output-v1")
        elif method == "session/shutdown":
            self._sessions.discard(session)
        self._in_flight[request_id] = (method, session, cell)

    def _check_field(self, body: dict[str, Any], field: str, capability: str) -> None:
        if body.get(field) is not None and capability not in self._capabilities:
            self._break("capability", f"{field} sent without {capability}")

    def _delegate_response(self, delegate_id: int) -> None:
        if delegate_id in self._delegates:
            self._answered.add(delegate_id)
            del self._delegates[delegate_id]
        elif delegate_id in self._cancelled:
            self._break("answered-cancelled-delegate", f"delegate {delegate_id} was cancelled")
        elif delegate_id in self._answered:
            self._break("delegate-answered-twice", f"delegate {delegate_id} was already answered")
        else:
            self._break("unknown-delegate", f"delegate {delegate_id} was never requested")

    # ---------------------------------------------------------------- host side

    def host_bytes(self, data: bytes | bytearray) -> None:
        """Follow what the host sent (it sets what the client may do next)."""
        for payload in self._host.feed(data):
            try:
                message = json.loads(payload)
            except ValueError:
                continue  # the host's own fault; not the client's to answer for
            if isinstance(message, dict):
                self._host_message(message)

    def _host_message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "connection/ready":
            self._capabilities = set(message.get("capabilities", ()))
        elif kind == "operation/response":
            self._response(message)
        elif kind == "execute/initialResponse":
            cell = self._execute_cells.pop(message["id"], None)
            if cell is not None and self._cells.get(cell) == "initial":
                self._cells[cell] = "live"
        elif kind == "delegate/request":
            self._delegates[message["id"]] = message["request"].get("type", "")
        elif kind == "delegate/cancel":
            if self._delegates.pop(message["id"], None) is not None:
                self._cancelled.add(message["id"])
        elif kind == "cell/closed":
            self._cells.pop((message["sessionId"], message["cellId"]), None)

    def _response(self, message: dict[str, Any]) -> None:
        request_id = message["id"]
        method, session, cell = self._in_flight.pop(request_id, ("", "", ""))
        result = message["result"]
        ok = result.get("status") == "ok"
        if method == "session/open" and not ok:
            self._sessions.discard(session)
        elif method == "session/execute" and ok:
            key = (session, result["value"]["cellId"])
            self._cells[key] = "initial"
            self._execute_cells[request_id] = key
        elif method == "session/wait":
            self._waiting.discard((session, cell))
