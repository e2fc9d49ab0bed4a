"""One client connection of a network listener, served in a process of its own.

``python -m codemode_trio.host.worker --fd N`` is spawned by the listener
(:mod:`codemode_trio.host.supervisor`) with one end of a control channel
(:class:`~codemode_trio.host.channel.WorkerChannel`) as descriptor ``N``. It loads V8, runs one
empty cell so that the first real one does not pay for V8's start, says ``ready``, and waits
for the one connection it will serve. Whatever that connection does to the process (a V8
fatal error, a crash, a leak) ends this process only: every other connection has its own.

What the listener sends, one message each:

- ``serve`` with the client's socket: a ``tcp://`` connection, or a ``ws://`` one the listener
  has upgraded already (``websocket``, with ``initial``, the bytes that followed the head, and
  the bulk lane's ``token`` and control ``path`` when the lane is offered);
- ``tls`` with the client's socket (``wss://``): the worker runs TLS and reads the request head
  itself, since a TLS session cannot change process; it tells the listener what it found,
  ``control`` (answered ``admit``, with the token, or ``busy``: HTTP 503) or ``bulk`` (answered
  ``relay`` with a socket joined to the worker that owns the token, or ``unknown``: HTTP 404);
  a bulk lane's worker then only relays bytes between TLS and that socket;
- ``bulk`` with an upgraded socket: this connection's bulk lane.

With ``--memory-mib N`` the worker checks its resident memory every
:data:`MEMORY_POLL_S` seconds and ends itself, with one line, once it passes N MiB: a
connection allocating without end (ArrayBuffers, which V8's heap cap does not count, as on
0.171.0, or thousands of cells at once) then loses its own connection, never the machine's
memory of the others. A worker also offers itself first to the kernel's OOM killer.

The worker writes at most one line to stderr about its connection, prefixed with the label
the listener gave it, and exits when the connection ends or the listener goes away.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import socket
import ssl
import sys
from collections.abc import Sequence
from typing import TextIO

import attrs
import trio

from .._groups import unwrapping_nursery
from ..faults.plan import Fault, parse_faults
from ..faults.stream import FaultyHostStream
from ..protocol.content import ContentItem
from ..transport.websocket import CLIENT_LABEL, UNFINISHED_MESSAGE_TIMEOUT_S, WebSocketFrameStream
from .admission import AdmissionPolicy, Respond, admit
from .bulk import BulkPairing
from .channel import ChannelClosed, WorkerChannel, close_fds, decode_bytes
from .httphead import answer_status, read_request_head, upgrade_response
from .runtime import JSON, MISSING, CellRuntime, Missing
from .server import serve_connection
from .supervisor import policy_from_message

__all__ = ["HELLO_TIMEOUT_S", "main", "serve_client"]

# What this worker's connection is called in the log, once the listener has said.
_label = "a spare worker"
#: How often (seconds) a worker with a memory cap reads its resident size.
MEMORY_POLL_S = 0.1

#: How long a client has, from its TCP connect, to have its hello answered.
HELLO_TIMEOUT_S = 10.0
# How long closing a finished connection may wait for the socket to take a close frame.
_CLOSE_S = 1.0


class _HelloWatch(trio.abc.Stream):
    """``stream``, noting when the host first sends (its answer to the hello)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.answered = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)
        self.answered.set()

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


