"""A network listener that serves each client connection in a worker process of its own.

The listener never runs JavaScript and never loads V8: it accepts sockets, decides what each
one is, and hands it (``SCM_RIGHTS``, through :class:`~codemode_trio.host.channel.WorkerChannel`)
to a freshly started interpreter (:mod:`codemode_trio.host.worker`). A V8 fatal error, a crash
or a leak in one connection therefore ends that connection's process and nothing else, and
whatever a client sends can at worst fail the task that reads it here: each ends in one line
on stderr and the listener goes on.

- Two workers are kept started and warm (V8 loaded) ahead of need, so a client does not wait
  for an interpreter to start; under a burst more start at once.
- At most ``max_connections`` connections are served at a time; the next client is refused
  clearly (on ``tcp://`` a ``connection/rejected`` answer to its hello, on ``ws://`` and
  ``wss://`` HTTP 503) rather than left waiting.
- A client has ``hello_timeout`` seconds from its connect to send its first byte (on a
  WebSocket: its whole request head), and as long again, from the moment its worker has the
  socket, to have its hello answered; a host slow to start a worker is not the client's fault.
  Until that first byte arrives the socket stays here, so idle and reset sockets never cost a
  worker.
- ``ws://``: the listener reads the request head and answers the upgrade itself, then hands
  over the upgraded socket. A bulk lane (``/bulk/{token}``) goes to the worker whose
  connection the listener minted that token for.
- ``wss://``: a TLS session cannot change process, so TLS ends in the worker, which reads the
  request head and asks the listener what to do: a control connection is admitted (or refused
  with 503 at the cap), a bulk lane's worker is joined by a socket pair to the worker that
  owns the token and relays bytes between TLS and that pair.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

import attrs
import trio

from ..faults.plan import Fault
from ..protocol.codec import encode_host_frame
from ..protocol.messages import ConnectionRejected, InvalidHello
from .admission import AdmissionPolicy, Respond, admit
from .bulk import BulkPairing, BulkRegistry
from .channel import ChannelClosed, WorkerChannel, close_fds, encode_bytes
from .httphead import answer_status, read_request_head, upgrade_response

__all__ = [
    "DEFAULT_HELLO_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
    "SPARE_WORKERS",
    "Supervisor",
    "WorkerSettings",
    "policy_from_message",
    "policy_message",
]

#: Connections served at once unless ``--max-connections`` says otherwise.
DEFAULT_MAX_CONNECTIONS = 64
#: Seconds from a client's connect to its hello's answer, unless ``--hello-timeout`` says.
DEFAULT_HELLO_TIMEOUT_S = 10.0
#: The data memory (MiB) of one connection's worker unless ``--max-connection-memory`` says.
DEFAULT_CONNECTION_MEMORY_MIB = 4096
#: Workers kept started (V8 loaded) ahead of the connections that will need them.
SPARE_WORKERS = 2
# How long a worker may take to start and load V8 before it is given up on.
_READY_TIMEOUT_S = 60.0
# Sockets that may wait for their first byte (or a wss:// worker's verdict) beyond the cap:
# enough that a client past the cap hears its refusal rather than a bare close.
_PENDING_SLACK = 16
# How long a refused client is given to read its refusal.
_REFUSAL_DRAIN_S = 2.0


@attrs.frozen
class WorkerSettings:
    """What every worker of a listener is started with."""

    faults: tuple[Fault, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Whether a WebSocket connection offers the bulk lane (not with a delegate fault).
    offer_bulk: bool = True
    #: The cap on each worker's data memory, in MiB (``None``: the process's own limit).
    memory_mib: int | None = DEFAULT_CONNECTION_MEMORY_MIB

    def argv(self, fd: int) -> list[str]:
        """The worker's command line, its channel being descriptor ``fd``."""
        argv = [sys.executable, "-m", "codemode_trio.host.worker", "--fd", str(fd)]
        if self.faults:
            argv += ["--fault", ",".join(str(fault) for fault in self.faults)]
        if self.tls_cert is not None and self.tls_key is not None:
            argv += ["--tls-cert", self.tls_cert, "--tls-key", self.tls_key]
        if self.memory_mib is not None:
            argv += ["--memory-mib", str(self.memory_mib)]
        return argv


class _StartFailed(Exception):
    """A worker process did not come up."""


