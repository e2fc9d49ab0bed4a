"""Every link in the README and the documentation resolves, and so does every ``§`` reference.

A relative link must name a file of the repository, and its ``#anchor`` a heading of that page
(anchors as GitHub and MyST derive them from the heading's text). A ``§N.M`` in the code, the
tests or the pages must be a numbered heading of the page it cites: ``CLIENT §3.6`` of
``docs/protocol/client.md``, anything else (``SPEC §4.2``, or the bare ``§4.2`` that
``codemode-trio conform`` prints in its section column) of ``docs/protocol/spec.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codemode_trio.conformance.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "docs" / "protocol" / "spec.md"
CLIENT = REPO / "docs" / "protocol" / "client.md"

PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md"]
    + [path for path in (REPO / "docs").rglob("*.md") if "_build" not in path.parts]
)
SOURCES = sorted(
    path
    for folder in ("codemode_trio", "tests", "examples", "benchmarks", "scripts")
    for path in (REPO / folder).rglob("*.py")
    # This file's own examples of broken references are meant to be broken.
    if path != Path(__file__).resolve()
)

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
SECTION_NUMBER = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")
# A section reference, with what names its document if anything does: "CLIENT.md §3.6",
# "SPEC §4.2", "§6.2.1"; a list such as "SPEC §2, §4" keeps the document of its first item.
SECTION_REF = re.compile(r"(?:\b(SPEC|CLIENT)(?:\.md)?\s+)?§\s?(\d+(?:\.\d+)*)")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans, whose brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub (and MyST's ``myst_heading_anchors``) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def headings(page: Path) -> list[str]:
    return [title for _, title in HEADING.findall(FENCE.sub("", page.read_text("utf-8")))]


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for title in headings(page):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def section_numbers(page: Path) -> set[str]:
    """The numbers of a page's numbered headings, and ``N.K`` for item K of a list in ``N``.

    The spec's §12 is one numbered list, and its rules are cited by item (``§12.11``).
    """
    numbers: set[str] = set()
    current = None
    for line in FENCE.sub("", page.read_text("utf-8")).splitlines():
        heading = HEADING.match(line)
        if heading:
            match = SECTION_NUMBER.match(heading.group(2))
            current = match.group(1) if match else None
            if current:
                numbers.add(current)
            continue
        item = re.match(r"(\d+)\. ", line)
        if item and current:
            numbers.add(f"{current}.{item.group(1)}")
    return numbers


def broken_links(page: Path) -> list[str]:
    problems = []
    for target in LINK.findall(prose(page.read_text("utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto: ...: not the repository's to check
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix != ".md":
            problems.append(f"{target}: an anchor into a file that is not a page")
        elif anchor and anchor not in anchors(resolved):
            problems.append(f"{target}: {resolved.name} has no heading #{anchor}")
    return problems


def unresolved_sections(text: str, default: Path) -> list[str]:
    problems = []
    for document, number in SECTION_REF.findall(text):
        page = {"SPEC": SPEC, "CLIENT": CLIENT}.get(document, default)
        if number not in section_numbers(page):
            problems.append(f"{document or ''} §{number}: {page.name} has no section {number}")
    return problems


def test_there_are_pages_and_sources() -> None:
    names = {path.relative_to(REPO).as_posix() for path in PAGES}
    assert {"README.md", "docs/protocol/spec.md", "docs/protocol/client.md"} <= names
    assert len(SOURCES) > 100


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_section_reference_of_a_page_resolves(page: Path) -> None:
    # Inside the client page a bare § is one of its own sections.
    default = CLIENT if page == CLIENT else SPEC
    assert unresolved_sections(page.read_text("utf-8"), default) == []


def test_every_section_reference_of_the_code_resolves() -> None:
    problems = [
        f"{path.relative_to(REPO)}: {problem}"
        for path in SOURCES
        for problem in unresolved_sections(path.read_text("utf-8"), SPEC)
    ]
    assert problems == []


def test_every_section_conform_prints_is_a_heading_of_the_spec() -> None:
    numbers = section_numbers(SPEC)
    sections = {scenario.section for scenario in SCENARIOS}
    assert len(sections) > 20
    assert all(section.startswith("§") for section in sections), sections
    assert sorted(s for s in sections if s.removeprefix("§") not in numbers) == []


def test_the_conformance_page_links_a_printed_section_to_its_heading() -> None:
    # What a reader of a report follows: §4.2 is the heading numbered 4.2.
    title = next(t for t in headings(SPEC) if t.startswith("4.2 "))
    assert f"protocol/spec.md#{slug(title)}" in (REPO / "docs" / "conformance.md").read_text()


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## 4.2 Host `decision`, in order\n\n"
        "[ok](#42-host-decision-in-order) [bad](#nowhere) [gone](missing.md) "
        "`[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "#nowhere: page.md has no heading #nowhere",
        "missing.md: no such file",
    ]
    assert section_numbers(page) == {"4.2"}
    page.write_text("## 12. Rules\n\n1. one\n2. two\n   3. not an item of 12\n")
    assert section_numbers(page) == {"12", "12.1", "12.2"}
    assert unresolved_sections("SPEC §4.2, §99 and CLIENT §3.6 and CLIENT.md §9.9", SPEC) == [
        " §99: spec.md has no section 99",
        "CLIENT §9.9: client.md has no section 9.9",
    ]