def _one_line(text: str) -> str:
    """``text`` (a report of several lines: ``Error: ...``, ``Caused by: ...``) on one line."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


async def serve_client(
    stream: trio.abc.Stream,
    runtime: CellRuntime,
    *,
    label: str,
    hello_timeout: float = HELLO_TIMEOUT_S,
    hello_limit: float | None = None,
    faults: Sequence[Fault] = (),
    pairing: BulkPairing | None = None,
    log: TextIO | None = None,
) -> int | None:
    """Serve one client connection on ``stream``; close it; return the host's exit status.

    ``None`` when the host had not answered a hello ``hello_timeout`` seconds after the start
    (``hello_limit`` is the listener's whole allowance, for the log line). ``faults`` are
    injected into what the host sends; ``pairing`` is the bulk lane of a WebSocket. What the
    connection's end is worth saying goes to ``log`` (default stderr) as one line starting
    with ``label``.
    """
    out = sys.stderr if log is None else log
    faulty = FaultyHostStream(stream, tuple(faults)) if faults else None
    watched = _HelloWatch(faulty if faulty is not None else stream)
    captured = io.StringIO()
    status: int | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_hello_deadline, watched.answered, hello_timeout, nursery.cancel_scope)
        status = await serve_connection(watched, runtime, stderr=captured, bulk=pairing)
        nursery.cancel_scope.cancel()
    if pairing is not None:
        pairing.finish()
    with trio.move_on_after(_CLOSE_S, shield=True) as closing:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.aclose()
    if closing.cancelled_caught:
        await trio.aclose_forcefully(stream)
    report = _one_line(captured.getvalue())
    if status is None:
        limit = hello_timeout if hello_limit is None else hello_limit
        line = f"no hello within {limit:g} s; closed"
    elif faulty is not None and faulty.ended_by is not None:
        line = "" if faulty.exited else f"fault injected: {faulty.ended_by}"
    elif status:
        line = f"ended with status {status}" + (f": {report}" if report else "")
    else:
        line = report
    if line:
        print(f"{label}: {line}", file=out, flush=True)
    return status


async def _hello_deadline(answered: trio.Event, seconds: float, scope: trio.CancelScope) -> None:
    with trio.move_on_after(seconds):
        await answered.wait()
        return
    scope.cancel()


class _QuietHooks:
    """The hooks of the warm-up cell, which calls none of them."""

    def emit(self, item: ContentItem) -> None:
        pass

    def yield_control(self) -> None:
        pass

    def notify(self, text: str) -> None:
        pass

    async def call_tool(self, binding: str, input: JSON) -> JSON:
        raise AssertionError("the warm-up cell calls no tool")

    def store(self, key: str, value: JSON) -> None:
        pass

    def load(self, key: str) -> JSON | Missing:
        return MISSING


async def warm_up(runtime: CellRuntime) -> None:
    """Run one empty cell: V8 is loaded and an isolate has run before the client comes."""
    await runtime.run("", (), _QuietHooks(), max_heap_size_bytes=None)


def _websocket(stream: trio.abc.Stream, initial: bytes) -> WebSocketFrameStream:
    """The server's side of an upgraded WebSocket; ``initial`` followed the request head."""
    return WebSocketFrameStream(
        stream,
        client=False,
        initial=initial,
        label=CLIENT_LABEL,
        unfinished_timeout=UNFINISHED_MESSAGE_TIMEOUT_S,
    )


def _socket_stream(fd: int) -> trio.SocketStream:
    return trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))


