"""Where a host under test runs: a command spawned per scenario, or a ``tcp://`` address."""

from __future__ import annotations

import shlex

import attrs

from ..errors import UsageError

__all__ = ["HostTarget"]


@attrs.frozen
class HostTarget:
    """One host to check: ``argv`` to spawn (a fresh process per scenario) or ``address``.

    A TCP host is connected to once per scenario; it has no exit status or stderr to compare,
    so those checks are left out for it.
    """

    label: str
    argv: tuple[str, ...] | None = None
    address: tuple[str, int] | None = None

    @classmethod
    def parse(cls, spec: str) -> HostTarget:
        """Parse a ``--host`` value: a shell-quoted command line or ``tcp://HOST:PORT``.

        Raises :class:`UsageError` for an empty command or a malformed address.
        """
        if spec.startswith("tcp://"):
            host, sep, port = spec[len("tcp://") :].rpartition(":")
            host = host.removeprefix("[").removesuffix("]")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise UsageError(f"--host {spec!r}: expected tcp://HOST:PORT")
            return cls(label=spec, address=(host, int(port)))
        try:
            argv = tuple(shlex.split(spec))
        except ValueError as exc:
            raise UsageError(f"--host {spec!r}: {exc}") from None
        if not argv:
            raise UsageError("--host needs a command")
        return cls(label=spec, argv=argv)
