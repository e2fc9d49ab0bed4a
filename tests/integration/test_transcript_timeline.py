"""``transcript show --html``: a run recorded on the real host, drawn as a timeline page.

The transcript is recorded against the real 0.171.0 host with two overlapping tool calls, a
notification, a yield, a wait, a terminate that cancels a pending call, and a script error; the
tool results and the cell's texts carry markup that would run script if the page pasted it in.
Every expectation is derived from the recorded frames themselves, and the page is checked in a
real headless Chromium (tests/integration/headless.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import trio

import codemode_trio as cm
from codemode_trio.transcript import TranscriptWriter, read_transcript
from codemode_trio.transcript_html import render_timeline, timeline_of, write_timeline

from .headless import Page, open_browser

REPO = Path(__file__).resolve().parents[2]
CLI_SHOW = [sys.executable, "-m", "codemode_trio", "transcript", "show"]

# Markup a careless page would execute: closing the script or the SVG element it sits in,
# an image whose error handler runs, an attribute breaker.
HOSTILE = (
    "</script></desc></title><img src=x onerror=\"window.pwned=1\"><svg onload='window.pwned=2'>"
)


def make_tools() -> cm.ToolRegistry:
    tools = cm.ToolRegistry()
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string"}, "ms": {"type": "integer"}},
        "required": ["label", "ms"],
    }

    @tools.function(description="Wait ms milliseconds, then echo the label", input_schema=schema)
    async def slow(label: str, ms: int) -> str:
        await trio.sleep(ms / 1000)
        return f"{label} {HOSTILE}"

    return tools


async def record(host: Path, transcript: Path) -> None:
    """The recorded run: every kind of bar and mark the page draws, on the real host."""
    async with (
        cm.open_host_process(host, transcript=transcript) as conn,
        conn.open_session(make_tools()) as session,
    ):
        # Two tool calls in flight at once (the second answers first), then a notification.
        both = await session.run(
            "const [a, b] = await Promise.all(["
            "tools.slow({label: 'first', ms: 150}), tools.slow({label: 'second', ms: 10})]);"
            f"notify({json.dumps('halfway ' + HOSTILE)}); text(a + b);"
        )
        assert both.error_text is None, both.error_text
        # A yield, a wait that times out while a tool call is pending, and a terminate that
        # makes the host cancel that call.
        cell = await session.execute(
            "text('before'); yield_control(); await tools.slow({label: 'never', ms: 60000});",
            yield_time_ms=10_000,
        )
        assert (await cell.initial_response()).kind == "yielded"
        waited = await session.wait(cell.cell_id, yield_time_ms=100)
        assert waited.response.kind == "yielded"
        stopped = await session.terminate(cell.cell_id)
        assert stopped.response.kind == "terminated"
        # A script error whose text is markup.
        failed = await session.run(f"throw new Error({json.dumps(HOSTILE)})")
        assert failed.error_text is not None and HOSTILE in failed.error_text


@pytest.fixture(scope="module")
def recorded(rust_host_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("timeline") / "run.cbor"
    trio.run(record, rust_host_path, path)
    return path


def messages(path: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """(nanoseconds since the first frame, direction, decoded JSON) for every frame."""
    frames = list(read_transcript(path))
    start = frames[0].monotonic_ns
    return [(f.monotonic_ns - start, f.direction, json.loads(f.payload)) for f in frames]


def tool_calls(path: Path) -> dict[str, str]:
    """Delegate id -> tool name, for every tool call the host asked for."""
    return {
        str(m["id"]): m["request"]["invocation"]["tool_name"]["name"]
        for _, _, m in messages(path)
        if m["type"] == "delegate/request" and m["request"]["type"] == "tool/invoke"
    }


def test_the_recording_holds_everything_the_page_must_draw(recorded: Path) -> None:
    frames = messages(recorded)
    kinds = [m["type"] for _, _, m in frames]
    assert len(tool_calls(recorded)) == 3
    requested = [i for i, m in enumerate(frames) if m[2]["type"] == "delegate/request"]
    answered = [i for i, m in enumerate(frames) if m[2]["type"] == "delegate/response"]
    # Overlap: the second call was asked for before the first was answered.
    assert requested[1] < answered[0]
    assert "delegate/cancel" in kinds
    assert any(
        m.get("request", {}).get("type") == "notification/send"
        for _, _, m in frames
        if "request" in m
    )
    methods = [m["request"]["method"] for _, _, m in frames if m["type"] == "operation/request"]
    assert "session/wait" in methods and "session/terminate" in methods
    assert "Yielded" in json.dumps([m for _, _, m in frames])


def test_every_tool_call_is_one_bar_from_request_to_answer(recorded: Path) -> None:
    (timeline,) = timeline_of(recorded)
    spans = {s.delegate_id: s for lane in timeline.lanes.values() for s in lane.spans}
    calls = tool_calls(recorded)
    assert {i: s.name for i, s in spans.items() if s.kind == "tool-call"} == calls
    # Each bar ends at the frame that answered or abandoned its delegate id.
    for at, _, message in messages(recorded):
        if message["type"] in ("delegate/response", "delegate/cancel"):
            span = spans[str(message["id"])]
            assert span.end_ns == at
            expected = "cancelled" if message["type"] == "delegate/cancel" else "ok"
            assert span.status == expected
        if message["type"] == "delegate/request":
            assert spans[str(message["id"])].start_ns == at
    notes = [s for s in spans.values() if s.kind == "notification"]
    assert len(notes) == 1 and notes[0].status == "ok"


def test_each_cell_has_a_lane_with_its_marks(recorded: Path) -> None:
    (timeline,) = timeline_of(recorded)
    frames = messages(recorded)
    started = [
        m["result"]["value"]["cellId"]
        for _, _, m in frames
        if m["type"] == "operation/response"
        and m["result"]["value"].get("type") == "execution/started"
    ]
    cells = {key: lane for key, lane in timeline.lanes.items() if key != "connection"}
    assert sorted(lane.label for lane in cells.values()) == sorted(
        f"session-1 · cell {cell}" for cell in started
    )
    marks = {lane.label: [m.kind for m in lane.marks] for lane in cells.values()}
    first, second, third = (marks[f"session-1 · cell {cell}"] for cell in started)
    assert "result" in first and "closed" in first
    assert second.count("yield") == 2  # the initial response and the wait that timed out
    for kind in ("execute", "wait", "terminate", "delegate-cancel", "terminated", "closed"):
        assert kind in second
    assert "error" in third


class Markup(HTMLParser):
    """Every start tag with its attributes, and the text of each script element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def test_the_page_is_inert_and_self_contained(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "timeline.html"
    write_timeline(recorded, out)
    page = out.read_text(encoding="utf-8")
    markup = Markup()
    markup.feed(page)
    names = {tag for tag, _ in markup.tags}
    assert not names & {"img", "iframe", "object", "embed", "link", "a", "form", "base"}
    # No event handler, no URL-bearing attribute: nothing runs or loads but the page's script.
    for _, attributes in markup.tags:
        assert not any(name.startswith("on") for name in attributes)
        assert not set(attributes) & {"src", "href", "xlink:href", "action", "style"}
    (script,) = markup.scripts
    policy = next(a["content"] for t, a in markup.tags if a.get("http-equiv") is not None)
    assert policy is not None and policy.startswith("default-src 'none'; ")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}';" in policy
    # The hostile text is there, as text.
    assert HOSTILE not in page
    assert HOSTILE.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")[:40] in page


