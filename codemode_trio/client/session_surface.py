"""What every session shares, whatever carries it (stdio, WebSocket or the gRPC API)."""

from __future__ import annotations

from typing import Self

import trio

from ..protocol.content import ToolDefinition
from .delegates import Delegate

__all__ = ["SessionSurface"]


class SessionSurface:
    """The transport-independent part of the session API.

    A session type passes its delegate and the event it sets once every cell of the session was
    closed locally, and defines :meth:`aclose`; this gives it the context manager, the cleanup
    observers and the default tool list.
    """

    def __init__(self, delegate: Delegate, cleaned_up: trio.Event) -> None:
        self.delegate = delegate
        self._cleaned_up = cleaned_up

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session (each session type says how)."""
        raise NotImplementedError

    @property
    def cleaned_up(self) -> bool:
        """True once every cell of the session was closed locally (shutdown or failure)."""
        return self._cleaned_up.is_set()

    async def wait_cleaned_up(self) -> None:
        """Wait until every cell of the session is closed locally.

        That happens when the host reports the session closed or the connection fails; it
        never waits for delegate calls to finish (they are revoked).
        """
        await self._cleaned_up.wait()

    def default_tools(self) -> tuple[ToolDefinition, ...]:
        """The tools a cell gets when none are given: the delegate's ``definitions()``, if any."""
        definitions = getattr(self.delegate, "definitions", None)
        return tuple(definitions()) if callable(definitions) else ()
