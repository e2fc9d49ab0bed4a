"""Regenerate ``spec_examples.json`` from the wire spec.

Usage: ``python tests/protocol/data/extract_spec_examples.py [path/to/spec.md]``

Every line of the spec that begins (after indentation) with ``<<`` (host to client) or ``>>``
(client to host) starts one example. Examples re-spaced over several lines (spec §6.2) are
joined until the collected text parses as one JSON value. The tests read only the generated
JSON file, never the spec itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SPEC = HERE.parents[2] / "docs" / "protocol" / "spec.md"
OUTPUT = HERE / "spec_examples.json"

DIRECTIONS = ("<<", ">>")


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def extract(spec_text: str) -> list[dict[str, str]]:
    """Return every ``<<``/``>>`` example of ``spec_text`` in document order."""
    examples: list[dict[str, str]] = []
    lines = spec_text.splitlines()
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        index += 1
        direction = stripped[:2]
        if direction not in DIRECTIONS:
            continue
        parts = [stripped[2:].strip()]
        while not _parses("".join(parts)):
            if index >= len(lines) or lines[index].strip().startswith("```"):
                raise ValueError(f"unterminated example starting at line {index}: {parts[0]!r}")
            parts.append(lines[index].strip())
            index += 1
        examples.append({"direction": direction, "json": "".join(parts)})
    return examples


def main(argv: list[str]) -> int:
    spec = Path(argv[1]) if len(argv) > 1 else DEFAULT_SPEC
    examples = extract(spec.read_text(encoding="utf-8"))
    OUTPUT.write_text(json.dumps(examples, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(examples)} examples to {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
