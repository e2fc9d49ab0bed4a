"""Run one scenario against one host and record what the host did.

The record (:class:`Observation`) holds, for each :class:`~.steps.Expect` step, the frames
read there, then whatever the host sent after its input was closed, how the exchange ended,
the exit status and the first line of stderr. Durations are replaced by a marker while
recording, because they differ from run to run while their presence does not.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from .client_rules import FrameSplitter
from .scenario import Scenario
from .steps import CloseInput, Expect, Send
from .targets import HostTarget

__all__ = ["DURATION", "FRAME_TIMEOUT_S", "Observation", "decode_frame", "normalise", "observe"]

DURATION: Final = "<ns>"
"""What a duration field's value is recorded as."""

_DURATION_KEYS: Final = frozenset({"code_mode_host_duration_ns", "result_buffered_for_ns"})
# How long one Expect step waits for its frames. The scenarios are built to finish in well
# under a second each on the reference host; the margin is for a loaded machine.
FRAME_TIMEOUT_S: Final = 15.0
# After its input is closed a host exits within milliseconds (SPEC §1); this only bounds a
# host that does not.
_EXIT_TIMEOUT_S: Final = 5.0
# How long a network host may take to accept a connection (and upgrade it, for a WebSocket).
_CONNECT_TIMEOUT_S: Final = 10.0
_STDERR_KEEP: Final = 65536
_STDERR_SETTLE_S: Final = 1.0
# Frames larger than this are recorded as their size only: a scenario never compares a
# payload that large, and keeping it would hold megabytes per record.
_KEEP_FRAME_BYTES: Final = 1 << 20


@attrs.frozen
class Observation:
    """What a host sent and did during one scenario.

    ``ended`` is ``"complete"`` when every step ran, ``"closed"`` when the host closed its
    output while a step still expected frames, and ``"timeout"`` when frames (or the exit)
    did not come in time. ``exit_status`` and ``stderr`` are ``None`` for a TCP host;
    ``stderr`` is also ``None`` when the host exited 0, since it then holds only log lines.
    ``cause`` is the detail line of a fatal error report (after ``Caused by:``): shown to
    explain a difference, never compared, since its wording is serde's.
    """

    groups: tuple[tuple[Any, ...], ...]
    trailing: tuple[Any, ...]
    ended: str
    exit_status: int | None
    stderr: str | None
    cause: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready form (for the reference file)."""
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Observation:
        """Read back what :meth:`to_json` wrote."""
        return cls(
            groups=tuple(tuple(group) for group in data["groups"]),
            trailing=tuple(data["trailing"]),
            ended=data["ended"],
            exit_status=data["exit_status"],
            stderr=data["stderr"],
            cause=data.get("cause"),
        )


def normalise(value: Any) -> Any:
    """``value`` with every duration replaced by :data:`DURATION`."""
    if isinstance(value, dict):
        return {
            key: DURATION if key in _DURATION_KEYS and isinstance(item, int) else normalise(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [normalise(item) for item in value]
    return value


def decode_frame(payload: bytes, *, keep: float = _KEEP_FRAME_BYTES) -> Any:
    """A frame's payload as recorded: normalised JSON, or a note of its size past ``keep``."""
    if len(payload) > keep:
        return {"<large frame>": len(payload)}
    try:
        return normalise(json.loads(payload))
    except ValueError:
        return {"<not JSON>": payload[:200].decode("utf-8", "replace")}


