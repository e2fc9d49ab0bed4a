"""Who may open a WebSocket on a ``ws://`` or ``wss://`` listener: one decision per request head.

A listener on a loopback address is reachable by every local user and by every web page the
user's browser opens: a page may open a WebSocket to any address and port, and the browser
only tells the server which page asks (the ``Origin`` header). A page may also rename us by DNS
rebinding (its own name, resolving to 127.0.0.1 after the page loaded). Whoever gets a socket
runs JavaScript cells. So before a request is upgraded, :func:`admit` decides from its head
alone (sans-IO, so that a listener process can decide before handing a socket to a worker):

1. a request with an ``Origin`` header gets 403 unless that origin is allowed, exactly as a
   browser sends it (``--allow-origin``): a browser always sends one on a WebSocket, other
   clients need not (host 0.150 refuses every request with an ``Origin`` the same way);
2. a ``Host`` that does not name the listener gets 421: its IP with its port, ``localhost`` on
   a loopback or unspecified address, any IP on an unspecified address, or a name allowed with
   ``--allow-host`` (with any port). A rebinding page reaches us under a name of its own;
3. ``/readyz`` answers as host 0.150's does: 200 with an empty body to ``GET`` and ``HEAD``,
   405 with ``Allow: GET,HEAD`` to other methods, and needs no token (a probe cannot know it);
4. every other request, the bulk lane's (``{path}/bulk/{bulk token}``) included, needs the
   listener's token: ``?token=TOKEN`` in the query (which the client keeps on the bulk URL) or
   ``Authorization: Bearer TOKEN``, compared in constant time; 401 without it. The bulk token
   alone would be unguessable too, but one rule for every socket is easier to trust;
5. it must be a WebSocket upgrade (:func:`~codemode_trio.transport.wsframes.upgrade_refusal`).

Then it is :class:`Accept`: the path without its query, whether it asks for a bulk lane, and
the client's key for the 101 answer. Otherwise :class:`Respond`, whose texts never carry the
token or anything the request brought.

The token is drawn when the listener starts (:func:`new_token`, 256 bits) and travels in the
URL the listener prints (:func:`listening_url`), so that copying it, or passing it to
``open_websocket_connection``, just works. ``--no-token`` turns the check off, on a loopback
address only (:func:`check_options`).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs

from ..errors import UsageError
from ..transport.wsframes import upgrade_refusal
from .bulk import BulkRegistry

__all__ = [
    "ALLOW_HOST_HELP",
    "ALLOW_ORIGIN_HELP",
    "ALLOW_REMOTE_HELP",
    "NO_TOKEN_HELP",
    "READY_PATH",
    "Accept",
    "Admission",
    "AdmissionPolicy",
    "RequestHead",
    "Respond",
    "admit",
    "check_options",
    "listening_url",
    "new_token",
]

# The options' help, shared by ``codemode-trio serve`` and ``codemode-trio-host``.
#: ``--no-token``.
NO_TOKEN_HELP = (
    "a ws:// listener admits clients without the token it would print in its URL (loopback "
    "only: every local user can then run JavaScript here)"
)
#: ``--allow-origin ORIGIN``.
ALLOW_ORIGIN_HELP = (
    "admit WebSocket requests from web pages of ORIGIN, exactly as a browser sends it "
    "(https://app.example:8443); repeatable. Without it, any request with an Origin gets 403"
)
#: ``--allow-host NAME``.
ALLOW_HOST_HELP = (
    "admit requests whose Host header is NAME (any port), besides the listener's own address "
    "(and localhost on loopback); repeatable. Other names get 421 (DNS rebinding)"
)
#: ``--allow-remote``.
ALLOW_REMOTE_HELP = (
    "allow a non-loopback address (anyone who connects can run JavaScript; a ws:// listener "
    "still needs its token, which travels in clear text: use wss:// off this machine)"
)

#: The readiness probe's path, as host 0.150 serves it.
READY_PATH = "/readyz"
_READY_METHODS = (b"GET", b"HEAD")
_ALLOW_READY = ("Allow", "GET,HEAD")


class RequestHead(Protocol):
    """What :func:`admit` reads of a request (an :class:`h11.Request` is one)."""

    @property
    def method(self) -> bytes:
        """The method, as sent (``b"GET"``)."""

    @property
    def target(self) -> bytes:
        """The request target: path and query."""

    @property
    def headers(self) -> Sequence[tuple[bytes, bytes]]:
        """(name, value) pairs; names in any case."""

    @property
    def http_version(self) -> bytes:
        """``b"1.1"`` or ``b"1.0"``."""


def _origins(origins: Iterable[str]) -> frozenset[str]:
    return frozenset(origins)


def _host_names(names: Iterable[str]) -> frozenset[str]:
    """Allowed ``Host`` names as :func:`_split_host` gives them: lower case, no brackets."""
    return frozenset(name.lower().removeprefix("[").removesuffix("]") for name in names)


@attrs.frozen
class AdmissionPolicy:
    """What a listener admits: its own address, its token, and what the user allowed."""

    #: The IP address the listener is bound to (``0.0.0.0`` or ``::`` for every address).
    address: str
    #: The bound port (the real one when 0 was asked for).
    port: int
    #: The token every WebSocket request must carry; ``None`` with ``--no-token``.
    token: str | None
    #: ``Origin`` values admitted as sent (``https://app.example:8443``), by ``--allow-origin``.
    allowed_origins: frozenset[str] = attrs.field(default=frozenset(), converter=_origins)
    #: ``Host`` names admitted with any port, by ``--allow-host`` (any case; an IPv6 address
    #: with or without brackets).
    allowed_hosts: frozenset[str] = attrs.field(default=frozenset(), converter=_host_names)
    #: Whether the listener is ``wss://`` (a ``Host`` without a port then means 443).
    secure: bool = False


@attrs.frozen
class Accept:
    """Upgrade this request: it asks for ``path``, a bulk lane if ``bulk``."""

    #: The request path without its query (the token stays behind).
    path: str
    #: Whether the path asks for a bulk lane (``{control path}/bulk/{bulk token}``).
    bulk: bool
    #: The client's ``Sec-WebSocket-Key``, for the ``Sec-WebSocket-Accept`` of the 101 answer.
    key: str


@attrs.frozen
class Respond:
    """Answer this request with an HTTP response and close the connection."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    #: Why, in a few words for the listener's log (never the token, nothing the request said).
    reason: str = ""


