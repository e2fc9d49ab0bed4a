"""Where the reference host listens: stdio (one connection, like ``codex-code-mode-host``) or TCP.

``--listen`` takes ``stdio`` or ``stdio://`` (the default, as for the Rust host),
``tcp://IP:PORT``, which serves one connection per accepted socket, or ``ws://IP:PORT``, which
serves one connection per WebSocket (each protocol frame one binary message). A network address
must be a loopback one unless the caller allows remote clients explicitly: the host runs
arbitrary JavaScript for whoever connects. A WebSocket listener also admits only requests that
carry its token and come from no web page (:mod:`~codemode_trio.host.admission`).

On stdio the process is the connection and runs V8 itself. A network listener never loads V8:
each connection is served by a worker process of its own
(:mod:`codemode_trio.host.supervisor`), so that whatever one connection does ends only it; the
listener caps how many are served at once and how long a client may take to say hello
(:class:`ListenLimits`).

With ``faults`` (``serve --fault``, see :mod:`codemode_trio.faults`) what the host sends on
each connection goes through a fresh :class:`~codemode_trio.faults.FaultyHostStream`, for
testing clients. A fault that ends a stdio connection ends the process: ``silent-exit-after``
with status 0 and nothing on stderr, as host 0.171.0 after a burst of tool calls; the others
with status 1 and ``Error: fault injected: NAME=N``. On a network listener such a fault ends
that connection only. A WebSocket carries whole messages, one frame each, so the two faults
that cut the byte stream inside a frame (:data:`BYTE_STREAM_FAULTS`) are refused for ``ws://``
(:func:`check_faults`) rather than silently injecting something else.

V8 is initialised before anything else runs, on the main thread, while it is the process's only
thread (see :mod:`codemode_trio.host.v8_engine`). With :data:`V8_REPORT_ENV` set to ``1`` the
host writes how on stderr, one line: ``v8-initialization: {JSON}``.
"""

from __future__ import annotations

import functools
import importlib.util
import ipaddress
import os
import signal
import ssl
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import attrs
import trio

from ..errors import UsageError
from ..faults.plan import FAULT_HELP, Fault, parse_faults
from ..faults.stream import FaultyHostStream
from .admission import (
    ALLOW_HOST_HELP,
    ALLOW_ORIGIN_HELP,
    ALLOW_REMOTE_HELP,
    NO_TOKEN_HELP,
    AdmissionPolicy,
    check_options,
    listening_url,
    new_token,
)
from .runtime import CellRuntime
from .server import serve_connection
from .supervisor import (
    DEFAULT_CONNECTION_MEMORY_MIB,
    DEFAULT_HELLO_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    Supervisor,
    WorkerSettings,
)

__all__ = [
    "BYTE_STREAM_FAULTS",
    "DELEGATE_FAULTS",
    "ListenAddress",
    "ListenError",
    "ListenLimits",
    "V8_REPORT_ENV",
    "check_faults",
    "default_runtime",
    "host_main",
    "parse_listen",
    "serve_stdio",
    "serve_tcp",
    "serve_websocket",
    "tls_context",
]

#: The smallest ``--max-connection-memory``: a worker with V8 loaded and one cell is ~80 MiB.
MIN_CONNECTION_MEMORY_MIB = 128

#: The environment variable that makes the host report, on stderr, how V8 was initialised.
V8_REPORT_ENV: Final = "CODEMODE_TRIO_V8_REPORT"


class ListenError(ValueError):
    """A ``--listen`` value that cannot be served (the message is for the user)."""


@attrs.frozen
class ListenAddress:
    """A parsed ``--listen`` URL: ``host`` and ``port`` are ``None`` for stdio."""

    host: str | None = None
    port: int | None = None
    #: ``"tcp"`` (raw frames on the socket), ``"ws"`` (one WebSocket message per frame) or
    #: ``"wss"`` (the same over TLS).
    scheme: str = "tcp"

    @property
    def is_stdio(self) -> bool:
        """Whether this is the stdio transport."""
        return self.host is None


