"""Run the scenario suite against hosts and judge each run against the reference record."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, Final

import attrs
import trio

from .compare import first_difference
from .observe import FRAME_TIMEOUT_S, Observation, observe
from .scenario import Scenario
from .scenarios import SCENARIOS
from .steps import Expect
from .targets import HostTarget

__all__ = [
    "REFERENCE_VERSION",
    "ScenarioResult",
    "judge",
    "load_reference",
    "record_reference",
    "run_suite",
]

REFERENCE_VERSION: Final = "0.171.0"
"""The host whose behaviour the reference record holds."""

_REFERENCE_FILE: Final = f"reference-{REFERENCE_VERSION}.json"
# Scenarios running at once against one host. Each host process is mostly idle, waiting on
# timers or on us; a few at a time keep the suite short without swamping a small machine.
_CONCURRENCY: Final = 4


@attrs.frozen
class ScenarioResult:
    """The verdict on one scenario for one host; ``detail`` is the first difference."""

    scenario: str
    section: str
    host: str
    passed: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` line for this result."""
        return attrs.asdict(self)


def load_reference() -> dict[str, Observation]:
    """The recorded reference observations, by scenario name."""
    text = resources.files(__package__).joinpath(_REFERENCE_FILE).read_text("utf-8")
    return {name: Observation.from_json(data) for name, data in json.loads(text).items()}


def judge(
    scenario: Scenario, target: HostTarget, expected: Observation | None, actual: Observation
) -> ScenarioResult:
    """Compare one run with the reference record."""
    if expected is None:
        detail: str | None = f"no reference record for {scenario.name!r}"
    else:
        unordered = tuple(step.unordered for step in scenario.steps if isinstance(step, Expect))
        detail = first_difference(
            expected, actual, unordered=unordered, check_process=target.argv is not None
        )
    return ScenarioResult(
        scenario.name, scenario.section, target.label, detail is None, detail or ""
    )


async def run_suite(
    targets: Sequence[HostTarget],
    *,
    scenarios: Sequence[Scenario] = SCENARIOS,
    reference: dict[str, Observation] | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
    frame_timeout: float = FRAME_TIMEOUT_S,
) -> list[ScenarioResult]:
    """Run every scenario against every target; return the results in suite order.

    ``on_result`` sees each result as soon as it is known (in completion order).
    ``frame_timeout`` bounds each wait for frames: a host that goes silent fails the
    scenario after that long.
    """
    expected = load_reference() if reference is None else reference
    limiter = trio.CapacityLimiter(_CONCURRENCY)
    results: dict[tuple[int, int], ScenarioResult] = {}

    async def run_one(host_index: int, scenario_index: int) -> None:
        target = targets[host_index]
        scenario = scenarios[scenario_index]
        async with limiter:
            try:
                actual = await observe(target, scenario, frame_timeout=frame_timeout)
            except OSError as exc:
                result = ScenarioResult(
                    scenario.name, scenario.section, target.label, False, f"cannot run host: {exc}"
                )
            else:
                result = judge(scenario, target, expected.get(scenario.name), actual)
        results[host_index, scenario_index] = result
        if on_result is not None:
            on_result(result)

    async with trio.open_nursery() as nursery:
        for host_index in range(len(targets)):
            for scenario_index in range(len(scenarios)):
                nursery.start_soon(run_one, host_index, scenario_index)
    return [results[key] for key in sorted(results)]


async def record_reference(
    target: HostTarget, *, scenarios: Sequence[Scenario] = SCENARIOS
) -> dict[str, Any]:
    """Run the suite against ``target`` and return what it did, in the reference file's form."""
    recorded: dict[str, Any] = {}
    limiter = trio.CapacityLimiter(_CONCURRENCY)

    async def run_one(scenario: Scenario) -> None:
        async with limiter:
            recorded[scenario.name] = (await observe(target, scenario)).to_json()

    async with trio.open_nursery() as nursery:
        for scenario in scenarios:
            nursery.start_soon(run_one, scenario)
    return {scenario.name: recorded[scenario.name] for scenario in scenarios}