#: What :func:`admit` decides.
Admission = Accept | Respond


def new_token() -> str:
    """A fresh listener token: 256 random bits, URL-safe (no escaping in a query)."""
    return secrets.token_urlsafe(32)


def listening_url(scheme: str, address: str, port: int, token: str | None) -> str:
    """The URL a listener prints: ``ws://IP:PORT/?token=TOKEN`` (no query without a token)."""
    host = f"[{address}]" if ":" in address else address
    base = f"{scheme}://{host}:{port}"
    return f"{base}/?token={token}" if token is not None else base


def check_options(
    scheme: str,
    *,
    loopback: bool,
    allow_remote: bool,
    no_token: bool,
    allow_origins: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
) -> None:
    """Raise :class:`~codemode_trio.UsageError` for admission options that do not add up.

    ``scheme`` is the listener's (``ws``, ``wss``, ``tcp`` or ``stdio``); ``loopback`` says
    whether its address is a loopback one.
    """
    if scheme not in ("ws", "wss"):
        given = {
            "--no-token": no_token,
            "--allow-origin": allow_origins,
            "--allow-host": allow_hosts,
        }
        for option, value in given.items():
            if value:
                raise UsageError(f"{option} belongs to a ws:// or wss:// listener")
        return
    if no_token and allow_remote:
        raise UsageError(
            "--allow-remote needs the token: drop --no-token (and prefer wss:// off this machine)"
        )
    if no_token and not loopback:
        raise UsageError("--no-token is only allowed on a loopback address")
    for origin in allow_origins:
        if not origin or origin != origin.strip() or "," in origin:
            raise UsageError(f"--allow-origin {origin!r}: expected one origin, as scheme://host")
    for host in allow_hosts:
        name, port = _split_host(host.lower())
        if name is None or port is not None or any(c in name for c in " /,@"):
            raise UsageError(f"--allow-host {host!r}: expected a host name, without a port")


