"""The reference host's ``dual-websocket-v1`` lane: its pairing deadline and what it carries.

The host shell runs in-process over memory streams (the scripted runtime of ``conftest``);
the bulk stream is handed to the shell's :class:`~codemode_trio.host.bulk.BulkPairing` the way
the WebSocket listener does once a client opens ``/bulk/{token}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import codemode_trio as cm
from codemode_trio.connect.websocket import WEBSOCKET_CAPABILITIES
from codemode_trio.host.bulk import PAIRING_TIMEOUT_S, BulkPairing, BulkRegistry
from codemode_trio.host.runtime import CellHooks
from codemode_trio.host.server import serve_connection
from codemode_trio.protocol import (
    ConnectionReady,
    TextItem,
    ToolDefinition,
    decode_host_message,
    encode_client_frame,
)
from codemode_trio.protocol.handshake import build_hello
from codemode_trio.protocol.ids import RequestId
from codemode_trio.protocol.lanes import DUAL_WEBSOCKET, WRONG_LANE_FROM_CLIENT
from codemode_trio.protocol.messages import OpenSessionRequest, OperationRequest

from .conftest import Served

Tools = Sequence[ToolDefinition]


@asynccontextmanager
async def connect_dual(served: Served, *, pair: bool = True) -> AsyncIterator[cm.Connection]:
    """A two-lane client connection to the host shell; ``pair=False`` never delivers bulk."""
    control_client, control_host = trio.testing.memory_stream_pair()
    bulk_client, bulk_host = trio.testing.memory_stream_pair()
    pairing = BulkPairing()

    async def host() -> None:
        served.status = await serve_connection(
            control_host, served.runtime, stderr=served.stderr, bulk=pairing
        )
        pairing.finish()
        served.stopped.set()
        await control_host.aclose()  # as the listener closes the WebSockets
        await bulk_host.aclose()

    async def connect_bulk(token: str) -> trio.abc.Stream:
        assert token == pairing.token
        if pair:
            assert pairing.attach(bulk_host)
        return bulk_client

    async with trio.open_nursery() as nursery:
        nursery.start_soon(host)
        async with cm.open_connection(
            control_client, capabilities=WEBSOCKET_CAPABILITIES, connect_bulk=connect_bulk
        ) as conn:
            yield conn
        with trio.fail_after(5):
            await served.stopped.wait()


def tools(log: list[str], cancelled: trio.Event | None = None) -> cm.ToolRegistry:
    registry = cm.ToolRegistry()

    @registry.function(description="Echo")
    async def echo(value: int) -> int:
        return value

    @registry.function(description="Never returns until cancelled")
    async def hang() -> None:
        try:
            await trio.sleep_forever()
        finally:
            log.append("hang cancelled")
            if cancelled is not None:
                cancelled.set()

    @registry.on_notification
    async def note(n: cm.Notification) -> None:
        log.append(f"note {n.text}")

    return registry


async def test_a_paired_connection_outlives_the_pairing_deadline(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    @served.runtime.script
    async def calls(hooks: CellHooks, tools: Tools) -> str | None:
        hooks.notify("start")
        hooks.emit(TextItem(repr(await hooks.call_tool("echo", {"value": 7}))))
        return None

    log: list[str] = []
    async with connect_dual(served) as conn, conn.open_session(tools(log)) as session:
        assert DUAL_WEBSOCKET in conn.capabilities
        await trio.sleep(PAIRING_TIMEOUT_S * 3)
        response = await session.run("calls")
        assert response.text == "7"
        assert conn.alive
    assert log == ["note start"]
    assert served.status == 0


async def test_a_terminate_cancels_a_pending_tool_call_over_the_bulk_lane(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    started = trio.Event()

    @served.runtime.script
    async def hangs(hooks: CellHooks, tools: Tools) -> str | None:
        started.set()
        await hooks.call_tool("hang", {})  # the terminate ends the script here
        return None

    log: list[str] = []
    cancelled = trio.Event()
    async with connect_dual(served) as conn, conn.open_session(tools(log, cancelled)) as session:
        cell = await session.execute("hangs", yield_time_ms=100)
        assert (await cell.initial_response()).kind == "yielded"
        await started.wait()
        outcome = await session.terminate(cell.cell_id)
        assert outcome.response.kind == "terminated"
        with trio.fail_after(5):
            await cancelled.wait()  # the host's delegate/cancel came on the bulk lane
        assert conn.alive
    assert log == ["hang cancelled"]


async def test_a_bulk_lane_that_never_arrives_ends_the_connection(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    async with connect_dual(served, pair=False) as conn:
        start = trio.current_time()
        reason = await conn.wait_failed()
        assert trio.current_time() - start == pytest.approx(PAIRING_TIMEOUT_S)
    assert reason.startswith("code-mode host closed its stdout")
    assert "timed out pairing code-mode host bulk websocket" in served.stderr.getvalue()


def test_a_pairing_token_is_redeemed_once_at_its_own_path() -> None:
    registry = BulkRegistry()
    pairing = registry.open("/base/")
    other = registry.open("/")
    assert pairing.token != other.token
    assert len(pairing.token) == 36  # a UUID: 122 random bits
    assert registry.redeem(f"/elsewhere/bulk/{pairing.token}") is None
    assert registry.redeem("/base/bulk/not-a-token") is None
    assert registry.redeem(f"/base/bulk/{pairing.token}") is pairing
    assert registry.redeem(f"/base/bulk/{pairing.token}") is None  # used up
    registry.close(other)
    assert registry.redeem(f"/bulk/{other.token}") is None  # its connection ended
    assert other.finished.is_set()
    assert BulkRegistry.is_bulk_path("/bulk/x") and not BulkRegistry.is_bulk_path("/bulk/x/y")


async def test_a_request_on_the_bulk_lane_ends_the_connection_with_the_reference_text(
    served: Served, autojump_clock: trio.testing.MockClock
) -> None:
    control_client, control_host = trio.testing.memory_stream_pair()
    bulk_client, bulk_host = trio.testing.memory_stream_pair()
    pairing = BulkPairing()
    async with trio.open_nursery() as nursery:

        async def host() -> None:
            served.status = await serve_connection(
                control_host, served.runtime, stderr=served.stderr, bulk=pairing
            )

        nursery.start_soon(host)
        await control_client.send_all(encode_client_frame(build_hello(optional=[DUAL_WEBSOCKET])))
        ready = decode_host_message((await control_client.receive_some())[4:])
        assert isinstance(ready, ConnectionReady)
        assert ready.bulk_connection_token == pairing.token
        assert pairing.attach(bulk_host)
        # A request belongs on control.
        request = OperationRequest(RequestId(1), OpenSessionRequest("s"))
        await bulk_client.send_all(encode_client_frame(request))
    assert served.status == 1
    assert served.stderr.getvalue() == f"Error: {WRONG_LANE_FROM_CLIENT}\n"
