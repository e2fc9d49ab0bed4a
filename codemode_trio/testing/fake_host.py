"""FakeHost: the host side of the protocol, scripted by a test.

.. code-block:: python

    async with open_fake_connection() as (host, conn):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.answer_open)
            session = await conn.start_session()
        ...
        request = await host.receive()              # the client's next message, decoded
        await host.send(OperationResponse(...))    # any host message, encoded for you

Client messages are judged by the same reader the reference host uses
(:class:`~codemode_trio.protocol.host_protocol.ClientMessageReader`): strict decoding, the hello
first and only once, and no reuse of a request id in flight or among the last 4096 answered. A
client that breaks any of these fails the test with a
:class:`~codemode_trio.ClientProtocolViolation` carrying the host's text, as the real host would
kill the connection. What the fake host *sends* is up to the test, so it can script any
answer, valid or not.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio
import trio.testing

from .._groups import unwrapping_nursery
from ..client.config import DEFAULT_CONFIG, ConnectionConfig
from ..client.connection import Connection, open_connection
from ..protocol.codec import encode_host_message
from ..protocol.content import Notification, RuntimeResponse, ToolCall, WaitOutcome
from ..protocol.framing import encode_frame
from ..protocol.handshake import ALL_CAPABILITIES
from ..protocol.host_protocol import ClientMessageReader, ConnectionClosed
from ..protocol.ids import DelegateRequestId, RequestId
from ..protocol.messages import (
    CellClosed,
    ClientMessage,
    ConnectionHello,
    ConnectionReady,
    DelegateCancel,
    DelegateRequest,
    ExecutionStarted,
    HostMessage,
    HostResponse,
    InitialResponse,
    OpenSessionRequest,
    OperationRequest,
    OperationResponse,
    SessionClosedResponse,
    SessionReady,
    WaitCompleted,
    WireError,
    WireOk,
)

__all__ = ["FakeHost", "open_fake_connection"]

M = TypeVar("M")


class FakeHost:
    """The host end of an in-memory connection; every frame passes through the real codec."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._reader = ClientMessageReader()
        self._received_send, self._received = trio.open_memory_channel[ClientMessage](math.inf)
        #: Every client message received so far, in order.
        self.log: list[ClientMessage] = []
        self.closed = False

    # ----------------------------------------------------------------------- plumbing

    async def run_reader(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read and decode client frames until EOF (run it in a nursery)."""
        task_status.started()
        with self._received_send:
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if data:
                    self._reader.receive_data(data)
                else:
                    self._reader.receive_eof()
                while (message := self._reader.next_message()) is not None:
                    if isinstance(message, ConnectionClosed):
                        return
                    self.log.append(message)
                    self._received_send.send_nowait(message)

    async def receive(self) -> ClientMessage:
        """The client's next message (waits for it)."""
        return await self._received.receive()

    async def receive_a(self, kind: type[M]) -> M:
        """The next message, asserted to be of type ``kind``."""
        message = await self.receive()
        assert isinstance(message, kind), f"expected {kind.__name__}, got {message!r}"
        return message

    def receive_nowait(self) -> ClientMessage | None:
        """The next message if one already arrived, else ``None``."""
        try:
            return self._received.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return None

    async def assert_quiet(self) -> None:
        """Let every task settle, then assert the client sent nothing more."""
        await trio.testing.wait_all_tasks_blocked()
        extra = self.receive_nowait()
        assert extra is None, f"client sent an unexpected frame: {extra!r}"

    async def send(self, message: HostMessage) -> None:
        """Encode and send one host message."""
        if type(message) is OperationResponse or type(message) is InitialResponse:
            # An answered request's id joins the host's window of recently finished ids.
            self._reader.finish_request(message.id)
        await self.send_payload(encode_host_message(message))

    async def send_payload(self, payload: bytes) -> None:
        """Send raw payload bytes as one frame (for malformed-input tests)."""
        await self.stream.send_all(encode_frame(payload))

    async def send_bytes(self, data: bytes) -> None:
        """Send raw bytes, not framed."""
        await self.stream.send_all(data)

    async def close(self) -> None:
        """Close the host's side: the client sees EOF."""
        self.closed = True
        await self.stream.aclose()

    # ----------------------------------------------------------------------- protocol steps

    async def handshake(self, capabilities: Iterable[str] = ALL_CAPABILITIES) -> ConnectionHello:
        """Read the hello and answer ``connection/ready`` granting ``capabilities`` ∩ offered."""
        hello = await self.receive_a(ConnectionHello)
        offered = set(hello.optional_capabilities) | set(hello.required_capabilities)
        granted = tuple(sorted(offered & set(capabilities)))
        await self.send(ConnectionReady(1, granted))
        return hello

    async def reply(self, request_id: int, value: HostResponse) -> None:
        """Answer request ``request_id`` with ``value``."""
        await self.send(OperationResponse(RequestId(request_id), WireOk(value)))

    async def reply_error(self, request_id: int, message: str) -> None:
        """Answer request ``request_id`` with an error."""
        await self.send(OperationResponse(RequestId(request_id), WireError(message)))

    async def answer_open(self) -> OperationRequest:
        """Read a ``session/open`` and answer ``session/ready``."""
        request = await self.receive_a(OperationRequest)
        assert isinstance(request.request, OpenSessionRequest), request
        await self.reply(request.id, SessionReady(request.request.session_id))
        return request

    async def start(self, request_id: int, cell_id: str) -> None:
        """Answer an execute with ``execution/started``."""
        await self.reply(request_id, ExecutionStarted(cell_id))

    async def initial(self, request_id: int, response: RuntimeResponse) -> None:
        """Send the ``execute/initialResponse`` for execute ``request_id``."""
        await self.send(InitialResponse(RequestId(request_id), WireOk(response)))

    async def wait_completed(
        self, request_id: int, response: RuntimeResponse, *, live: bool = True
    ) -> None:
        """Answer a wait or terminate with ``wait/completed``."""
        await self.reply(request_id, WaitCompleted(WaitOutcome(live, response)))

    async def session_closed(self, request_id: int, session_id: str) -> None:
        """Answer a shutdown with ``session/closed``."""
        await self.reply(request_id, SessionClosedResponse(session_id))

    async def cell_closed(self, session_id: str, cell_id: str) -> None:
        """Send ``cell/closed``."""
        await self.send(CellClosed(session_id, cell_id))

    async def invoke(
        self,
        delegate_id: int,
        session_id: str,
        cell_id: str,
        name: str = "tool",
        input: Any = None,
        *,
        call_id: str = "tool-1",
    ) -> None:
        """Send a ``tool/invoke`` delegate request."""
        call = ToolCall(cell_id, call_id, name, None, "function", input)
        await self.send(DelegateRequest(DelegateRequestId(delegate_id), session_id, call))

    async def notify(
        self, delegate_id: int, session_id: str, cell_id: str, text: str, *, call_id: str = "call"
    ) -> None:
        """Send a ``notification/send`` delegate request."""
        note = Notification(call_id, cell_id, text)
        await self.send(DelegateRequest(DelegateRequestId(delegate_id), session_id, note))

    async def cancel_delegate(self, delegate_id: int) -> None:
        """Send ``delegate/cancel``."""
        await self.send(DelegateCancel(DelegateRequestId(delegate_id)))


@asynccontextmanager
async def open_fake_connection(
    *,
    capabilities: Iterable[str] = ALL_CAPABILITIES,
    config: ConnectionConfig = DEFAULT_CONFIG,
    transcript: str | None = None,
) -> AsyncIterator[tuple[FakeHost, Connection]]:
    """A :class:`Connection` wired to a :class:`FakeHost`, handshake done.

    ``capabilities`` are what the fake host grants (of those the client offers).
    """
    client_stream, host_stream = trio.testing.memory_stream_pair()
    host = FakeHost(host_stream)
    async with unwrapping_nursery() as nursery:
        await nursery.start(host.run_reader)
        nursery.start_soon(host.handshake, tuple(capabilities))
        async with open_connection(client_stream, config=config, transcript=transcript) as conn:
            yield host, conn
        nursery.cancel_scope.cancel()
