"""Streams that carry a :class:`~.plan.FaultPlan` out between a client and its host.

:class:`FaultyStream` wraps the stream a client talks to its host through,
:class:`FaultyHostStream` the stream a host serves (the hook for ``--fault``). In both, what the
client writes passes unchanged and what the host sends goes through the plan.
"""

from __future__ import annotations

import trio

from .plan import Action, Fault, FaultPlan

__all__ = ["FaultyHostStream", "FaultyStream"]


class _PlannedStream(trio.abc.Stream):
    """What both streams share: the stream they wrap, their plan and the faults that fired."""

    def __init__(self, peer: trio.abc.Stream, faults: tuple[Fault, ...]) -> None:
        self._peer = peer
        self._plan = FaultPlan(faults)
        self.closed = False
        self.stalled = False
        self.injected: list[Fault] = []

    async def wait_send_all_might_not_block(self) -> None:
        """As the wrapped stream does."""
        await self._peer.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Close the wrapped stream."""
        self.closed = True
        await self._peer.aclose()


class FaultyStream(_PlannedStream):
    """``host`` as the client sees it once ``faults`` are applied to the host's output.

    ``closed`` ends the stream for the client (EOF, as a dropped connection); ``stalled``
    makes reads block and writes vanish, as a host that stopped reading and writing does.
    ``injected`` lists the faults that fired, each once, in order.
    """

    def __init__(self, host: trio.abc.Stream, faults: tuple[Fault, ...]) -> None:
        super().__init__(host, faults)
        self._ready = bytearray()
        self._pending: list[Action] = self._plan.start()

    async def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            fault = action.fault
            if fault is not None and action.kind != "pause" and fault not in self.injected:
                self.injected.append(fault)
            if action.kind == "send":
                self._ready += action.data
            elif action.kind == "pause":
                await trio.sleep(action.seconds)
            elif action.kind == "stall":
                self.stalled = True
            else:  # close, or exit: to a stream both are the end of the connection
                self.closed = True
                await trio.aclose_forcefully(self._peer)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next bytes for the client, after the plan had its way with them."""
        while True:
            if self._pending:
                actions, self._pending = self._pending, []
                await self._apply(actions)
            if self._ready:
                size = len(self._ready) if max_bytes is None else max_bytes
                data = bytes(self._ready[:size])
                del self._ready[:size]
                return data
            if self.closed:
                return b""
            if self.stalled:
                await trio.sleep_forever()
            data = bytes(await self._peer.receive_some(max_bytes))
            if not data:
                # The host's own EOF: whatever the plan still holds is a cut-off frame.
                self.closed = True
                return b""
            self._pending = self._plan.host_bytes(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Pass the client's bytes to the host (dropped while stalled)."""
        if self.closed:
            raise trio.BrokenResourceError("the connection was dropped by an injected fault")
        if self.stalled:
            await trio.lowlevel.checkpoint()
            return
        await self._peer.send_all(data)


class FaultyHostStream(_PlannedStream):
    """A host's own stream with ``faults`` applied to what the host writes into it.

    The hook for a host shell: wrap the connection's stream before serving it, e.g.
    ``serve_connection(FaultyHostStream(stream, parse_faults(spec)), runtime)``. A dropped
    connection closes ``client`` and fails the host's next write; a stall swallows the host's
    writes and blocks its reads, as a wedged peer would.

    ``ended_by`` is the fault that ended the connection, if one did, and ``exited`` tells a
    ``silent-exit-after`` (the host process should exit 0 saying nothing) from a drop.
    """

    def __init__(self, client: trio.abc.Stream, faults: tuple[Fault, ...]) -> None:
        super().__init__(client, faults)
        self._started = False
        self.ended_by: Fault | None = None
        self.exited = False

    async def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            fault = action.fault
            if fault is not None and action.kind != "pause" and fault not in self.injected:
                self.injected.append(fault)
            if action.kind == "send":
                await self._peer.send_all(action.data)
            elif action.kind == "pause":
                await trio.sleep(action.seconds)
            elif action.kind == "stall":
                self.stalled = True
                return
            else:
                self.closed = True
                self.ended_by = fault
                self.exited = action.kind == "exit"
                await trio.aclose_forcefully(self._peer)
                return

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write the host's bytes to the client through the plan."""
        if not self._started:
            self._started = True
            await self._apply(self._plan.start())
        if self.closed:
            raise trio.BrokenResourceError("the connection was dropped by an injected fault")
        if self.stalled:
            await trio.lowlevel.checkpoint()
            return
        await self._apply(self._plan.host_bytes(bytes(data)))
        if self.closed:
            raise trio.BrokenResourceError("the connection was dropped by an injected fault")

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The client's bytes for the host (nothing more once stalled or dropped)."""
        if self.closed:
            return b""
        if self.stalled:
            await trio.sleep_forever()
        data = bytes(await self._peer.receive_some(max_bytes))
        if self.stalled:
            await trio.sleep_forever()
        return data
