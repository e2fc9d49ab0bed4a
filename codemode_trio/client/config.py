"""Protocol deadlines and capacities, in one frozen object (the house rule: no ``timeout=``).

The numbers are the reference client's. Tests shrink them; applications rarely need to.
"""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_CONFIG", "ConnectionConfig"]


@attrs.frozen
class ConnectionConfig:
    """Deadlines (seconds) and queue sizes for one connection.

    - ``handshake_timeout``: hello to ``connection/ready`` (30 s for a local process).
    - ``transport_timeout``: added to every wait/terminate/shutdown deadline (60 s). A wait's
      deadline is ``yield_time_ms + yield_grace + transport_timeout``; expiry fails the whole
      connection, because a host that stops answering cannot be trusted with anything else.
    - ``yield_grace``: the host fires long yields about a second late (1 s).
    - ``max_pending_delegates``: concurrent delegate calls before the reference error reply
      (1024; raised to 4096 when the host grants ``delegate-capacity-4096``).
    - ``outgoing_capacity``: writes queued for the writer task before the connection is
      declared stuck ("outgoing queue is full"). Nothing that produces bytes ever awaits the
      writer.
    - ``inbox_capacity``: no longer used. Host bytes, commands and cancellations are applied to
      the protocol machine as they happen, so there is no inbox; backpressure reaches the host
      because the reader reads again only once it has applied what it read. Kept so that
      existing configurations still construct.
    - ``recent_delegate_ids``: how many delegate ids are remembered to catch reuse (4096).
    - ``strict``: decode host messages strictly (unknown fields are fatal).
    - ``bulk_outgoing_capacity``: ``outgoing_capacity`` for the bulk lane of a dual-websocket
      connection (1024, the reference's ``MAX_PENDING_DELEGATE_CALLS``), raised to the
      connection's pending-delegate limit (4096 when the host grants
      ``delegate-capacity-4096``): a result for every pending call fits, however slowly the
      host reads them.
    """

    handshake_timeout: float = 30.0
    transport_timeout: float = 60.0
    yield_grace: float = 1.0
    max_pending_delegates: int = 1024
    outgoing_capacity: int = 4096
    inbox_capacity: int = 128
    recent_delegate_ids: int = 4096
    strict: bool = False
    bulk_outgoing_capacity: int = 1024

    def wait_deadline(self, yield_time_ms: int) -> float:
        """Seconds a wait (or an initial response) may take before the host is declared hung."""
        return yield_time_ms / 1000 + self.yield_grace + self.transport_timeout


#: The configuration a connection uses when it is given none.
DEFAULT_CONFIG = ConnectionConfig()
