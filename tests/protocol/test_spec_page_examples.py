"""The examples the codec tests use are the examples of the spec page in the repository.

``data/spec_examples.json`` is generated from ``docs/protocol/spec.md`` by
``data/extract_spec_examples.py``; this fails when the page and the generated file part ways
(regenerate with ``python tests/protocol/data/extract_spec_examples.py``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

DATA = Path(__file__).parent / "data"
SPEC = Path(__file__).resolve().parents[2] / "docs" / "protocol" / "spec.md"


def extractor() -> ModuleType:
    spec = importlib.util.spec_from_file_location("extract", DATA / "extract_spec_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_extractor_reads_the_page_in_the_repository() -> None:
    assert extractor().DEFAULT_SPEC.resolve() == SPEC


def test_the_generated_examples_are_the_pages_examples() -> None:
    examples = extractor().extract(SPEC.read_text(encoding="utf-8"))
    assert len(examples) > 30
    assert examples == json.loads((DATA / "spec_examples.json").read_text(encoding="utf-8"))
