"""Render suite results: a scenario-by-host table, or one JSON object per line."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .scenario import Scenario
from .suite import ScenarioResult
from .targets import HostTarget

__all__ = ["json_lines", "table"]


def json_lines(results: Sequence[ScenarioResult]) -> list[str]:
    """One compact JSON object per result."""
    return [json.dumps(result.to_json(), ensure_ascii=False) for result in results]


def table(
    scenarios: Sequence[Scenario], targets: Sequence[HostTarget], results: Sequence[ScenarioResult]
) -> list[str]:
    """The lines of a table with one row per scenario and one column per host.

    Hosts are numbered in the header, with a legend above it, since commands are long. Under a
    row with failures, each failing host gets one indented line with the first difference.
    """
    verdicts = {(result.scenario, result.host): result for result in results}
    name_width = max(len("scenario"), *(len(scenario.name) for scenario in scenarios))
    section_width = max(len("section"), *(len(scenario.section) for scenario in scenarios))
    columns = [f"host {index + 1}" for index in range(len(targets))]
    lines = [f"host {index + 1}: {target.label}" for index, target in enumerate(targets)]
    lines.append("")
    header = f"{'scenario':<{name_width}}  {'section':<{section_width}}"
    lines.append(header + "".join(f"  {column:<7}" for column in columns).rstrip())
    for scenario in scenarios:
        cells = []
        failures = []
        for index, target in enumerate(targets):
            result = verdicts.get((scenario.name, target.label))
            if result is None:
                cells.append("-")
            elif result.passed:
                cells.append("pass")
            else:
                cells.append("FAIL")
                failures.append(f"    host {index + 1}: {result.detail}")
        row = f"{scenario.name:<{name_width}}  {scenario.section:<{section_width}}"
        lines.append(row + "".join(f"  {cell:<7}" for cell in cells).rstrip())
        lines.extend(failures)
    lines.append("")
    for index, target in enumerate(targets):
        mine = [result for result in results if result.host == target.label]
        passed = sum(result.passed for result in mine)
        lines.append(f"host {index + 1}: {passed}/{len(mine)} scenarios pass")
    return lines
