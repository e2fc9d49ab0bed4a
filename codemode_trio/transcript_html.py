"""A transcript as one HTML page: a timeline per connection (``transcript show --html``).

Each connection recorded in the transcript becomes an SVG timeline with a lane per cell. A tool
call or a notification is a bar from its ``delegate/request`` to its ``delegate/response`` (or
to the ``delegate/cancel`` that abandoned it); an execute, a yield, a wait, a terminate, an
``operation/cancel``, a ``delegate/cancel``, a result, an error and a ``cell/closed`` are marks.
Hovering shows a summary, clicking shows the frames' payloads; below each timeline every frame
is listed.

Transcripts are shared as bug reports, so the page treats them as hostile. Everything taken from
the transcript is escaped here, on the way into the markup (control characters made visible
with :func:`~codemode_trio.transcript_view.terminal_safe`, then HTML-escaped), and the page's
only script copies text between elements with ``textContent``; it never parses markup. The page
is self-contained: no network access, no external script, font or style sheet, and a
Content-Security-Policy that allows nothing but the page's own inline style and script (by hash).
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import html
import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

import attrs

from ._oserror import os_error_text
from ._terminal import terminal_safe
from .errors import UsageError
from .transcript import CLIENT_TO_HOST, TranscriptFrame, TranscriptHeader, read_transcript_items

__all__ = [
    "ConnectionTimeline",
    "Frame",
    "Lane",
    "Mark",
    "Span",
    "render_timeline",
    "timeline_of",
    "write_timeline",
]

# How much of one payload the page shows: a 64 MiB frame would make a page no browser opens.
_MAX_PAYLOAD_CHARS: Final = 20_000


@attrs.define
class Span:
    """A tool call or a notification: from the host's request to the client's answer."""

    kind: str
    delegate_id: str
    name: str
    start_ns: int
    end_ns: int | None = None
    #: ``pending`` (never answered), ``ok``, ``error`` or ``cancelled`` (``delegate/cancel``).
    status: str = "pending"
    frames: list[str] = attrs.field(factory=list)


@attrs.define
class Mark:
    """One moment on a lane: a yield, a wait, a cancel, an error..."""

    kind: str
    at_ns: int
    label: str
    frames: list[str] = attrs.field(factory=list)


@attrs.define
class Lane:
    """A cell (or, for frames that belong to no cell, the connection itself)."""

    label: str
    spans: list[Span] = attrs.field(factory=list)
    marks: list[Mark] = attrs.field(factory=list)


@attrs.define
class Frame:
    """One frame as the page lists it."""

    at_ns: int
    direction: str
    kind: str
    text: str


@attrs.define
class ConnectionTimeline:
    """What one connection of a transcript did, in order, relative to its first frame."""

    number: int
    started_at: float | None
    lanes: dict[str, Lane] = attrs.field(factory=dict)
    frames: list[Frame] = attrs.field(factory=list)
    end_ns: int = 0

    def lane(self, key: str, label: str) -> Lane:
        """The lane called ``key``, created on first use."""
        return self.lanes.setdefault(key, Lane(label))


# --------------------------------------------------------------------------------------------
# reading: frames into lanes


def _get(value: object, *keys: str) -> object:
    """``value[k1][k2]...``, or None where the shape differs (the input is untrusted)."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, (int, float, bool)) else ""


def _payload_text(payload: bytes, decoded: object) -> str:
    try:
        text = json.dumps(decoded, indent=2, ensure_ascii=False) if decoded is not None else ""
    except (ValueError, RecursionError):
        text = ""
    if not text:
        text = payload.decode("utf-8", errors="replace")
    if len(text) > _MAX_PAYLOAD_CHARS:
        text = f"{text[:_MAX_PAYLOAD_CHARS]}… ({len(text) - _MAX_PAYLOAD_CHARS} more characters)"
    return text