@attrs.define(eq=False)
class _Worker:
    channel: WorkerChannel
    runtime: CellRuntime
    faults: Sequence[Fault]
    tls: ssl.SSLContext | None

    async def run(self) -> None:
        await self.channel.send({"op": "ready"})
        try:
            message, fds = await self.channel.receive()
        except ChannelClosed:
            return  # the listener ended before it needed this worker
        if len(fds) != 1:
            close_fds(fds)
            return
        global _label
        stream = _socket_stream(fds[0])
        label = _label = str(message.get("label", "connection"))
        hello_s = _seconds(message.get("hello_s"))
        hello_limit = _seconds(message.get("hello_limit"))
        policy = policy_from_message(message.get("policy"))
        if message.get("op") == "tls" and self.tls is not None and policy is not None:
            await self._serve_tls(stream, label, hello_s, hello_limit, policy)
            return
        if message.get("op") != "serve":
            await trio.aclose_forcefully(stream)
            return
        lane: trio.abc.Stream = stream
        if message.get("websocket"):
            lane = _websocket(stream, decode_bytes(message.get("initial")))
        token = message.get("token")
        path = str(message.get("path", ""))
        pairing = BulkPairing(path, token=token) if isinstance(token, str) else None
        await self._serve(lane, pairing, label, hello_s, hello_limit)

    async def _serve(
        self,
        lane: trio.abc.Stream,
        pairing: BulkPairing | None,
        label: str,
        hello_s: float,
        hello_limit: float,
    ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._take_bulk_lanes, pairing, nursery)
            await serve_client(
                lane,
                self.runtime,
                label=label,
                hello_timeout=hello_s,
                hello_limit=hello_limit,
                faults=self.faults,
                pairing=pairing,
            )
            nursery.cancel_scope.cancel()

    async def _take_bulk_lanes(self, pairing: BulkPairing | None, nursery: trio.Nursery) -> None:
        """Take each bulk socket the listener hands over; end everything when it is gone."""
        while True:
            try:
                message, fds = await self.channel.receive()
            except ChannelClosed:
                nursery.cancel_scope.cancel()  # the listener is gone: so is its connection
                return
            if message.get("op") != "bulk" or len(fds) != 1 or pairing is None:
                close_fds(fds)
                continue
            bulk = _websocket(_socket_stream(fds[0]), decode_bytes(message.get("initial")))
            nursery.start_soon(_hold_bulk, pairing, bulk)

    async def _serve_tls(
        self,
        raw: trio.SocketStream,
        label: str,
        hello_s: float,
        hello_limit: float,
        policy: AdmissionPolicy,
    ) -> None:
        assert self.tls is not None
        start = trio.current_time()
        secure = trio.SSLStream(raw, self.tls, server_side=True)
        with trio.move_on_after(hello_s) as scope:
            try:
                await secure.do_handshake()
            except trio.BrokenResourceError as exc:
                print(f"{label}: TLS handshake failed: {exc.__cause__ or exc}", file=sys.stderr)
                await trio.aclose_forcefully(raw)
                return
            head = await read_request_head(secure)
        if scope.cancelled_caught:
            print(f"{label}: no hello within {hello_limit:g} s; closed", file=sys.stderr)
            await trio.aclose_forcefully(raw)
            return
        if head is None:
            print(f"{label}: refused with HTTP 400: not an HTTP request", file=sys.stderr)
            await answer_status(secure, 400)
            return
        decision = admit(head, policy)
        if isinstance(decision, Respond):
            if decision.reason:
                print(f"{label}: websocket request refused: {decision.reason}", file=sys.stderr)
            await answer_status(secure, decision.status, decision.headers, decision.body)
            return
        upgrade = upgrade_response(decision.key)
        if decision.bulk:
            await self.channel.send({"op": "bulk", "path": decision.path})
            reply, fds = await self.channel.receive()
            if reply.get("op") != "relay" or len(fds) != 1:
                close_fds(fds)
                print(f"{label}: refused with HTTP 404: no such bulk lane", file=sys.stderr)
                await answer_status(secure, 404)
                return
            pair = _socket_stream(fds[0])
            await secure.send_all(upgrade)
            await _relay(secure, pair, head.rest)
            return
        await self.channel.send({"op": "control", "path": decision.path})
        reply, fds = await self.channel.receive()
        close_fds(fds)
        if reply.get("op") != "admit":
            await answer_status(secure, 503)  # the listener logs the refusal
            return
        await secure.send_all(upgrade)
        lane = _websocket(secure, head.rest)
        token = reply.get("token")
        pairing = BulkPairing(decision.path, token=token) if isinstance(token, str) else None
        left = max(0.0, hello_s - (trio.current_time() - start))
        await self._serve(lane, pairing, label, left, hello_limit)