def parse_listen(url: str, *, allow_remote: bool = False) -> ListenAddress:
    """Parse a ``--listen`` URL; raise :class:`ListenError` with the reason."""
    if url in ("stdio", "stdio://"):
        return ListenAddress()
    expected = "expected `stdio`, `stdio://`, `tcp://IP:PORT`, `ws://IP:PORT` or `wss://IP:PORT`"
    scheme, _, rest = url.partition("://")
    if scheme not in ("tcp", "ws", "wss") or not rest:
        raise ListenError(f"unsupported --listen URL `{url}`; {expected}")
    host, sep, port_text = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    digits = port_text.isascii() and port_text.isdigit()
    if not sep or not host or not digits or int(port_text) > 65535:
        raise ListenError(f"unsupported --listen URL `{url}`; {expected}")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ListenError(f"--listen needs an IP address, not `{host}`; {expected}") from None
    if not address.is_loopback and not allow_remote:
        raise ListenError(
            f"refusing to listen on non-loopback address {host}: anyone who connects can run "
            "JavaScript here; pass --allow-remote to do it anyway"
        )
    return ListenAddress(str(address), int(port_text), scheme)


#: The faults that need a byte stream, and what each would send that no WebSocket message can.
BYTE_STREAM_FAULTS: Final[dict[str, str]] = {
    "truncate-after": "half a frame",
    "oversize-after": "a length prefix without its frame",
}

#: The faults that rewrite delegate requests: on ``ws://`` they need the single-socket form.
DELEGATE_FAULTS: Final = frozenset({"reuse-delegate-id"})


def check_faults(address: ListenAddress, faults: Sequence[Fault]) -> None:
    """Raise :class:`~codemode_trio.UsageError` for a fault ``address`` cannot carry.

    On ``ws://`` each protocol frame is one whole binary message, so a fault that sends part
    of a frame cannot happen there: the client would see a stall or a clean close instead.
    """
    if address.scheme != "ws":
        return
    for fault in faults:
        sends = BYTE_STREAM_FAULTS.get(fault.name)
        if sends is not None:
            raise UsageError(
                f"fault {fault.name} cannot be injected on ws://: it sends {sends}, and a "
                "WebSocket carries whole frames, one message each; use stdio or tcp://"
            )


def default_runtime() -> CellRuntime:
    """The V8 runtime (needs the ``codemode-trio[host]`` extra, which installs mini-racer)."""
    try:
        from .v8 import V8CellRuntime  # mini-racer is an optional extra
    except ImportError as exc:
        raise ListenError(
            f"the reference host needs mini-racer: pip install 'codemode-trio[host]' ({exc})"
        ) from None
    return V8CellRuntime()


async def serve_stdio(runtime: CellRuntime, *, faults: Sequence[Fault] = ()) -> int:
    """Serve one connection on stdin/stdout; return the exit status (see serve_connection).

    ``faults`` are injected into what the host sends (see the module docstring).
    """
    # Duplicates, so that closing the streams leaves the process's own stdio alone.
    receive = trio.lowlevel.FdStream(os.dup(0))
    send = trio.lowlevel.FdStream(os.dup(1))
    async with trio.StapledStream(send, receive) as stdio:
        stream = FaultyHostStream(stdio, tuple(faults)) if faults else None
        status = await serve_connection(stdio if stream is None else stream, runtime)
    if stream is None or stream.ended_by is None:
        return status
    if stream.exited:
        return 0
    print(f"Error: fault injected: {stream.ended_by}", file=sys.stderr, flush=True)
    return 1


async def serve_tcp(
    address: ListenAddress,
    *,
    on_listening: Callable[[str], None],
    faults: Sequence[Fault] = (),
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    hello_timeout: float = DEFAULT_HELLO_TIMEOUT_S,
    connection_memory_mib: int | None = DEFAULT_CONNECTION_MEMORY_MIB,
) -> None:
    """Serve each accepted TCP connection in a worker process of its own, until cancelled.

    ``on_listening`` receives the bound URL (``tcp://127.0.0.1:PORT``, with the real port
    when 0 was asked for) once the socket accepts connections. ``faults`` are injected into
    what the host sends on each connection. See :class:`~codemode_trio.host.supervisor.Supervisor`
    for ``max_connections`` and ``hello_timeout``, and :mod:`~codemode_trio.host.worker` for
    ``connection_memory_mib`` (``None``: no cap).
    """
    assert address.host is not None
    assert address.port is not None
    listeners = await trio.open_tcp_listeners(address.port, host=address.host)
    host, port = listeners[0].socket.getsockname()[:2]
    on_listening(listening_url("tcp", host, port, None))
    settings = WorkerSettings(tuple(faults), memory_mib=connection_memory_mib)
    await Supervisor(
        "tcp", settings, max_connections=max_connections, hello_timeout=hello_timeout
    ).serve(listeners)