def _outcome(value: object) -> tuple[str, str, object] | None:
    """The kind of a runtime response (``Yielded``/``Result``/``Terminated``), its cell, body."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (tag, body), *_ = value.items()
    if tag in ("LiveCell", "MissingCell") and isinstance(body, dict) and len(body) == 1:
        # One level only (a wait's outcome wraps a response): never recurse on hostile depth.
        (tag, body), *_ = body.items()
    if tag not in ("Yielded", "Result", "Terminated"):
        return None
    return tag, _text(_get(body, "cell_id")), body


class _Builder:
    """Turns one connection's frames into lanes, remembering what each id referred to."""

    def __init__(self, timeline: ConnectionTimeline) -> None:
        self.timeline = timeline
        self.start_ns: int | None = None
        # operation id -> (method, session id, cell id or "")
        self.operations: dict[str, tuple[str, str, str]] = {}
        # delegate id -> the open span it answers
        self.delegates: dict[str, Span] = {}
        # execute operation id -> its request (time, text), until the cell id is known
        self.pending_execute: dict[str, tuple[int, str]] = {}

    def cell_lane(self, session: str, cell: str) -> Lane:
        if not cell:
            return self.connection_lane()
        label = f"{session} · cell {cell}" if session else f"cell {cell}"
        return self.timeline.lane(f"cell:{session}\x00{cell}", label)

    def connection_lane(self) -> Lane:
        return self.timeline.lane("connection", "connection")

    def mark(self, lane: Lane, kind: str, at: int, label: str, text: str) -> None:
        lane.marks.append(Mark(kind, at, label, [text]))

    def add(self, frame: TranscriptFrame) -> None:
        if self.start_ns is None:
            self.start_ns = frame.monotonic_ns
        at = frame.monotonic_ns - self.start_ns
        self.timeline.end_ns = max(self.timeline.end_ns, at)
        try:
            decoded: object = json.loads(frame.payload)
        except (ValueError, RecursionError):
            decoded = None
        kind = _text(_get(decoded, "type")) or "undecodable"
        text = _payload_text(frame.payload, decoded)
        arrow = "client → host" if frame.direction == CLIENT_TO_HOST else "host → client"
        self.timeline.frames.append(Frame(at, arrow, kind, text))
        shown = f"{arrow} {kind} at +{at / 1e6:.3f} ms\n{text}"
        handler = _HANDLERS.get(kind)
        if handler is None or not handler(self, decoded, at, shown):
            # Handshakes, session open and shutdown, undecodable frames: the connection's lane.
            self.mark(self.connection_lane(), "frame", at, kind, shown)

    # Each handler returns False when the frame belongs on the connection's lane instead.

    def operation_request(self, message: object, at: int, shown: str) -> bool:
        op_id = _text(_get(message, "id"))
        method = _text(_get(message, "request", "method"))
        session = _text(_get(message, "request", "sessionId"))
        cell = ""
        if method == "session/wait":
            cell = _text(_get(message, "request", "request", "cell_id"))
        elif method == "session/terminate":
            cell = _text(_get(message, "request", "cellId"))
        self.operations[op_id] = (method, session, cell)
        if method == "session/execute":
            # The cell id arrives with execution/started; the mark waits for it.
            self.pending_execute[op_id] = (at, shown)
            return True
        if method in ("session/wait", "session/terminate") and cell:
            label = "wait" if method == "session/wait" else "terminate"
            self.mark(self.cell_lane(session, cell), label, at, f"{method} (op {op_id})", shown)
            return True
        return False

    def response(self, message: object, at: int, shown: str, *, initial: bool) -> bool:
        """An ``operation/response``, or (``initial``) an ``execute/initialResponse``."""
        op_id = _text(_get(message, "id"))
        method, session, cell = self.operations.get(op_id, ("", "", ""))
        result = _get(message, "result")
        if _get(result, "status") == "error":
            what = "execute" if initial else method or "operation"
            reason = _text(_get(result, "message"))
            self.mark(self.cell_lane(session, cell), "error", at, f"{what} failed: {reason}", shown)
            return True
        value = _get(result, "value")
        if not initial and _get(value, "type") == "execution/started":
            cell = _text(_get(value, "cellId"))
            self.operations[op_id] = (method, session, cell)
            requested = self.pending_execute.pop(op_id, None)
            if requested is not None and cell:
                start, request_text = requested
                lane = self.cell_lane(session, cell)
                self.mark(lane, "execute", start, f"session/execute (op {op_id})", request_text)
                self.mark(lane, "execute", at, "execution/started", shown)
                return True
            return False
        # An initial response is the runtime's response itself; an operation's wraps it.
        outcome = _outcome(value if initial else _get(value, "outcome"))
        if outcome is None:
            return False
        tag, body_cell, body = outcome
        lane = self.cell_lane(session, cell or body_cell)
        error = _get(body, "error_text")
        if tag == "Yielded":
            self.mark(lane, "yield", at, "Yielded", shown)
        elif tag == "Terminated":
            self.mark(lane, "terminated", at, "Terminated", shown)
        elif isinstance(error, str):
            self.mark(lane, "error", at, f"script error: {error}", shown)
        else:
            self.mark(lane, "result", at, "Result", shown)
        return True

    def operation_cancel(self, message: object, at: int, shown: str) -> bool:
        op_id = _text(_get(message, "id"))
        method, session, cell = self.operations.get(op_id, ("", "", ""))
        kind = "cancel" if _get(message, "type") == "operation/cancel" else "yield"
        label = f"{_get(message, 'type')} of {method or 'operation'} (op {op_id})"
        self.mark(self.cell_lane(session, cell), kind, at, label, shown)
        return True

    def delegate_request(self, message: object, at: int, shown: str) -> bool:
        delegate_id = _text(_get(message, "id"))
        session = _text(_get(message, "sessionId"))
        request = _get(message, "request")
        if _get(request, "type") == "tool/invoke":
            invocation = _get(request, "invocation")
            cell = _text(_get(invocation, "cell_id"))
            name = _text(_get(invocation, "tool_name", "name"))
            namespace = _text(_get(invocation, "tool_name", "namespace"))
            span = Span("tool-call", delegate_id, f"{namespace}.{name}" if namespace else name, at)
        elif _get(request, "type") == "notification/send":
            cell = _text(_get(request, "cellId"))
            span = Span("notification", delegate_id, "notify", at)
        else:
            return False
        span.frames.append(shown)
        self.cell_lane(session, cell).spans.append(span)
        self.delegates[delegate_id] = span
        return True

    def delegate_end(self, message: object, at: int, shown: str) -> bool:
        """A ``delegate/response`` or a ``delegate/cancel``: the end of its span."""
        delegate_id = _text(_get(message, "id"))
        span = self.delegates.pop(delegate_id, None)
        if span is None:
            return False
        span.end_ns = at
        span.frames.append(shown)
        if _get(message, "type") == "delegate/response":
            span.status = "error" if _get(message, "result", "status") == "error" else "ok"
            return True
        span.status = "cancelled"
        for lane in self.timeline.lanes.values():
            if span in lane.spans:
                self.mark(lane, "delegate-cancel", at, f"delegate/cancel {delegate_id}", shown)
        return True

    def cell_closed(self, message: object, at: int, shown: str) -> bool:
        session = _text(_get(message, "sessionId"))
        cell = _text(_get(message, "cellId"))
        if not cell:
            return False
        self.mark(self.cell_lane(session, cell), "closed", at, "cell/closed", shown)
        return True