class _Channel:
    """The byte stream to one host, plus its process when it is one."""

    def __init__(
        self,
        stream: trio.abc.Stream | None = None,
        *,
        send_message: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> None:
        self.process: trio.Process | None = None
        self.stream = stream
        # A WebSocket's: what sends one write of the scenario as one message.
        self.send_message = send_message
        self.stderr = bytearray()
        self.stderr_done = trio.Event()

    async def send_all(self, data: bytes) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            await self.process.stdin.send_all(data)
        elif self.send_message is not None:
            # Each write of the scenario one message, as the client wrote it.
            await self.send_message(data)
        else:
            assert self.stream is not None
            await self.stream.send_all(data)

    async def close_input(self) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            if self.process is not None:
                assert self.process.stdin is not None
                await self.process.stdin.aclose()
            elif isinstance(self.stream, trio.abc.HalfCloseableStream):
                await self.stream.send_eof()
            else:
                # A WebSocket has no half-close: its close frame is the client's EOF.
                assert self.stream is not None
                await self.stream.aclose()

    async def receive_some(self) -> bytes:
        source: trio.abc.ReceiveStream | None
        source = self.process.stdout if self.process is not None else self.stream
        assert source is not None
        try:
            return bytes(await source.receive_some(1 << 20))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    async def drain_stderr(self) -> None:
        assert self.process is not None
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.receive_some(65536):
            if len(self.stderr) < _STDERR_KEEP:
                self.stderr += chunk
        self.stderr_done.set()


@contextlib.asynccontextmanager
async def _connect(target: HostTarget) -> AsyncIterator[_Channel]:
    if target.url is not None:
        # The host's own WebSocket transport: every frame one binary message.
        from ..transport.websocket import connect_websocket  # only this target needs h11

        with trio.fail_after(_CONNECT_TIMEOUT_S):
            websocket = await connect_websocket(target.url)
        async with websocket:
            yield _Channel(websocket, send_message=websocket.send_message)
        return
    if target.address is not None:
        with trio.fail_after(_CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(*target.address)
        async with stream:
            yield _Channel(stream)
        return
    assert target.argv is not None
    process = await trio.lowlevel.open_process(
        list(target.argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    channel = _Channel()
    channel.process = process
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.drain_stderr)
            yield channel
            # The scenario is over: a host still running (it ignored EOF) is killed.
            with trio.move_on_after(_EXIT_TIMEOUT_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
            # A grandchild that inherited the pipe may hold stderr open after the host exits.
            with trio.move_on_after(_STDERR_SETTLE_S):
                await channel.stderr_done.wait()
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(_EXIT_TIMEOUT_S) as scope:
                scope.shield = True
                await process.wait()
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                await pipe.aclose()


async def _read_frames(channel: _Channel, send: trio.MemorySendChannel[Any]) -> None:
    """Split the host's output into frames until it ends (a cut-off tail is a frame too).

    A frame announced over the 64 MiB limit is recorded as such, and the rest of the output
    is read and dropped: a hostile length must not make the buffer grow without bound.
    """
    frames = FrameSplitter()
    async with send:
        # Past an oversize frame the output is still read (and dropped): the host never blocks.
        while data := await channel.receive_some():
            broken = frames.broken
            for payload in frames.feed(data):
                await send.send(decode_frame(payload))
            if broken is None and frames.broken is not None:
                await send.send({"<oversize frame>": frames.broken})
        if frames.broken is None and frames.buffer:
            await send.send({"<cut-off frame>": len(frames.buffer)})


async def observe(
    target: HostTarget, scenario: Scenario, *, frame_timeout: float = FRAME_TIMEOUT_S
) -> Observation:
    """Run ``scenario`` against a fresh connection to ``target`` and record the host's side."""
    groups: list[tuple[Any, ...]] = []
    trailing: list[Any] = []
    ended = "complete"
    async with _connect(target) as channel:
        # Unbounded on purpose: the host's output is read all the time, so that a host
        # blocked writing never stops reading what a step is still sending.
        send, frames = trio.open_memory_channel[Any](math.inf)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_frames, channel, send)
            closed_input = False
            for step in scenario.steps:
                if isinstance(step, Send):
                    data = step.payload()
                    size = step.chunk or len(data) or 1
                    try:
                        for start in range(0, len(data), size):
                            await channel.send_all(data[start : start + size])
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the host stopped reading: the next Expect shows what it did
                elif isinstance(step, CloseInput):
                    await channel.close_input()
                    closed_input = True
                else:
                    assert isinstance(step, Expect)
                    group: list[Any] = []
                    groups.append(tuple(group))
                    with trio.move_on_after(frame_timeout) as scope:
                        for _ in range(step.count):
                            try:
                                group.append(await frames.receive())
                            except trio.EndOfChannel:
                                ended = "closed"
                                break
                    groups[-1] = tuple(group)
                    if scope.cancelled_caught:
                        ended = "timeout"
                    if ended != "complete":
                        break
            if not closed_input:
                await channel.close_input()
            with trio.move_on_after(_EXIT_TIMEOUT_S) as scope:
                async for message in frames:
                    trailing.append(message)
            if scope.cancelled_caught and ended == "complete":
                ended = "timeout"
            nursery.cancel_scope.cancel()
    exit_status = None if channel.process is None else channel.process.returncode
    failed = channel.process is not None and exit_status != 0
    stderr, cause = _error_report(bytes(channel.stderr)) if failed else (None, None)
    return Observation(tuple(groups), tuple(trailing), ended, exit_status, stderr, cause)


def _error_report(data: bytes) -> tuple[str, str | None]:
    """The first line of stderr, and the line after ``Caused by:`` if there is one."""
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return "", None
    cause = None
    if "Caused by:" in lines[:-1]:
        cause = lines[lines.index("Caused by:") + 1]
    return lines[0], cause
