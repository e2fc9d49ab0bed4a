"""A delegate can fail in any way; only its own call is affected, and never after a cancel."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.protocol import (
    DelegateCancel,
    DelegateRequest,
    DelegateRequestId,
    DelegateResponse,
    ToolCall,
    WireError,
    encode_host_frame,
)
from codemode_trio.testing import open_fake_connection

from .conftest import open_session, start_cell


def invoke(delegate_id: int, name: str = "tool", arguments: Any = None) -> bytes:
    call = ToolCall("1", f"tool-{delegate_id}", name, None, "function", arguments)
    return encode_host_frame(DelegateRequest(DelegateRequestId(delegate_id), "session-1", call))


def cancel(delegate_id: int) -> bytes:
    return encode_host_frame(DelegateCancel(DelegateRequestId(delegate_id)))


class CountingDelegate:
    def __init__(self, result: Any = "done") -> None:
        self.invocations = 0
        self.result = result

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        self.invocations += 1
        return self.result

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        pass


async def test_a_call_cancelled_in_the_same_read_is_never_invoked_and_never_answered() -> None:
    delegate = CountingDelegate()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        await start_cell(host, session, 2, "1")
        await host.send_bytes(invoke(1) + cancel(1))
        await host.assert_quiet()
        assert delegate.invocations == 0
        assert conn.alive


class RacingDelegate:
    """Finishes after ``call.input`` shielded checkpoints, noting whether it had been revoked.

    Inside a revoked call's cancel scope the effective deadline is -inf, so at the moment it
    returns the tool knows whether the client had already read the host's cancel.
    """

    def __init__(self) -> None:
        self.revoked_at_return: dict[str, bool] = {}

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        with trio.CancelScope(shield=True):
            for _ in range(call.input["k"]):
                await trio.lowlevel.checkpoint()
        self.revoked_at_return[call.call_id] = trio.current_effective_deadline() == -math.inf
        return "finished"

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        pass


async def test_no_reply_after_delegate_cancel_however_completion_races_it() -> None:
    delegate = RacingDelegate()
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, delegate)
        await start_cell(host, session, 2, "1")
        for delegate_id in range(1, 201):
            await host.send_bytes(invoke(delegate_id, arguments={"k": delegate_id % 5}))
            for _ in range(delegate_id % 3):
                await trio.lowlevel.checkpoint()
            await host.send_bytes(cancel(delegate_id))
        await trio.testing.wait_all_tasks_blocked()
        replied = {message.id for message in host.log if isinstance(message, DelegateResponse)}
        for delegate_id in range(1, 201):
            revoked = delegate.revoked_at_return.get(f"tool-{delegate_id}")
            if revoked is None:
                assert delegate_id not in replied  # never invoked, never answered
            elif revoked:
                assert delegate_id not in replied, f"reply after cancel for {delegate_id}"
        assert conn.alive


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class BrokenMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot iterate")

    def __len__(self) -> int:
        return 1

    def items(self) -> Any:
        raise RuntimeError("cannot list items")


class FaultyDelegate:
    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        if call.name == "bad_str":
            raise BadStr
        if call.name == "bad_mapping":
            return BrokenMapping()
        if call.name == "not_json":
            return object()
        return "fine"

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        pass


@pytest.mark.parametrize(
    ("name", "message_start"),
    [
        ("bad_str", "code-mode delegate task failed: BadStr"),
        ("bad_mapping", "code-mode delegate result is not valid JSON: "),
        ("not_json", "code-mode delegate result is not valid JSON: "),
    ],
)
async def test_a_delegate_whose_failure_is_itself_broken_still_gets_an_error_reply(
    name: str, message_start: str
) -> None:
    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, FaultyDelegate())
        await start_cell(host, session, 2, "1")
        await host.send_bytes(invoke(1, name) + invoke(2, "fine"))
        replies = {}
        for _ in range(2):
            reply = await host.receive_a(DelegateResponse)
            replies[reply.id] = reply.result
        assert isinstance(replies[1], WireError)
        assert replies[1].message.startswith(message_start)
        assert replies[2] == cm.protocol.WireOk(cm.protocol.ToolResult("fine"))
        assert conn.alive


class ExitingDelegate:
    def __init__(self, exception: BaseException) -> None:
        self.exception = exception
        self.closed: list[str] = []

    async def invoke_tool(self, call: cm.ToolCall) -> Any:
        raise self.exception

    async def notify(self, note: cm.Notification) -> None:
        pass

    def cell_closed(self, cell_id: str) -> None:
        self.closed.append(cell_id)


@pytest.mark.parametrize("exception", [SystemExit(3), KeyboardInterrupt()])
async def test_a_base_exception_from_a_tool_comes_out_of_the_connection_as_itself(
    exception: BaseException,
) -> None:
    delegate = ExitingDelegate(exception)
    with pytest.raises(type(exception)) as info:
        async with open_fake_connection() as (host, conn):
            session = await open_session(host, conn, delegate)
            cell = await start_cell(host, session, 2, "1")
            await host.send_bytes(invoke(1))
            await cell.initial_response()
    assert info.value is exception
    assert delegate.closed == ["1"]  # the usual cleanup ran: every cell closed once
    assert not conn.alive


async def test_a_registry_without_tools_still_gets_its_notifications() -> None:
    # A ToolRegistry with no tools is falsy (it has a length); it is still the delegate.
    tools = cm.ToolRegistry()
    notes: list[str] = []

    @tools.on_notification
    async def on_note(note: cm.Notification) -> None:
        notes.append(note.text)

    async with open_fake_connection() as (host, conn):
        session = await open_session(host, conn, tools)
        await start_cell(host, session, 2, "1")
        await host.notify(1, "session-1", "1", "hello")
        await host.receive_a(DelegateResponse)
        assert notes == ["hello"]