async def _hold_bulk(pairing: BulkPairing, bulk: WebSocketFrameStream) -> None:
    if pairing.attach(bulk):
        # The connection owns the socket now; it stays open until the connection ends.
        await pairing.finished.wait()
    with trio.move_on_after(_CLOSE_S):
        await bulk.aclose()


async def _relay(
    secure: trio.SSLStream[trio.SocketStream], pair: trio.SocketStream, first: bytes
) -> None:
    """Copy bytes both ways between a bulk lane's TLS stream and its owner's socket."""

    async def copy(source: trio.abc.Stream, sink: trio.abc.Stream, scope: trio.CancelScope) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            while data := await source.receive_some(256 * 1024):
                await sink.send_all(data)
        scope.cancel()  # one side ended: the lane is over

    try:
        if first:
            await pair.send_all(first)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(copy, secure, pair, nursery.cancel_scope)
            nursery.start_soon(copy, pair, secure, nursery.cancel_scope)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(pair)
        await trio.aclose_forcefully(secure)


def _seconds(value: object) -> float:
    return float(value) if isinstance(value, int | float) and value >= 0 else HELLO_TIMEOUT_S


async def _main(
    fd: int,
    faults: Sequence[Fault],
    tls: ssl.SSLContext | None,
    runtime: CellRuntime,
    memory_mib: int | None,
) -> None:
    channel = WorkerChannel(socket.socket(fileno=fd))
    try:
        async with unwrapping_nursery() as nursery:
            if memory_mib is not None:
                nursery.start_soon(_watch_memory, memory_mib)
            await warm_up(runtime)
            await _Worker(channel, runtime, faults, tls).run()
            nursery.cancel_scope.cancel()
    except ChannelClosed:
        pass  # the listener went away: nothing is left to serve or to tell
    finally:
        channel.close()


def resident_mib() -> int:
    """The resident memory of this process, in MiB (from ``/proc/self/statm``)."""
    with open("/proc/self/statm", "rb") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)


async def _watch_memory(cap_mib: int) -> None:
    # Resident size rather than RLIMIT_DATA or RLIMIT_AS: V8 reserves gigabytes of address
    # space it never touches (its sandbox, each isolate's heap), so only what is resident
    # measures what a connection takes from the others.
    while True:
        await trio.sleep(MEMORY_POLL_S)
        resident = resident_mib()
        if resident > cap_mib:
            print(
                f"{_label}: worker {os.getpid()} ended: {resident} MiB resident, past its cap "
                f"of {cap_mib} MiB (--max-connection-memory)",
                file=sys.stderr,
                flush=True,
            )
            # At once: tearing isolates down politely would give the allocation more time.
            # Status 1 tells the listener the line is written.
            os._exit(1)


def _offer_to_oom_killer() -> None:
    # Should the machine run short anyway, the kernel kills a worker before the listener.
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adj:
        adj.write("1000")


def main(argv: Sequence[str] | None = None) -> int:
    """The worker process (see the module docstring); only a listener starts it."""
    parser = argparse.ArgumentParser(prog="python -m codemode_trio.host.worker")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--fault")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--memory-mib", type=int)
    args = parser.parse_args(argv)
    _offer_to_oom_killer()
    # Ctrl-C reaches the whole process group: the listener decides, and this process ends
    # when its channel does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faults = parse_faults(args.fault) if args.fault else ()
    tls: ssl.SSLContext | None = None
    if args.tls_cert and args.tls_key:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    from .listen import default_runtime, initialize_v8_here  # loads V8: only a worker does

    runtime = default_runtime()
    # On this, the main thread, before trio.run starts any other (see v8_engine).
    initialize_v8_here()
    try:
        trio.run(_main, args.fd, faults, tls, runtime, args.memory_mib)
    except Exception as exc:
        # A fault of this program, not of the client: still one line, and the listener, which
        # sees status 1, adds none.
        print(
            f"{_label}: worker {os.getpid()} failed: {type(exc).__name__}: {exc}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