def admit(request: RequestHead, policy: AdmissionPolicy) -> Admission:
    """Decide what to do with ``request`` under ``policy`` (see the module docstring)."""
    fields: dict[bytes, list[bytes]] = {}
    for name, value in request.headers:
        fields.setdefault(name.lower(), []).append(value)
    path, _, query = request.target.decode("latin-1").partition("?")
    ready = path == READY_PATH
    origins = fields.get(b"origin", [])
    if any(origin.decode("latin-1") not in policy.allowed_origins for origin in origins):
        # As 0.150 answers: no body (a page cannot read it anyway; the listener's log says
        # why), and the Allow header of the 405 a probe would have got.
        allow = (_ALLOW_READY,) if ready and request.method not in _READY_METHODS else ()
        return Respond(403, allow, reason="Origin not allowed (see --allow-origin)")
    if not _host_allowed(fields.get(b"host", []), request.http_version, policy):
        return Respond(
            421,
            body=b"the Host header names another server (serve --allow-host NAME allows one)\n",
            reason="Host not allowed (see --allow-host)",
        )
    if ready:
        if request.method in _READY_METHODS:
            return Respond(200)
        return Respond(405, (_ALLOW_READY,))
    if not path.startswith("/"):
        return Respond(400, body=b"the request target must be a path\n", reason="not a path")
    if policy.token is not None and not _token_matches(query, fields, policy.token):
        return Respond(
            401,
            (("WWW-Authenticate", 'Bearer realm="codemode-trio"'),),
            b"a token is required: connect with the URL the listener printed "
            b"(ws://IP:PORT/?token=...)\n",
            "missing or wrong token",
        )
    refusal = upgrade_refusal(request.method, request.headers)
    if refusal is not None:
        status, headers, body = refusal
        return Respond(status, headers, body, "not a WebSocket upgrade")
    key = fields[b"sec-websocket-key"][0].strip().decode("ascii")
    return Accept(path, BulkRegistry.is_bulk_path(path), key)


def _token_matches(query: str, fields: dict[bytes, list[bytes]], token: str) -> bool:
    """Whether the request carries ``token`` and no other: every one it presents must match."""
    presented = [
        value.encode("utf-8", "surrogateescape")
        for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True)
        if name == "token"
    ]
    for value in fields.get(b"authorization", []):
        scheme, _, credentials = value.strip().partition(b" ")
        if scheme.lower() == b"bearer":
            presented.append(credentials.strip())
    expected = token.encode("ascii")
    # compare_digest on every value, whatever the first gave: the time says nothing of which.
    verdicts = [hmac.compare_digest(value, expected) for value in presented]
    return bool(verdicts) and all(verdicts)


def _host_allowed(values: list[bytes], http_version: bytes, policy: AdmissionPolicy) -> bool:
    """Whether the ``Host`` header names this listener (see the module docstring)."""
    if not values:
        # HTTP/1.1 requires Host (h11 enforces it); a 1.0 client without one is no browser.
        return http_version == b"1.0"
    if len(values) > 1:
        return False
    try:
        text = values[0].decode("ascii").strip().lower()
    except UnicodeDecodeError:
        return False
    name, port = _split_host(text)
    if name is None:
        return False
    if name in policy.allowed_hosts:
        return True
    if port is None:
        port = 443 if policy.secure else 80
    if port != policy.port:
        return False
    bound = ipaddress.ip_address(policy.address)
    if name == "localhost":
        return bound.is_loopback or bound.is_unspecified
    try:
        named = ipaddress.ip_address(name)
    except ValueError:
        return False  # a DNS name we were not told about: maybe a rebinding page's
    return bound.is_unspecified or named == bound


def _split_host(text: str) -> tuple[str | None, int | None]:
    """``name[:port]`` or ``[v6][:port]`` into its name and port; ``None`` for a malformed one."""
    if text.startswith("["):
        inside, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None, None
        name, port_text = inside, rest[1:] if rest else None
    else:
        name, sep, port_text_ = text.partition(":")
        port_text = port_text_ if sep else None
    if not name:
        return None, None
    if port_text is None:
        return name, None
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        return None, None
    return name, int(port_text)
