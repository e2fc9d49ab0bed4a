"""The course's pass/fail line: print each property as it is checked, exit 1 if one failed.

Examples *show* their lesson in the output; these lines only say whether what was shown is
what the lesson claims, so a change that breaks a lesson fails CI instead of silently teaching
something false.
"""

from __future__ import annotations


class Checks:
    """Collects the properties an example demonstrates."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def expect(self, holds: bool, claim: str) -> None:
        """Print ``ok``/``FAIL`` and the claim; remember failures."""
        print(f"  {'ok  ' if holds else 'FAIL'} {claim}")
        if not holds:
            self.failed.append(claim)

    def finish(self) -> None:
        """Exit with status 1 if any property did not hold."""
        if self.failed:
            raise SystemExit(
                f"{len(self.failed)} propert{'y' if len(self.failed) == 1 else 'ies'} did not hold"
            )
        print("all properties held")
