"""The fastest Trio client we can write: the floor for any client that runs on Trio.

It speaks exactly as :class:`_minimal_client.MinimalClient` does (same messages, same echo
answers, same JSON handling) but waits for bytes the Trio way: the host's pipes are
non-blocking and one task reads, parks in :func:`trio.lowlevel.wait_readable` when the pipe is
empty, and answers each ``tool/invoke`` in the same step that read it. No streams, no
channels, no other tasks, no protocol state beyond a request counter.

What it measures: how much of the blocking client's rate any Trio client can reach on this
machine, because a Trio client must at least go through the scheduler and epoll once per
round trip. codemode-trio's distance to *this* client is the cost of its structure (the
protocol machine, delegate tasks, checks); this client's distance to the blocking one is the
cost of Trio.

With ``task_per_call=True`` it answers each ``tool/invoke`` from a task of its own, spawned in a
nursery and run inside its own :class:`trio.CancelScope`: the least a client can do that keeps
codemode-trio's shape (one task per delegate call, each cancellable on its own). The distance
from plain to task-per-call is the price of that shape, which no client of that shape avoids.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio
from _minimal_client import (  # beside this script
    ECHO_TOOL,
    HELLO,
    MinimalClientError,
    delegate_answer,
    encode_frame,
    execute_request,
    final_result,
    response_value,
)

__all__ = ["MinimalTrioClient"]


class MinimalTrioClient:
    """One host process and one session, driven by the calling Trio task alone.

    Use :meth:`open` (an async context manager); leaving it closes stdin and reaps the host.
    """

    def __init__(
        self, process: trio.Process, session_id: str, *, task_per_call: bool = False
    ) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.session_id = session_id
        self._process = process
        # Trio opened the pipes non-blocking; this client uses their fds directly.
        self._write_fd = process.stdin.fileno()  # type: ignore[attr-defined]
        self._read_fd = process.stdout.fileno()  # type: ignore[attr-defined]
        self._buffer = bytearray()
        self._next_id = 1
        self._task_per_call = task_per_call
        self._nursery: trio.Nursery | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, host_path: str, *, session_id: str = "bench", task_per_call: bool = False
    ) -> AsyncIterator[MinimalTrioClient]:
        """Spawn the host, handshake and open a session; yield the client."""
        process = await trio.lowlevel.open_process(
            [host_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            client = cls(process, session_id, task_per_call=task_per_call)
            await client._send(HELLO)
            if (await client._receive())["type"] != "connection/ready":
                raise MinimalClientError("handshake refused")
            await client._response(
                await client._request({"method": "session/open", "sessionId": session_id})
            )
            yield client
        finally:
            # Shielded and bounded: the host exits at once on EOF, and is killed if not.
            with trio.move_on_after(5, shield=True) as waited:
                await process.stdin.aclose()  # type: ignore[union-attr]
                await process.wait()
            if waited.cancelled_caught:
                process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()
                await process.stdout.aclose()  # type: ignore[union-attr]

    @property
    def pid(self) -> int:
        """The host's process id."""
        return self._process.pid

    async def _send(self, message: dict[str, Any]) -> None:
        data = memoryview(encode_frame(message))
        while data:
            try:
                data = data[os.write(self._write_fd, data) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._write_fd)

    async def _receive(self) -> dict[str, Any]:
        buffer = self._buffer
        while True:
            if len(buffer) >= 4:
                length = int.from_bytes(buffer[:4], "little")
                if len(buffer) >= 4 + length:
                    payload = bytes(buffer[4 : 4 + length])
                    del buffer[: 4 + length]
                    message: dict[str, Any] = json.loads(payload)
                    return message
            try:
                data = os.read(self._read_fd, 65536)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._read_fd)
                continue
            if not data:
                raise MinimalClientError("code-mode host closed its stdout")
            buffer += data

    async def _request(self, request: dict[str, Any]) -> int:
        request_id = self._next_id
        self._next_id += 1
        await self._send({"type": "operation/request", "id": request_id, "request": request})
        return request_id

    async def _response(self, request_id: int) -> dict[str, Any]:
        while True:
            message = await self._receive()
            value = response_value(message, request_id)
            if value is not None:
                return value
            await self._handle_other(message)

    async def _handle_other(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "delegate/request":
            if self._nursery is not None:
                self._nursery.start_soon(self._answer_in_own_task, message)
            else:
                await self._send(delegate_answer(message))
        elif kind not in ("cell/closed", "delegate/cancel"):
            raise MinimalClientError(f"unexpected frame {message!r:.200}")

    async def _answer_in_own_task(self, message: dict[str, Any]) -> None:
        with trio.CancelScope():
            await self._send(delegate_answer(message))

    async def run(
        self,
        source: str,
        *,
        tools: Sequence[dict[str, Any]] = (ECHO_TOOL,),
        yield_time_ms: int | None = None,
    ) -> dict[str, Any]:
        """Execute ``source`` and return the ``Result`` of its initial response."""
        request_id = await self._request(
            execute_request(self.session_id, source, tools, yield_time_ms, self._next_id)
        )
        if not self._task_per_call:
            return await self._run_cell(request_id)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                result = await self._run_cell(request_id)
            finally:
                self._nursery = None
        return result

    async def _run_cell(self, request_id: int) -> dict[str, Any]:
        started = await self._response(request_id)
        if started.get("type") != "execution/started":
            raise MinimalClientError(f"unexpected execute response {started!r}")
        while True:
            message = await self._receive()
            if message["type"] == "execute/initialResponse" and message["id"] == request_id:
                return final_result(message)
            await self._handle_other(message)