_HANDLERS: dict[str, Callable[[_Builder, object, int, str], bool]] = {
    "operation/request": _Builder.operation_request,
    "operation/response": functools.partial(_Builder.response, initial=False),
    "execute/initialResponse": functools.partial(_Builder.response, initial=True),
    "operation/cancel": _Builder.operation_cancel,
    "operation/yield": _Builder.operation_cancel,
    "delegate/request": _Builder.delegate_request,
    "delegate/response": _Builder.delegate_end,
    "delegate/cancel": _Builder.delegate_end,
    "cell/closed": _Builder.cell_closed,
}


def timeline_of(path: str | os.PathLike[str]) -> list[ConnectionTimeline]:
    """Read the transcript at ``path`` into one timeline per recorded connection.

    Raises :class:`~codemode_trio.transcript.TranscriptError` for a file that is missing or
    not a well-formed transcript; payloads that are not the protocol's JSON are kept as
    frames on the connection's lane, never an error.
    """
    timelines: list[ConnectionTimeline] = []
    builder: _Builder | None = None
    for item in read_transcript_items(path):
        if isinstance(item, TranscriptHeader):
            timelines.append(ConnectionTimeline(len(timelines) + 1, item.started_at))
            builder = None
            continue
        if builder is None:
            if not timelines:
                timelines.append(ConnectionTimeline(1, None))
            builder = _Builder(timelines[-1])
        builder.add(item)
    return timelines


