"""Handshake helpers: build the client hello and judge the host's answer.

Client rule from the spec: offer every capability we implement as *optional* and require none,
then send an extension field only when its capability came back in ``connection/ready`` (older
hosts kill the connection on an unknown field).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .errors import HandshakeError, HandshakeRejected
from .ids import check_hello
from .messages import ConnectionHello, ConnectionReady, ConnectionRejected, HostMessage

__all__ = [
    "ALL_CAPABILITIES",
    "BOUNDED_OUTPUT",
    "DELEGATE_CAPACITY_4096",
    "PROTOCOL_VERSION",
    "SESSION_LIMITS",
    "TOOL_CATALOG_REVISION",
    "YIELD_OBSERVATION",
    "HandshakeResult",
    "build_hello",
    "evaluate_handshake",
]

PROTOCOL_VERSION = 1

SESSION_LIMITS = "session-cell-execution-resource-limits"
YIELD_OBSERVATION = "yield-observation"
BOUNDED_OUTPUT = "bounded-output-v1"
DELEGATE_CAPACITY_4096 = "delegate-capacity-4096"
TOOL_CATALOG_REVISION = "tool-catalog-revision-v1"

#: Every capability codemode-trio implements, offered as optional in each hello.
ALL_CAPABILITIES: tuple[str, ...] = (
    SESSION_LIMITS,
    YIELD_OBSERVATION,
    BOUNDED_OUTPUT,
    DELEGATE_CAPACITY_4096,
    TOOL_CATALOG_REVISION,
)


def build_hello(
    *,
    versions: Iterable[int] = (PROTOCOL_VERSION,),
    required: Iterable[str] = (),
    optional: Iterable[str] = ALL_CAPABILITIES,
) -> ConnectionHello:
    """Build a ``connection/hello``, enforcing the host's own validation rules locally.

    Raises :class:`ValueError` for what the host would treat as a fatal decode error: no
    version, a zero or duplicate version, a blank or duplicate capability, or a capability that
    is both required and optional.
    """
    hello = ConnectionHello(tuple(versions), tuple(required), tuple(optional))
    check_hello(hello.supported_versions, hello.required_capabilities, hello.optional_capabilities)
    return hello


@attrs.frozen
class HandshakeResult:
    """A successful handshake: the agreed version and the capabilities granted."""

    version: int
    capabilities: frozenset[str]

    def has(self, capability: str) -> bool:
        """Whether ``capability`` was granted."""
        return capability in self.capabilities


def evaluate_handshake(hello: ConnectionHello, answer: HostMessage) -> HandshakeResult:
    """Judge the host's first message against our hello.

    Returns the :class:`HandshakeResult` for a valid ``connection/ready``; raises
    :class:`HandshakeRejected` for ``connection/rejected`` and :class:`HandshakeError` for
    anything else (another message, a version we did not offer, a capability we did not ask
    for or a required one missing).
    """
    if type(answer) is ConnectionRejected:
        raise HandshakeRejected(
            f"code-mode host rejected the handshake: {answer.reason!r}", answer.reason
        )
    if type(answer) is not ConnectionReady:
        raise HandshakeError(f"code-mode host returned an invalid handshake response: {answer!r}")
    if answer.selected_version not in hello.supported_versions:
        raise HandshakeError(f"code-mode host returned an invalid handshake response: {answer!r}")
    offered = set(hello.required_capabilities) | set(hello.optional_capabilities)
    granted = frozenset(answer.capabilities)
    unexpected = sorted(granted - offered)
    if unexpected:
        raise HandshakeError(
            f"code-mode host returned an invalid handshake response: it granted capability "
            f"`{unexpected[0]}` that the client did not offer"
        )
    missing = sorted(set(hello.required_capabilities) - granted)
    if missing:
        raise HandshakeError(
            f"code-mode host returned an invalid handshake response: required capability "
            f"`{missing[0]}` was not granted"
        )
    return HandshakeResult(answer.selected_version, granted)