@attrs.define(eq=False)
class _Worker:
    process: trio.Process
    channel: WorkerChannel
    label: str = ""
    #: The worker serves a connection that counts against the cap.
    holds_slot: bool = False
    #: The routing side of its connection's bulk lane.
    pairing: BulkPairing | None = None
    given: bool = False


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "an unknown peer"  # reset already: getpeername fails with ENOTCONN
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Supervisor:
    """Accepts connections for one ``tcp://``, ``ws://`` or ``wss://`` listener.

    ``scheme`` selects the handling; ``settings`` are passed to every worker; ``policy``
    admits WebSocket requests; ``spares`` workers are kept started; ``log`` gets one line per
    connection that fails or is refused.
    """

    def __init__(
        self,
        scheme: str,
        settings: WorkerSettings,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        hello_timeout: float = DEFAULT_HELLO_TIMEOUT_S,
        policy: AdmissionPolicy | None = None,
        spares: int = SPARE_WORKERS,
        log: TextIO | None = None,
    ) -> None:
        self.scheme = scheme
        self.policy = policy
        self.settings = settings
        self.max_connections = max_connections
        self.hello_timeout = hello_timeout
        self._log = sys.stderr if log is None else log
        self._served = 0  # connections holding a slot
        self._pending = 0  # sockets here or in a worker that has not said what they are
        self._count = 0
        self.spares = spares
        self._spares: list[_Worker] = []  # started, V8 loaded, waiting for a connection
        self._want_spare = trio.Event()
        self._routes = BulkRegistry()
        self._owners: dict[str, _Worker] = {}
        self._workers: set[_Worker] = set()
        self._nursery: trio.Nursery | None = None

    def log(self, line: str) -> None:
        """One line on the listener's log."""
        print(line, file=self._log, flush=True)

    async def serve(self, listeners: Sequence[trio.SocketListener]) -> None:
        """Accept on ``listeners`` until cancelled; kills every worker on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._keep_spare)
                self._want_spare.set()
                for listener in listeners:
                    nursery.start_soon(self._accept, listener)
        finally:
            for worker in list(self._workers):
                with contextlib.suppress(OSError):
                    worker.process.kill()

    # ------------------------------------------------------------------ workers

    async def _start_worker(self) -> _Worker:
        assert self._nursery is not None
        ours, theirs = WorkerChannel.pair()
        try:
            process = await trio.lowlevel.open_process(
                self.settings.argv(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            raise _StartFailed(f"cannot start a worker: {exc}") from None
        finally:
            theirs.close()
        worker = _Worker(process, WorkerChannel(ours))
        self._workers.add(worker)
        self._nursery.start_soon(self._reap, worker)
        with trio.move_on_after(_READY_TIMEOUT_S):
            try:
                message, fds = await worker.channel.receive()
            except ChannelClosed:
                message, fds = {}, []
            close_fds(fds)
            if message.get("op") == "ready":
                return worker
        with contextlib.suppress(OSError):
            process.kill()
        await process.wait()
        raise _StartFailed(f"a worker did not start (pid {process.pid}, {self._ended(process)})")

    @staticmethod
    def _ended(process: trio.Process) -> str:
        code = process.returncode
        if code is None:
            return "still running"
        if code >= 0:
            return f"exit status {code}"
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"

    async def _reap(self, worker: _Worker) -> None:
        """Wait for ``worker``'s process; free what it held; log an end it could not."""
        try:
            await worker.process.wait()
        finally:
            self._workers.discard(worker)
            worker.channel.close()
            if worker.holds_slot:
                self._served -= 1
            if worker.pairing is not None:
                self._owners.pop(worker.pairing.token, None)
                self._routes.close(worker.pairing)
            if worker in self._spares:
                self._spares.remove(worker)
                self._want_spare.set()
        # Status 1 is a failure the worker reported itself, in its one line.
        if worker.process.returncode not in (0, 1) and worker.given:
            self.log(
                f"{worker.label}: worker {worker.process.pid} "
                f"{self._ended(worker.process)}; connection lost"
            )

    async def _keep_spare(self) -> None:
        while True:
            await self._want_spare.wait()
            self._want_spare = trio.Event()
            # One at a time: a spare starting competes for the CPU with the connections.
            while len(self._spares) < self.spares:
                try:
                    self._spares.append(await self._start_worker())
                except _StartFailed as exc:
                    self.log(f"listener: {exc}")
                    await trio.sleep(1.0)  # not a hot loop when workers cannot start at all

    async def _take_worker(self) -> _Worker:
        self._want_spare.set()
        while self._spares:
            spare = self._spares.pop(0)
            if spare.process.returncode is None:
                return spare
        return await self._start_worker()  # a burst: start one for this client now

    async def _hand_over(
        self,
        stream: trio.SocketStream,
        message: dict[str, object],
        label: str,
        *,
        slot: bool = False,
        pairing: BulkPairing | None = None,
    ) -> _Worker:
        """Give ``stream`` to a worker with ``message``; return the worker.

        ``slot``: the caller counted this connection in ``_served``; from the moment a worker
        is found, that worker's end frees the slot (and ``pairing``'s route), and if none is
        found the slot and the route are freed here.
        """
        try:
            worker = await self._take_worker()
        except BaseException:
            if slot:
                self._served -= 1
            if pairing is not None:
                self._routes.close(pairing)
            raise
        # No checkpoint since the worker was found alive: its reaper has not run yet.
        worker.label = label
        worker.given = True
        worker.holds_slot = slot
        if pairing is not None:
            # Routed before the worker can grant the token, so its bulk lane finds it.
            worker.pairing = pairing
            self._owners[pairing.token] = worker
        await worker.channel.send(message, [stream.socket.fileno()])
        # The worker has its own descriptor for the socket now; ours goes.
        stream.socket.close()
        return worker

    # ------------------------------------------------------------------ accepting

    async def _accept(self, listener: trio.SocketListener) -> None:
        assert self._nursery is not None
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # Out of descriptors (EMFILE...): say so, let some connections end, go on.
                self.log(f"listener: accept failed: {exc.strerror}")
                await trio.sleep(0.1)
                continue
            self._count += 1
            self._nursery.start_soon(self._client, stream, f"connection {self._count}")

    async def _client(self, stream: trio.SocketStream, number: str) -> None:
        label = f"{number} from {_peer(stream)}"
        start = trio.current_time()
        try:
            if self._pending >= self.max_connections + _PENDING_SLACK:
                self.log(f"{label}: refused: {self._pending} connections are still starting")
                await trio.aclose_forcefully(stream)
                return
            self._pending += 1
            try:
                serve = {"tcp": self._tcp, "ws": self._websocket}.get(self.scheme, self._tls)
                await serve(stream, label, start)
            finally:
                self._pending -= 1
        except Exception as exc:  # one client's failure is its own, never the listener's
            self.log(f"{label}: failed: {type(exc).__name__}: {exc}")
            await trio.aclose_forcefully(stream)

    def _policy(self) -> AdmissionPolicy:
        assert self.policy is not None, "a WebSocket listener has an admission policy"
        return self.policy

    def _left(self, start: float) -> float:
        return max(0.0, self.hello_timeout - (trio.current_time() - start))

    async def _first_byte(self, stream: trio.SocketStream, label: str, start: float) -> bool:
        """Wait for the client's first byte (left unread); ``False`` if it never comes."""
        problem = f"no hello within {self.hello_timeout:g} s; closed"
        with trio.move_on_after(self._left(start)):
            await trio.lowlevel.wait_readable(stream.socket)
            try:
                if await stream.socket.recv(1, socket.MSG_PEEK):
                    return True
                problem = "closed before its hello"
            except OSError as exc:
                problem = f"lost before its hello: {exc.strerror}"
        self.log(f"{label}: {problem}")
        await trio.aclose_forcefully(stream)
        return False

    def _message(self, op: str, label: str) -> dict[str, object]:
        return {
            "op": op,
            "label": label,
            # The worker's own allowance starts when it has the socket: the time this listener
            # spent finding it a worker is the host's, not the client's, to account for.
            "hello_s": self.hello_timeout,
            "hello_limit": self.hello_timeout,
        }

    async def _tcp(self, stream: trio.SocketStream, label: str, start: float) -> None:
        if not await self._first_byte(stream, label, start):
            return
        if self._served >= self.max_connections:
            await self._refuse_tcp(stream)
            self.log(f"{label}: refused: serving {self.max_connections} connections already")
            return
        self._served += 1
        await self._hand_over(stream, self._message("serve", label), label, slot=True)

    async def _refuse_tcp(self, stream: trio.SocketStream) -> None:
        """Answer the hello with ``connection/rejected`` naming the limit, then close."""
        cap = self.max_connections
        text = (
            f"codemode-trio serve is at its limit of {cap} "
            f"connection{'' if cap == 1 else 's'}; try again later"
        )
        frame = encode_host_frame(ConnectionRejected(InvalidHello(text)))
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            with trio.move_on_after(_REFUSAL_DRAIN_S):
                await stream.send_all(frame)
                await stream.send_eof()
                # Read until the client closes, so that unread bytes do not turn our close
                # into a reset that could destroy the refusal before the client reads it.
                while await stream.receive_some(65536):
                    pass
        await trio.aclose_forcefully(stream)

    async def _websocket(self, stream: trio.SocketStream, label: str, start: float) -> None:
        with trio.move_on_after(self._left(start)) as scope:
            head = await read_request_head(stream)
        if scope.cancelled_caught:
            self.log(f"{label}: no hello within {self.hello_timeout:g} s; closed")
            await trio.aclose_forcefully(stream)
            return
        if head is None:
            self.log(f"{label}: refused with HTTP 400: not an HTTP request")
            await answer_status(stream, 400)
            return
        decision = admit(head, self._policy())
        if isinstance(decision, Respond):
            if decision.reason:
                self.log(f"{label}: websocket request refused: {decision.reason}")
            await answer_status(stream, decision.status, decision.headers, decision.body)
            return
        upgrade = upgrade_response(decision.key)
        if decision.bulk:
            await self._route_bulk(stream, label, decision.path, upgrade, head.rest)
            return
        if self._served >= self.max_connections:
            self.log(f"{label}: refused with HTTP 503: serving {self.max_connections} already")
            await answer_status(stream, 503)
            return
        self._served += 1
        try:
            await stream.send_all(upgrade)
            said_hello = bool(head.rest) or await self._first_byte(stream, label, start)
        except BaseException:
            self._served -= 1
            raise
        if not said_hello:
            self._served -= 1
            return
        message = self._message("serve", label)
        pairing = self._routes.open(decision.path) if self.settings.offer_bulk else None
        token = None if pairing is None else pairing.token
        message.update(
            websocket=True, initial=encode_bytes(head.rest), path=decision.path, token=token
        )
        await self._hand_over(stream, message, label, slot=True, pairing=pairing)

    def _owner(self, path: str) -> _Worker | None:
        pairing = self._routes.redeem(path)
        return None if pairing is None else self._owners.get(pairing.token)

    async def _route_bulk(
        self, stream: trio.SocketStream, label: str, path: str, upgrade: bytes, rest: bytes
    ) -> None:
        owner = self._owner(path)
        if owner is None:
            self.log(f"{label}: refused with HTTP 404: no such bulk lane")
            await answer_status(stream, 404)
            return
        await stream.send_all(upgrade)
        message: dict[str, object] = {"op": "bulk", "initial": encode_bytes(rest)}
        with contextlib.suppress(ChannelClosed):
            await owner.channel.send(message, [stream.socket.fileno()])
        stream.socket.close()

    async def _tls(self, stream: trio.SocketStream, label: str, start: float) -> None:
        if not await self._first_byte(stream, label, start):
            return
        message = self._message("tls", label)
        message["policy"] = policy_message(self._policy())
        worker = await self._hand_over(stream, message, label)
        # The worker reads the request head behind TLS and asks what to do with it.
        try:
            message, fds = await worker.channel.receive()
        except ChannelClosed:
            return
        close_fds(fds)
        path = str(message.get("path", ""))
        if message.get("op") == "bulk":
            await self._relay_bulk(worker, path)
            return
        if message.get("op") != "control":
            return
        if self._served >= self.max_connections:
            self.log(f"{label}: refused with HTTP 503: serving {self.max_connections} already")
            with contextlib.suppress(ChannelClosed):
                await worker.channel.send({"op": "busy"})
            return
        if worker.process.returncode is not None:
            return  # gone (and reaped) while it asked
        # No checkpoint from here to the flags: the reaper will free what they claim.
        self._served += 1
        worker.holds_slot = True
        pairing = self._routes.open(path) if self.settings.offer_bulk else None
        if pairing is not None:
            worker.pairing = pairing
            self._owners[pairing.token] = worker
        token = None if pairing is None else pairing.token
        with contextlib.suppress(ChannelClosed):
            await worker.channel.send({"op": "admit", "token": token})

    async def _relay_bulk(self, relay: _Worker, path: str) -> None:
        """Join the worker that holds a bulk lane's TLS to the worker that owns the lane."""
        # The relay serves no connection of its own: its end is not a connection's failure.
        relay.given = False
        owner = self._owner(path)
        if owner is None:
            with contextlib.suppress(ChannelClosed):
                await relay.channel.send({"op": "unknown"})
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(ChannelClosed):
                await owner.channel.send({"op": "bulk", "initial": ""}, [mine.fileno()])
                await relay.channel.send({"op": "relay"}, [theirs.fileno()])
        finally:
            mine.close()
            theirs.close()


def policy_message(policy: AdmissionPolicy) -> dict[str, object]:
    """``policy`` as a worker message's field (see :func:`policy_from_message`)."""
    return {
        "address": policy.address,
        "port": policy.port,
        "token": policy.token,
        "origins": sorted(policy.allowed_origins),
        "hosts": sorted(policy.allowed_hosts),
        "secure": policy.secure,
    }


def policy_from_message(fields: object) -> AdmissionPolicy | None:
    """The policy :func:`policy_message` sent; ``None`` if ``fields`` is not one."""
    if not isinstance(fields, dict):
        return None
    try:
        token = fields["token"]
        return AdmissionPolicy(
            str(fields["address"]),
            int(fields["port"]),
            None if token is None else str(token),
            [str(origin) for origin in fields["origins"]],
            [str(host) for host in fields["hosts"]],
            bool(fields["secure"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
