"""Conformance checks: does a host behave as host 0.171.0 does, rule by rule of the spec?

:data:`SCENARIOS` drive a host over raw frames; :func:`run_suite` runs them against any number
of hosts (commands or ``tcp://`` addresses) and judges each run against the recorded reference
behaviour, giving one :class:`ScenarioResult` per scenario and host.
"""

from __future__ import annotations

from .observe import Observation, observe
from .scenario import Scenario
from .scenarios import SCENARIOS, scenario_named
from .suite import REFERENCE_VERSION, ScenarioResult, load_reference, record_reference, run_suite
from .targets import HostTarget

__all__ = [
    "REFERENCE_VERSION",
    "SCENARIOS",
    "HostTarget",
    "Observation",
    "Scenario",
    "ScenarioResult",
    "load_reference",
    "observe",
    "record_reference",
    "run_suite",
    "scenario_named",
]
