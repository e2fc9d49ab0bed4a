"""Fault injection: a host that misbehaves on purpose, for testing clients.

:func:`parse_faults` reads ``NAME[=N][,...]``; :class:`FaultyStream` applies the faults to a
host's stream in-process; ``python -m codemode_trio.faults`` wraps a host process.
"""

from __future__ import annotations

from .plan import FAULTS, Action, Fault, FaultPlan, parse_faults
from .stream import FaultyStream

__all__ = ["FAULTS", "Action", "Fault", "FaultPlan", "FaultyStream", "parse_faults"]