async def bars(page: Page, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await page.evaluate(
        f"[...document.querySelectorAll('[data-kind={kind}]')].map((e) => {{"
        "const box = e.querySelector('.shape').getBoundingClientRect();"
        "return {id: e.dataset.id, name: e.dataset.name, status: e.dataset.status,"
        "left: box.left, right: box.right, top: box.top, bottom: box.bottom}; })"
    )
    return found


async def test_the_timeline_renders_in_a_real_browser(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "timeline.html"
    write_timeline(recorded, out)
    calls = tool_calls(recorded)
    async with open_browser() as browser:
        page = await browser.load(out.as_uri())
        drawn = await bars(page, "tool-call")
        assert {bar["id"]: bar["name"] for bar in drawn} == calls
        assert len(drawn) == len(calls)
        notes = await bars(page, "notification")
        assert len(notes) == 1
        # The two calls that overlapped in time do not overlap on the screen.
        first, second = sorted(drawn, key=lambda bar: bar["left"])[:2]
        assert first["bottom"] <= second["top"] or second["bottom"] <= first["top"]
        for kind in ("yield", "wait", "terminate", "delegate-cancel", "error", "closed"):
            assert await page.evaluate(f"document.querySelectorAll('[data-kind={kind}]').length")
        # A click shows the call's frames, hostile text included, as text.
        shown = await page.evaluate(
            "document.querySelector('[data-kind=tool-call]').dispatchEvent("
            "new MouseEvent('click', {bubbles: true}));"
            "document.getElementById('detail-body').textContent"
        )
        assert '"tool/invoke"' in shown
        assert json.dumps(HOSTILE)[1:-1] in shown  # the tool's answer, as JSON text
        assert await page.evaluate("window.pwned === undefined")
        assert await page.evaluate("document.images.length") == 0
        assert await page.evaluate("document.scripts.length") == 1
        assert page.problems == []
        assert page.requests == [out.as_uri()]


def hostile_transcript(path: Path) -> dict[str, str]:
    """A transcript no host wrote: markup in ids, names and undecodable frames."""
    writer = TranscriptWriter(path)
    name = 'x" onclick="window.pwned=3"><img src=x onerror=\'window.pwned=4\'>'
    cell = "</text></svg><script>window.pwned=5</script>"
    writer.record_received(
        json.dumps(
            {
                "type": "delegate/request",
                "id": 7,
                "sessionId": HOSTILE,
                "request": {
                    "type": "tool/invoke",
                    "invocation": {
                        "cell_id": cell,
                        "tool_name": {"name": name, "namespace": None},
                        "input": {"html": HOSTILE},
                    },
                },
            }
        ).encode()
    )
    writer.record_received(b"</script><script>window.pwned=6</script>")
    writer.record_received(b'{"type": "cell/closed", "cellId": ["not", "a", "string"]}')
    writer.record_sent(b'{"type":"delegate/response","id":7,"result":{"status":"error"}}')
    writer.close()
    return {"name": name, "cell": cell}


async def test_a_hostile_transcript_stays_text_in_a_real_browser(tmp_path: Path) -> None:
    transcript = tmp_path / "hostile.cbor"
    planted = hostile_transcript(transcript)
    out = tmp_path / "hostile.html"
    write_timeline(transcript, out)
    async with open_browser() as browser:
        page = await browser.load(out.as_uri())
        (bar,) = await bars(page, "tool-call")
        assert (bar["id"], bar["name"], bar["status"]) == ("7", planted["name"], "error")
        labels = await page.evaluate(
            "[...document.querySelectorAll('.lane > text')].map((e) => e.textContent)"
        )
        assert any(label.startswith(HOSTILE[:20]) for label in labels)
        assert await page.evaluate("window.pwned === undefined")
        assert await page.evaluate("document.images.length") == 0
        assert await page.evaluate("document.scripts.length") == 1
        assert await page.evaluate("document.querySelectorAll('[onclick],[onerror]').length") == 0
        assert page.problems == []


def test_show_html_on_the_command_line(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    command = [sys.executable, "-m", "codemode_trio", "transcript", "show"]
    done = subprocess.run(
        [*command, "--html", str(out), str(recorded)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert out.read_text(encoding="utf-8") == render_timeline(
        timeline_of(recorded), title=recorded.name
    )
    unwritable = subprocess.run(
        [*command, "--html", str(tmp_path / "no" / "page.html"), str(recorded)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unwritable.returncode == 2
    assert re.fullmatch(
        rf"codemode-trio: error: cannot write {re.escape(str(tmp_path))}/no/page.html: "
        r"No such file or directory \(os error 2\)\n",
        unwritable.stderr,
    )


def test_the_course_lesson_draws_three_overlapping_calls(
    rust_host_path: Path, tmp_path: Path
) -> None:
    # As docs/structured-concurrency.md ("Seeing it") tells the learner to run it.
    transcript = tmp_path / "lesson02.cbor"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CODEMODE_TRIO_TRANSCRIPT": str(transcript),
        "CODEX_CODE_MODE_HOST_PATH": str(rust_host_path),
    }
    lesson = subprocess.run(
        [sys.executable, "examples/02_tools.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert lesson.returncode == 0, lesson.stdout + lesson.stderr
    out = tmp_path / "lesson02.html"
    shown = subprocess.run(
        [*CLI_SHOW, "--html", str(out), str(transcript)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    (timeline,) = timeline_of(transcript)
    lanes = [lane for key, lane in timeline.lanes.items() if key != "connection"]
    squares = [s for s in lanes[0].spans if s.name == "slow_square"]
    assert len(squares) == 3
    # Every call started before every other one was answered: they overlapped.
    assert max(s.start_ns for s in squares) < min(s.end_ns or 0 for s in squares)
    assert [(s.name, s.status) for s in lanes[1].spans] == [("lookup", "error"), ("lookup", "ok")]
    assert [(s.name, s.status) for s in lanes[2].spans] == [("buggy", "error")]
    assert "error" in [m.kind for m in lanes[2].marks]
    markup = Markup()
    markup.feed(out.read_text(encoding="utf-8"))
    # Each bar's group, then its rectangle: the row it was drawn in is the rectangle's y.
    drawn: dict[str, str | None] = {}
    bar: dict[str, str | None] = {}
    for tag, attributes in markup.tags:
        if tag == "g" and attributes.get("data-kind") is not None:
            bar = attributes
        elif tag == "rect" and bar.get("data-kind") == "tool-call":
            drawn[str(bar["data-id"])] = attributes["y"]
            bar = {}
    rows = {drawn[s.delegate_id] for s in squares}
    assert len(rows) == 3  # stacked one above another, not drawn over each other