def tls_context(address: ListenAddress, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The server's TLS context for ``wss://`` from PEM files; ``None`` for other listeners.

    Raises :class:`ListenError` when ``wss://`` lacks a certificate or key, when they are
    given for another listener, or when they cannot be loaded.
    """
    if address.scheme != "wss":
        if cert is not None or key is not None:
            raise ListenError("--tls-cert and --tls-key belong to a wss:// listener")
        return None
    if cert is None or key is None:
        raise ListenError("a wss:// listener needs --tls-cert FILE and --tls-key FILE (PEM)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ListenError(f"cannot load the TLS certificate {cert} and key {key}: {exc}") from None
    return context


async def serve_websocket(
    address: ListenAddress,
    *,
    on_listening: Callable[[str], None],
    faults: Sequence[Fault] = (),
    tls: tuple[str, str] | None = None,
    token: str | None,
    allowed_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] = (),
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    hello_timeout: float = DEFAULT_HELLO_TIMEOUT_S,
    connection_memory_mib: int | None = DEFAULT_CONNECTION_MEMORY_MIB,
) -> None:
    """Serve each WebSocket in a worker process of its own, until cancelled.

    Each request is admitted first (:mod:`~codemode_trio.host.admission`): it must carry
    ``token`` (``None``: no token), no ``Origin`` but one of ``allowed_origins``, a ``Host``
    naming this listener or one of ``allowed_hosts``; ``/readyz`` answers as host 0.150's.
    ``on_listening`` receives the bound URL (``ws://127.0.0.1:PORT/?token=TOKEN``) once it
    accepts. Every connection offers ``dual-websocket-v1``: a client that takes it opens its
    bulk lane at the control path plus ``/bulk/{bulk token}``, with the same query; a request
    naming no live bulk token gets HTTP 404.
    ``faults`` are injected into what the host sends on each connection's control lane (with
    a fault on delegate requests, no bulk lane is offered, so that tool calls meet it);
    :func:`check_faults` refuses those a WebSocket cannot carry, before anything listens.
    With ``tls``, the PEM certificate and key files (checked by :func:`tls_context`), every
    connection is TLS first, ended in its worker: ``wss://``.
    """
    check_faults(address, faults)
    assert address.host is not None
    assert address.port is not None
    # Faults act on the control socket. One that rewrites delegate requests would never meet
    # a tool call on a bulk lane, so with it the host serves one socket and offers no lane.
    offer_bulk = not any(fault.name in DELEGATE_FAULTS for fault in faults)
    cert, key = tls if tls is not None else (None, None)
    settings = WorkerSettings(
        tuple(faults), cert, key, offer_bulk=offer_bulk, memory_mib=connection_memory_mib
    )
    listeners = await trio.open_tcp_listeners(address.port, host=address.host)
    scheme = "ws" if tls is None else "wss"
    port = listeners[0].socket.getsockname()[1]
    policy = AdmissionPolicy(
        address.host, port, token, allowed_origins, allowed_hosts, secure=tls is not None
    )
    on_listening(listening_url(scheme, address.host, port, token))
    await Supervisor(
        scheme,
        settings,
        max_connections=max_connections,
        hello_timeout=hello_timeout,
        policy=policy,
    ).serve(listeners)


@attrs.frozen
class ListenLimits:
    """What bounds a network listener: its connections, their hello and their memory."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    hello_timeout: float = DEFAULT_HELLO_TIMEOUT_S
    connection_memory_mib: int = DEFAULT_CONNECTION_MEMORY_MIB


def _announce(url: str) -> None:
    # The first stdout line, so a launcher can read where to connect; logs go to stderr.
    print(url, flush=True)


def run_host(
    listen: str,
    *,
    allow_remote: bool = False,
    faults: Sequence[Fault] = (),
    tls_cert: str | None = None,
    tls_key: str | None = None,
    limits: ListenLimits = ListenLimits(),
    no_token: bool = False,
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
) -> int:
    """Serve on ``listen`` until the connection (stdio) or the process (tcp) ends.

    ``faults`` are injected into what the host sends (see the module docstring); one the
    transport cannot carry raises :class:`~codemode_trio.UsageError` before V8 is loaded.
    ``tls_cert`` and ``tls_key`` (PEM files) are a ``wss://`` listener's certificate.
    ``limits`` bound a network listener. On stdio V8 runs in this process, the one
    connection's; a network listener never loads it (each connection's worker does). A
    WebSocket listener draws a token and prints it in its URL, unless ``no_token`` (loopback
    only); ``allow_origins`` and ``allow_hosts`` are what else it admits
    (:mod:`~codemode_trio.host.admission`).
    """
    address = parse_listen(listen, allow_remote=allow_remote)
    check_faults(address, faults)
    check_options(
        "stdio" if address.is_stdio else address.scheme,
        loopback=address.host is not None and ipaddress.ip_address(address.host).is_loopback,
        allow_remote=allow_remote,
        no_token=no_token,
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
    )
    if limits.max_connections < 1:
        raise UsageError("--max-connections must be at least 1")
    if not 0 < limits.hello_timeout <= 3600:
        raise UsageError("--hello-timeout must be more than 0 and at most 3600 seconds")
    if limits.connection_memory_mib < MIN_CONNECTION_MEMORY_MIB:
        floor = MIN_CONNECTION_MEMORY_MIB
        raise UsageError(f"--max-connection-memory must be at least {floor} MiB")
    tls = tls_context(address, tls_cert, tls_key)
    if not address.is_stdio:
        if importlib.util.find_spec("py_mini_racer") is None:
            # Found, not imported: the workers will need it, the listener must never load it.
            raise ListenError(
                "the reference host needs mini-racer: pip install 'codemode-trio[host]'"
            )
        files = None if tls is None or tls_cert is None or tls_key is None else (tls_cert, tls_key)
        common: dict[str, Any] = dict(on_listening=_announce, faults=faults, **attrs.asdict(limits))
        if address.scheme == "tcp":
            serve = functools.partial(serve_tcp, address, **common)
        else:
            serve = functools.partial(
                serve_websocket,
                address,
                tls=files,
                token=None if no_token else new_token(),
                allowed_origins=allow_origins,
                allowed_hosts=allow_hosts,
                **common,
            )
        trio.run(serve)
        return 0  # pragma: no cover - the listeners return only when cancelled
    runtime = default_runtime()
    initialize_v8_here()
    # Like the Rust host on stdio, SIGINT kills the process outright, writing nothing.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return trio.run(functools.partial(serve_stdio, runtime, faults=faults))


def initialize_v8_here() -> None:
    """Initialise V8 in this process now, on the main thread (see :mod:`.v8_engine`)."""
    # Here, before trio.run starts its first thread: V8's memory protection keys then cover
    # every thread of the process (see v8_engine).
    import json

    from .v8_engine import initialize_v8  # default_runtime() already loaded mini-racer

    record = initialize_v8()
    if os.environ.get(V8_REPORT_ENV, "") == "1":
        print(f"v8-initialization: {json.dumps(attrs.asdict(record))}", file=sys.stderr)


def host_main(argv: Sequence[str] | None = None) -> int:
    """The ``codemode-trio-host`` executable: a drop-in for ``codex-code-mode-host``.

    With no arguments it serves stdio, as a client spawning the Rust host expects.
    """
    import argparse  # only the executable needs it

    parser = argparse.ArgumentParser(
        prog="codemode-trio-host",
        description="The codemode-trio reference code-mode host (JavaScript cells on V8).",
    )
    parser.add_argument("--listen", default="stdio", help="stdio (default) or tcp://IP:PORT")
    parser.add_argument("--allow-remote", action="store_true", help=ALLOW_REMOTE_HELP)
    parser.add_argument("--fault", metavar="NAME[=N][,...]", help=FAULT_HELP)
    parser.add_argument("--tls-cert", metavar="FILE", help="a wss:// listener's certificate (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="a wss:// listener's key (PEM)")
    parser.add_argument("--no-token", action="store_true", help=NO_TOKEN_HELP)
    parser.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN", help=ALLOW_ORIGIN_HELP
    )
    parser.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help=ALLOW_HOST_HELP
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="connections a network listener serves at once (default: %(default)s)",
    )
    parser.add_argument(
        "--hello-timeout",
        type=float,
        default=DEFAULT_HELLO_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a network client may take to say hello (default: %(default)s)",
    )
    parser.add_argument(
        "--max-connection-memory",
        type=int,
        default=DEFAULT_CONNECTION_MEMORY_MIB,
        metavar="MIB",
        help="resident memory one network connection's worker may use (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        return run_host(
            args.listen,
            allow_remote=args.allow_remote,
            faults=parse_faults(args.fault) if args.fault else (),
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            limits=ListenLimits(
                args.max_connections, args.hello_timeout, args.max_connection_memory
            ),
            no_token=args.no_token,
            allow_origins=args.allow_origin,
            allow_hosts=args.allow_host,
        )
    except UsageError as exc:
        parser.error(str(exc))
    except ListenError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
