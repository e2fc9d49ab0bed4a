"""The environment a spawned host gets: an allow-list of the parent's, not all of it.

A host runs untrusted code. It needs no API keys or cloud credentials, so by default it sees
only the variables that locate programs and files, choose language and time zone, turn colour
off, and tune the Rust runtime, tracing and Codex itself. Within those families a name that
looks like a secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ...) is still left out:
``CODEX_API_KEY`` and ``OTEL_EXPORTER_OTLP_HEADERS`` (which carries auth headers) are
credentials, whatever their prefix. What a caller passes explicitly is always added.

docs/SECURITY.md lists which of these variables host 0.171.0 was seen to read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Final

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "host_environment"]

ALLOWED_NAMES: Final = frozenset({"PATH", "HOME", "LANG", "TMPDIR", "TZ", "NO_COLOR"})
"""Variables passed through to the host by name."""

ALLOWED_PREFIXES: Final = ("LC_", "RUST_", "CODEX_", "OTEL_")
"""Families of variables passed through to the host, minus names that look like secrets."""

_SECRET_LOOKING: Final = re.compile(
    r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|HEADERS|COOKIE", re.IGNORECASE
)


def _allowed(name: str) -> bool:
    if name in ALLOWED_NAMES:
        return True
    return name.startswith(ALLOWED_PREFIXES) and _SECRET_LOOKING.search(name) is None


def host_environment(
    extra: Mapping[str, str] | None = None,
    *,
    inherit_env: bool = False,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the environment for a host process.

    ``base`` (default :data:`os.environ`) filtered through the allow-list, or all of it when
    ``inherit_env`` is true; then ``extra`` on top (its values win).
    """
    source = os.environ if base is None else base
    if inherit_env:
        environment = dict(source)
    else:
        environment = {name: value for name, value in source.items() if _allowed(name)}
    if extra:
        environment.update(extra)
    return environment
