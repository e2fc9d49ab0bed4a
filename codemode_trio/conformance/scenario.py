"""A conformance scenario: a name, the spec section it checks, and its steps."""

from __future__ import annotations

import attrs

from .steps import Step

__all__ = ["Scenario"]


@attrs.frozen
class Scenario:
    """One check of a host against the reference.

    ``section`` names the section of ``docs/protocol/spec.md`` whose rule it checks
    (``"§6.4"``); ``summary`` says in a line what the host must do. What counts as the right
    answer is what host 0.171.0 did with the same steps, recorded in the reference file.
    """

    name: str
    section: str
    summary: str
    steps: tuple[Step, ...]
