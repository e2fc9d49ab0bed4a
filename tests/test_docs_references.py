"""The guides in ``docs/`` name real code: every ``path::Symbol`` and relative link resolves.

``docs/structured-concurrency.md`` points at the functions that implement each concurrency
construct. The code moves; this test makes a stale reference fail the build instead of
misleading a reader.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))

REFERENCE = re.compile(r"`([\w./-]+\.py)::([A-Za-z_][\w.]*)`")
LINK = re.compile(r"\]\((?!https?:|#)([^)#\s]+)")


def defined_names(body: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """Names bound at this level (functions, classes, assignments), with a class's body."""
    names: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = []
        elif isinstance(node, ast.ClassDef):
            names[node.name] = node.body
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = []
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = []
    return names


def resolve(path: str, symbol: str) -> str | None:
    """Return why ``path::symbol`` does not resolve, or None when it does."""
    source = REPO / path
    if not source.is_file():
        return f"{path} does not exist"
    body = ast.parse(source.read_text(encoding="utf-8")).body
    for part in symbol.split("."):
        names = defined_names(body)
        if part not in names:
            return f"{path} defines no {symbol}"
        body = names[part]
    return None


def references(text: str) -> list[tuple[str, str]]:
    return REFERENCE.findall(text)


def test_there_are_guides_with_references() -> None:
    assert DOCS, "docs/*.md is empty"
    assert len(references((REPO / "docs" / "structured-concurrency.md").read_text())) >= 20


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_code_reference_exists(doc: Path) -> None:
    problems = [resolve(path, symbol) for path, symbol in references(doc.read_text())]
    assert [problem for problem in problems if problem] == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_relative_link_exists(doc: Path) -> None:
    targets = LINK.findall(doc.read_text())
    assert [t for t in targets if not (doc.parent / t).exists()] == []


def test_a_stale_reference_is_reported() -> None:
    text = (
        "`codemode_trio/client/slots.py::ReplySlot.result` "
        "`codemode_trio/client/slots.py::ReplySlot.vanished` "
        "`codemode_trio/no_such_module.py::anything` "
        "`codemode_trio/client/config.py::DEFAULT_CONFIG`"
    )
    assert [resolve(path, symbol) for path, symbol in references(text)] == [
        None,
        "codemode_trio/client/slots.py defines no ReplySlot.vanished",
        "codemode_trio/no_such_module.py does not exist",
        None,
    ]
