"""Fault injection: a host that misbehaves on purpose, for testing clients.

:func:`parse_faults` reads ``NAME[=N][,...]``; :class:`FaultyStream` applies the faults to a
host's stream as a client holds it, :class:`FaultyHostStream` to a stream a host serves (the
hook for ``serve --fault``); ``python -m codemode_trio.faults`` wraps a host process.
"""

from .plan import FAULTS, Action, Fault, FaultPlan, parse_faults
from .stream import FaultyHostStream, FaultyStream

__all__ = [
    "FAULTS",
    "Action",
    "Fault",
    "FaultPlan",
    "FaultyHostStream",
    "FaultyStream",
    "parse_faults",
]
