"""The timeline page of ``transcript show --html`` on transcripts no host wrote.

Any frame, well-formed or not, must give a page in which the transcript's text stays text:
no element, attribute or script that the page itself does not make. The page in a real
browser, and a transcript recorded on the real host, are in
``tests/integration/test_transcript_timeline.py``.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemode_trio.transcript import CLIENT_TO_HOST, HOST_TO_CLIENT, TranscriptWriter
from codemode_trio.transcript_html import render_timeline, timeline_of, write_timeline

# What the page itself is made of; anything else came from the transcript.
PAGE_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "span", "code", "svg",
    "rect", "g", "text", "line", "polygon", "desc", "section", "details", "summary", "table",
    "tr", "td", "pre", "div", "script",
}  # fmt: skip
PAGE_ATTRIBUTES = {
    "lang", "charset", "http-equiv", "content", "name", "class", "width", "height", "viewbox",
    "role", "aria-label", "aria-hidden", "aria-live", "xmlns", "x", "y", "x1", "x2", "y1", "y2",
    "rx", "fill", "points", "tabindex", "id", "data-kind", "data-id", "data-name",
    "data-status", "data-start", "data-end", "data-t", "data-lane", "data-connection",
}  # fmt: skip
MARKUP = "</script><img src=x onerror=alert(1)></desc></svg><script>alert(2)</script>\"'&"


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.update(name for name, _ in attrs)


def assert_inert(page: str) -> None:
    elements = Elements()
    elements.feed(page)
    assert set(elements.tags) <= PAGE_TAGS
    assert elements.attributes <= PAGE_ATTRIBUTES
    assert elements.tags.count("script") == 1


def write(path: Path, frames: list[tuple[str, bytes]]) -> Path:
    writer = TranscriptWriter(path)
    for direction, payload in frames:
        writer.record(direction, payload)
    writer.close()
    return path


def protocol_shaped(text: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Frames shaped like the protocol's, with hostile strings and odd types where ids go."""
    ids = st.one_of(st.integers(), text, st.none(), st.lists(st.integers(), max_size=2))
    shapes = st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.just("delegate/request"),
                "id": ids,
                "sessionId": text,
                "request": st.fixed_dictionaries(
                    {
                        "type": st.sampled_from(["tool/invoke", "notification/send", "x"]),
                        "cellId": text,
                        "invocation": st.fixed_dictionaries(
                            {"cell_id": text, "tool_name": st.fixed_dictionaries({"name": text})}
                        ),
                    }
                ),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(
                    ["delegate/response", "delegate/cancel", "operation/cancel"]
                ),
                "id": ids,
                "result": st.fixed_dictionaries({"status": st.sampled_from(["ok", "error"])}),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["operation/response", "execute/initialResponse"]),
                "id": ids,
                "result": st.fixed_dictionaries(
                    {
                        "status": st.sampled_from(["ok", "error"]),
                        "message": text,
                        "value": st.one_of(
                            st.fixed_dictionaries(
                                {"type": st.just("execution/started"), "cellId": text}
                            ),
                            st.fixed_dictionaries(
                                {
                                    "Result": st.fixed_dictionaries(
                                        {"cell_id": text, "error_text": text}
                                    )
                                }
                            ),
                        ),
                    }
                ),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("operation/request"),
                "id": ids,
                "request": st.fixed_dictionaries(
                    {
                        "method": st.sampled_from(
                            ["session/execute", "session/wait", "session/terminate"]
                        ),
                        "sessionId": text,
                        "cellId": text,
                    }
                ),
            }
        ),
        st.fixed_dictionaries({"type": st.just("cell/closed"), "sessionId": text, "cellId": text}),
    )
    return shapes.map(lambda message: json.dumps(message).encode())


HOSTILE_TEXT = st.one_of(st.text(max_size=30), st.just(MARKUP), st.sampled_from(["1", "2"]))
FRAMES = st.lists(
    st.tuples(
        st.sampled_from([CLIENT_TO_HOST, HOST_TO_CLIENT]),
        st.one_of(protocol_shaped(HOSTILE_TEXT), st.binary(max_size=40), st.just(MARKUP.encode())),
    ),
    max_size=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=FRAMES)
def test_any_frames_give_an_inert_page(tmp_path: Path, frames: list[tuple[str, bytes]]) -> None:
    path = tmp_path / "t.cbor"
    path.unlink(missing_ok=True)
    write(path, frames)
    page = render_timeline(timeline_of(path), title=MARKUP)
    assert_inert(page)
    (timeline,) = timeline_of(path)
    assert len(timeline.frames) == len(frames)


def test_deeply_nested_payloads_are_frames_not_crashes(tmp_path: Path) -> None:
    deep = b'{"type":"operation/response","id":1,"result":{"status":"ok","value":{"outcome":'
    deep += b'{"LiveCell":' * 5000 + b"{}" + b"}" * 5000 + b"}}}"
    path = write(tmp_path / "deep.cbor", [(HOST_TO_CLIENT, deep), (HOST_TO_CLIENT, b"[" * 100_000)])
    (timeline,) = timeline_of(path)
    assert [frame.kind for frame in timeline.frames] == ["undecodable", "undecodable"]
    assert_inert(render_timeline([timeline], title="deep"))


def test_a_huge_payload_is_shortened_in_the_page(tmp_path: Path) -> None:
    path = write(tmp_path / "big.cbor", [(HOST_TO_CLIENT, b"x" * 1_000_000)])
    out = tmp_path / "big.html"
    write_timeline(path, out)
    assert out.stat().st_size < 200_000
    assert "more characters)" in out.read_text(encoding="utf-8")


def test_an_empty_transcript_says_no_frames(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.cbor", [])
    (timeline,) = timeline_of(path)
    assert timeline.frames == [] and timeline.lanes == {}
    page = render_timeline([timeline], title="empty.cbor")
    assert "<p>no frames</p>" in page
    assert_inert(page)


def test_each_connection_of_a_file_is_its_own_timeline(tmp_path: Path) -> None:
    path = tmp_path / "two.cbor"
    write(path, [(CLIENT_TO_HOST, b"{}")])
    write(path, [(CLIENT_TO_HOST, b"{}"), (HOST_TO_CLIENT, b"{}")])
    first, second = timeline_of(path)
    assert (first.number, len(first.frames)) == (1, 1)
    assert (second.number, len(second.frames)) == (2, 2)
    assert second.frames[0].at_ns == 0  # times restart: each connection has its own clock
