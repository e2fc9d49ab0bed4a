"""The client's table of delegate calls: active, parked, and the ids the host already used.

:class:`~codemode_trio.protocol.client_protocol.ClientProtocol` decides *whether* a
``delegate/request`` belongs to a live cell; this table holds what follows from it: the calls
being run (each answered at most once, none after it was revoked), the requests parked until
their cell's ``execution/started`` arrives, the pending-call limit, and the window of recent ids
a host must never reuse. It never imports trio and sends nothing itself: replies are encoded
by :func:`encode_reply` and queued by the machine.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .client_events import DelegateCall
from .codec import encode_client_message
from .errors import EncodeError
from .ids import DelegateRequestId, RecentIds
from .messages import DelegateRequest, DelegateResponse, ToolResult, WireError, WireOk

__all__ = ["DelegateTable", "encode_reply"]


class DelegateTable:
    """Delegate calls of one connection (see the module docstring).

    ``max_active`` calls may run at once (a request past it is refused with an error reply),
    ``max_parked`` may wait for their cell, and the last ``recent`` ids are remembered so a
    reused one is caught even after its call ended.
    """

    __slots__ = ("_active", "_owners", "_recent", "max_active", "max_parked", "parked")

    def __init__(self, *, max_active: int, max_parked: int, recent: int) -> None:
        """An empty table with the given bounds."""
        self.max_active = max_active
        self.max_parked = max_parked
        self._active: dict[int, DelegateCall] = {}
        # The delegate-id set of each active call's cell, kept in step with _active.
        self._owners: dict[int, set[int]] = {}
        #: Requests waiting for their cell's ``execution/started``, oldest first (read only).
        self.parked: deque[DelegateRequest] = deque()
        self._recent: RecentIds[int] = RecentIds(recent)

    @property
    def active(self) -> int:
        """Calls being run."""
        return len(self._active)

    @property
    def remembered(self) -> int:
        """Ids in the recent window."""
        return len(self._recent)

    def is_active(self, call: DelegateCall) -> bool:
        """Whether ``call`` still waits for its outcome (not answered, not revoked)."""
        return self._active.get(call.id) is call

    def park(self, message: DelegateRequest) -> bool:
        """Hold ``message`` until its cell is known; ``False`` when the parking is full."""
        if len(self.parked) >= self.max_parked:
            return False
        self.parked.append(message)
        return True

    def unpark_all(self) -> list[DelegateRequest]:
        """Take every parked request out, oldest first (the machine re-admits or re-parks)."""
        parked = list(self.parked)
        self.parked.clear()
        return parked

    def admit(self, message: DelegateRequest, cell_ids: set[int]) -> DelegateCall | WireError | str:
        """Start the call ``message`` asks for, in the cell whose id set is ``cell_ids``.

        Returns the call to run, the error to reply with (over the pending-call limit), or the
        reason the connection fails (the host reused an id).
        """
        delegate_id = message.id
        active = self._active
        if delegate_id in active or not self._recent.add(delegate_id):
            return f"duplicate code-mode delegate request ID {DelegateRequestId(delegate_id)!r}"
        if len(active) >= self.max_active:
            return WireError(
                f"code-mode host exceeded the limit of {self.max_active} pending delegate calls"
            )
        # A plain int: the shell names tasks with it ("delegate 7 tools.add").
        request = message.request
        call = DelegateCall(int(delegate_id), message.session_id, request.cell_id, request)
        active[delegate_id] = call
        self._owners[delegate_id] = cell_ids
        cell_ids.add(delegate_id)
        return call

    def finish(self, call: DelegateCall) -> bool:
        """Retire ``call`` for its reply; ``False`` if it is not active (revoked or answered)."""
        if self._active.get(call.id) is not call:
            return False
        del self._active[call.id]
        self._owners.pop(call.id).discard(call.id)
        return True

    def cancel(self, delegate_id: int) -> DelegateCall | None:
        """``delegate/cancel``: drop a parked request, or revoke and return an active call."""
        parked = self.parked
        for index, message in enumerate(parked):
            if message.id == delegate_id:
                del parked[index]
                return None
        call = self._active.pop(delegate_id, None)
        if call is not None:
            self._owners.pop(delegate_id).discard(delegate_id)
        return call

    def revoke_cell(self, cell_ids: set[int]) -> list[DelegateCall]:
        """Revoke every active call of the cell whose id set is ``cell_ids``; return them."""
        active = self._active
        owners = self._owners
        calls = []
        for delegate_id in cell_ids:
            call = active.pop(delegate_id, None)
            if call is not None:
                del owners[delegate_id]
                calls.append(call)
        cell_ids.clear()
        return calls

    def revoke_all(self) -> list[DelegateCall]:
        """Forget every call and parked request (the connection failed); return the calls."""
        calls = list(self._active.values())
        self._active.clear()
        self._owners.clear()
        self.parked.clear()
        return calls


def encode_reply(delegate_id: int, result: WireOk[Any] | WireError) -> tuple[bytes, bool]:
    """The ``delegate/response`` payload for ``result``, and whether it takes the bulk lane.

    A result that cannot be sent (not JSON, nested too deeply, over the frame limit) becomes an
    error reply, so only this call is affected. Tool results and errors take the bulk lane (when
    there is one); notification acknowledgements stay on the control lane.
    """
    response_id = DelegateRequestId(delegate_id)
    try:
        payload = encode_client_message(DelegateResponse(response_id, result))
    except Exception as exc:  # a result we cannot send must cost this call only
        text = _safe_text(exc)
        reason = (
            f"code-mode delegate response exceeds the IPC frame limit: {text}"
            if isinstance(exc, EncodeError) and "exceeds" in text
            else f"code-mode delegate result is not valid JSON: {text}"
        )
        return encode_client_message(DelegateResponse(response_id, WireError(reason))), True
    return payload, isinstance(result, WireError) or type(result.value) is ToolResult


def _safe_text(exc: BaseException) -> str:
    """``str(exc)``, or its type name when even that fails."""
    try:
        text = str(exc)
    except Exception:
        return type(exc).__name__
    return text or type(exc).__name__