# --------------------------------------------------------------------------------------------
# rendering

_LABEL_WIDTH: Final = 190
_PLOT_WIDTH: Final = 960
_ROW: Final = 20
_AXIS: Final = 26
_CHAR: Final = 7  # about the width of one character of a bar's 11px label
_MARK_ROW: Final = 14
_T = TypeVar("_T")

_STYLE: Final = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 2em; }
.summary { color: #555; }
svg.timeline { display: block; border: 1px solid #ddd; background: #fcfcfc; }
svg text { font: 12px system-ui, sans-serif; fill: #333; }
.lane-bg { fill: #f3f4f6; fill-opacity: .6; } .lane-bg.odd { fill-opacity: 0; }
.axis line { stroke: #bbb; } .axis text { fill: #777; font-size: 11px; }
[data-kind] { cursor: pointer; } [data-kind]:focus { outline: none; }
[data-kind]:focus > .shape, .selected > .shape { stroke: #000; stroke-width: 2; }
.span .shape { stroke: none; rx: 3; }
.span[data-kind=tool-call] .shape { fill: #3b82f6; }
.span[data-kind=notification] .shape { fill: #10b981; }
.span[data-status=error] .shape { fill: #ef4444; }
.span[data-status=cancelled] .shape { fill: #9ca3af; }
.span[data-status=pending] .shape { fill: #fbbf24; }
.span text { fill: #fff; font-size: 11px; pointer-events: none; }
.span text.outside { fill: #333; }
.life { stroke: #9ca3af; stroke-width: 1; }
.mark .shape { stroke: #fff; stroke-width: 1; }
.mark[data-kind=execute] .shape { fill: #111827; }
.mark[data-kind=yield] .shape { fill: #f59e0b; }
.mark[data-kind=wait] .shape { fill: #8b5cf6; }
.mark[data-kind=terminate] .shape, .mark[data-kind=terminated] .shape { fill: #b91c1c; }
.mark[data-kind=cancel] .shape, .mark[data-kind=delegate-cancel] .shape { fill: #6b7280; }
.mark[data-kind=error] .shape { fill: #ef4444; }
.mark[data-kind=result] .shape { fill: #059669; }
.mark[data-kind=closed] .shape { fill: #d1d5db; }
.mark[data-kind=frame] .shape { fill: #cbd5e1; }
.legend span { display: inline-block; margin-right: 1em; }
#detail { position: sticky; bottom: 0; background: #fff; border-top: 2px solid #3b82f6;
  padding: .5em 0; max-height: 40vh; overflow: auto; }
#detail-title { font-weight: 600; }
pre { white-space: pre-wrap; word-break: break-all; margin: 0; font-size: 12px; }
table.frames { border-collapse: collapse; font-size: 12px; }
table.frames td { border-top: 1px solid #eee; padding: 2px 6px; vertical-align: top; }
"""

_SCRIPT: Final = """
"use strict";
(() => {
  const title = document.getElementById("detail-title");
  const body = document.getElementById("detail-body");
  const show = (element) => {
    for (const other of document.querySelectorAll(".selected")) {
      other.classList.remove("selected");
    }
    element.classList.add("selected");
    const summary = element.querySelector("title");
    const payload = element.querySelector("desc");
    title.textContent = summary ? summary.textContent : "";
    body.textContent = payload ? payload.textContent : "";
  };
  for (const element of document.querySelectorAll("svg [data-kind]")) {
    element.addEventListener("click", () => show(element));
    element.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        show(element);
      }
    });
  }
})();
"""

_LEGEND: Final = (
    ("tool call", "#3b82f6"),
    ("notification", "#10b981"),
    ("failed call", "#ef4444"),
    ("cancelled call", "#9ca3af"),
    ("unanswered call", "#fbbf24"),
    ("execute", "#111827"),
    ("yield", "#f59e0b"),
    ("wait", "#8b5cf6"),
    ("terminate", "#b91c1c"),
    ("cancel", "#6b7280"),
    ("result", "#059669"),
    ("error", "#ef4444"),
    ("cell closed", "#d1d5db"),
)


def _csp_hash(source: str) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def _esc(text: str) -> str:
    """Transcript text made inert twice over: visible controls, then HTML-escaped."""
    return html.escape(terminal_safe(text, keep_lines=True), quote=True)


def _rows(items: Iterable[_T], extent: Callable[[_T], tuple[float, float]]) -> list[int]:
    """A row for each item (in order) so that no two drawn items overlap, labels included.

    ``extent`` gives an item's left and right edge in pixels; overlapping calls, a call whose
    name spills past its bar, and marks too close to tell apart sit one above another.
    """
    ends: list[float] = []
    rows: list[int] = []
    for item in items:
        left, right = extent(item)
        for row, busy_until in enumerate(ends):
            if busy_until < left:
                ends[row] = right
                rows.append(row)
                break
        else:
            rows.append(len(ends))
            ends.append(right)
    return rows


def _milliseconds(ns: int) -> str:
    return f"+{ns / 1e6:.3f} ms"


def _ticks(end_ns: int) -> Iterator[int]:
    """About eight round tick positions across ``[0, end_ns]``."""
    step = 1
    while step * 8 < end_ns:
        for factor in (2, 5, 10):
            if step * factor * 8 >= end_ns or factor == 10:
                step *= factor
                break
    return iter(range(0, end_ns + 1, step))


def _svg(timeline: ConnectionTimeline) -> Iterator[str]:
    end = max(timeline.end_ns, 1)

    def x(ns: int) -> float:
        return _LABEL_WIDTH + _PLOT_WIDTH * ns / end

    def bar(span: Span) -> tuple[float, float]:
        left = x(span.start_ns)
        return left, max(x(span.end_ns if span.end_ns is not None else end) - left, 4.0)

    def extent(span: Span) -> tuple[float, float]:
        left, length = bar(span)
        name = span.name[:40]
        inside = length >= _CHAR * len(name) + 6
        return left, left + length + (0 if inside else _CHAR * len(name) + 8)

    def mark_extent(mark: Mark) -> tuple[float, float]:
        return x(mark.at_ns) - 6, x(mark.at_ns) + 6

    lanes = sorted(timeline.lanes.values(), key=lambda lane: lane.label != "connection")
    layout = []
    heights = []
    for lane in lanes:
        in_order = sorted(lane.marks, key=lambda mark: mark.at_ns)
        spans = sorted(lane.spans, key=lambda span: span.start_ns)
        mark_rows, span_rows = _rows(in_order, mark_extent), _rows(spans, extent)
        marks_height = max([_ROW, *(row * _MARK_ROW + _ROW for row in mark_rows)])
        marks = list(zip(in_order, mark_rows, strict=True))
        layout.append((lane, marks_height, marks, list(zip(spans, span_rows, strict=True))))
        heights.append(marks_height + max((row + 1 for row in span_rows), default=0) * _ROW + 8)
    total = _AXIS + sum(heights) + 4
    width = _LABEL_WIDTH + _PLOT_WIDTH + 80  # room for the last tick's label
    yield (
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{total}" viewBox="0 0 {width} {total}" role="img" '
        f'aria-label="timeline of connection {timeline.number}">'
    )
    yield '<g class="axis">'
    ticks = list(_ticks(end))
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1
    for tick in ticks:
        # As many decimals as the spacing needs: "+50 ms", "+0.25 ms".
        decimals = max(0, 7 - len(str(step)))
        label = f"+{tick / 1e6:.{decimals}f} ms" if step < 10**6 else f"+{tick // 10**6} ms"
        yield (
            f'<line x1="{x(tick):.1f}" y1="{_AXIS - 6}" x2="{x(tick):.1f}" y2="{total}"/>'
            f'<text x="{x(tick) + 2:.1f}" y="{_AXIS - 10}">{label}</text>'
        )
    yield "</g>"
    top = _AXIS
    for index, ((lane, marks_height, marks, rows), height) in enumerate(
        zip(layout, heights, strict=True)
    ):
        odd = " odd" if index % 2 else ""
        yield (
            f'<g class="lane" data-lane="{_esc(lane.label)}">'
            f'<rect class="lane-bg{odd}" x="0" y="{top}" width="{width}" height="{height}"/>'
            f'<text x="6" y="{top + 15}">{_esc(lane.label[:28])}</text>'
        )
        moments = [m.at_ns for m in lane.marks] + [s.start_ns for s in lane.spans]
        if moments and lane.label != "connection":
            # The cell's life, from its first frame to its last: a thin line under the marks.
            middle = top + _ROW / 2 + 2
            yield (
                f'<line class="life" x1="{x(min(moments)):.1f}" y1="{middle:.1f}" '
                f'x2="{x(max(m.at_ns for m in lane.marks) if lane.marks else end):.1f}" '
                f'y2="{middle:.1f}"/>'
            )
        for mark, mark_row in marks:
            cx, cy = x(mark.at_ns), top + _ROW / 2 + 2 + mark_row * _MARK_ROW
            points = f"{cx:.1f},{cy - 6:.1f} {cx + 5:.1f},{cy:.1f} {cx:.1f},{cy + 6:.1f} "
            points += f"{cx - 5:.1f},{cy:.1f}"
            yield (
                f'<g class="mark" data-kind="{mark.kind}" data-t="{mark.at_ns}" tabindex="0">'
                f"<title>{_esc(f'{mark.label} at {_milliseconds(mark.at_ns)}')}</title>"
                f"<desc>{_esc(chr(10).join(mark.frames))}</desc>"
                f'<polygon class="shape" points="{points}"/></g>'
            )
        for span, row in rows:
            left, length = bar(span)
            y = top + marks_height + row * _ROW + 3
            name = span.name[:40]
            if length >= _CHAR * len(name) + 6:
                where = f'x="{left + 3:.1f}"'
            else:  # too narrow to hold its name: the name follows the bar
                where = f'class="outside" x="{left + length + 3:.1f}"'
            label = f'<text {where} y="{y + 12}">{_esc(name)}</text>'
            answered = "" if span.end_ns is None else str(span.end_ns)
            summary = (
                f"{span.kind} {span.name} (delegate {span.delegate_id}): {span.status}, "
                f"{_milliseconds(span.start_ns)} to "
                + (_milliseconds(span.end_ns) if span.end_ns is not None else "the end")
            )
            yield (
                f'<g class="span" data-kind="{span.kind}" data-id="{_esc(span.delegate_id)}" '
                f'data-name="{_esc(span.name)}" data-status="{span.status}" '
                f'data-start="{span.start_ns}" data-end="{answered}" '
                f'tabindex="0"><title>{_esc(summary)}</title>'
                f"<desc>{_esc(chr(10).join(span.frames))}</desc>"
                f'<rect class="shape" x="{left:.1f}" y="{y}" width="{length:.1f}" '
                f'height="{_ROW - 4}"/>'
                f"{label}</g>"
            )
        yield "</g>"
        top += height
    yield "</svg>"


def _started(started_at: float | None) -> str:
    if started_at is None:
        return "start time not recorded"
    try:
        moment = datetime.datetime.fromtimestamp(started_at, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"started at unix time {started_at}"
    return "started " + moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _section(timeline: ConnectionTimeline) -> Iterator[str]:
    calls = sum(1 for lane in timeline.lanes.values() for s in lane.spans if s.kind == "tool-call")
    cells = sum(1 for key in timeline.lanes if key != "connection")
    yield f'<section class="connection" data-connection="{timeline.number}">'
    yield f"<h2>Connection {timeline.number}, {_esc(_started(timeline.started_at))}</h2>"
    yield (
        f'<p class="summary">{_count(len(timeline.frames), "frame")} over '
        f"{timeline.end_ns / 1e6:.3f} ms; {_count(cells, 'cell')}; "
        f"{_count(calls, 'tool call')}</p>"
    )
    if timeline.frames:
        yield from _svg(timeline)
        yield f"<details><summary>All {len(timeline.frames)} frames</summary>"
        yield '<table class="frames">'
        for frame in timeline.frames:
            yield (
                f"<tr><td>{_milliseconds(frame.at_ns)}</td><td>{frame.direction}</td>"
                f"<td>{_esc(frame.kind)}</td><td><pre>{_esc(frame.text)}</pre></td></tr>"
            )
        yield "</table></details>"
    else:
        yield "<p>no frames</p>"
    yield "</section>"


def render_timeline(timelines: list[ConnectionTimeline], *, title: str) -> str:
    """The whole page for ``timelines``: one self-contained HTML document.

    ``title`` (usually the transcript's file name) is escaped like everything else.
    """
    policy = (
        f"default-src 'none'; script-src {_csp_hash(_SCRIPT)}; style-src {_csp_hash(_STYLE)}; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    # Colours as SVG presentation attributes: the policy allows no inline style attribute.
    legend = "".join(
        f'<span><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" '
        f'rx="2" fill="{colour}"/></svg> {name}</span>'
        for name, colour in _LEGEND
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>Transcript timeline: {_esc(title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Transcript timeline: {_esc(title)}</h1>",
        f'<p class="legend">{legend}</p>',
        "<p>Bars run from a <code>delegate/request</code> to its answer; click a bar or a mark "
        "for its frames.</p>",
    ]
    if not timelines:
        parts.append("<p>no frames</p>")
    for timeline in timelines:
        parts.extend(_section(timeline))
    parts += [
        '<div id="detail" aria-live="polite"><div id="detail-title">Nothing selected</div>',
        '<pre id="detail-body"></pre></div>',
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_timeline(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Write the HTML timeline of the transcript at ``path`` to the file ``out``.

    Raises :class:`~codemode_trio.transcript.TranscriptError` for an unreadable transcript
    and :class:`~codemode_trio.UsageError` when ``out`` cannot be written.
    """
    page = render_timeline(timeline_of(path), title=os.path.basename(os.fspath(path)))
    try:
        with open(out, "w", encoding="utf-8") as file:
            file.write(page)
    except OSError as exc:
        raise UsageError(f"cannot write {os.fspath(out)}: {os_error_text(exc)}") from None
