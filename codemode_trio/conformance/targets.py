"""Where a host under test runs: a command spawned per scenario, or a network address.

A network host is ``tcp://HOST:PORT`` or a ``ws://`` / ``wss://`` URL, query (a token) and all.
"""

from __future__ import annotations

import shlex
import urllib.parse

import attrs

from ..errors import UsageError

__all__ = ["HostTarget"]


@attrs.frozen
class HostTarget:
    """One host to check: ``argv`` to spawn (a fresh process per scenario), or where to connect.

    A network host (``address`` for TCP, ``url`` for a WebSocket, each frame one binary
    message) is connected to once per scenario; it has no exit status or stderr to compare, so
    those checks are left out for it. ``label`` names the host in reports: a URL's query, which
    may hold a token, is left out of it.
    """

    label: str
    argv: tuple[str, ...] | None = None
    address: tuple[str, int] | None = None
    url: str | None = None

    @classmethod
    def parse(cls, spec: str) -> HostTarget:
        """Parse a ``--host`` value: a command line, ``tcp://HOST:PORT``, or a WebSocket URL.

        The command line is shell-quoted; a ``ws://`` / ``wss://`` URL is taken as ``serve
        --listen ws://...`` prints it, token included.

        Raises :class:`UsageError` for an empty command or a malformed address.
        """
        if spec.startswith(("ws://", "wss://")):
            parts = urllib.parse.urlsplit(spec)
            try:
                given = parts.port
            except ValueError:
                given = None
            if not parts.hostname or (given is None and ":" in parts.netloc.rpartition("@")[2]):
                raise UsageError(f"--host {_redacted(spec)!r}: expected ws://HOST:PORT/PATH")
            return cls(label=_redacted(spec), url=spec)
        if spec.startswith("tcp://"):
            host, sep, port = spec[len("tcp://") :].rpartition(":")
            host = host.removeprefix("[").removesuffix("]")
            digits = port.isascii() and port.isdigit()
            if not sep or not host or not digits or not 0 < int(port) < 65536:
                raise UsageError(f"--host {spec!r}: expected tcp://HOST:PORT")
            return cls(label=spec, address=(host, int(port)))
        try:
            argv = tuple(shlex.split(spec))
        except ValueError as exc:
            raise UsageError(f"--host {spec!r}: {exc}") from None
        if not argv:
            raise UsageError("--host needs a command")
        return cls(label=spec, argv=argv)


def _redacted(url: str) -> str:
    """``url`` without its query: what a report may print of a URL that carries a token."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((*parts[:3], "…" if parts.query else "", ""))
