"""OpenTelemetry spans for cells and their delegate calls (the ``codemode-trio[otel]`` extra).

Off until :func:`instrument` is called; until then a cell costs one global read and this module
never imports :mod:`opentelemetry`. Once on:

- a span ``codemode.cell`` per cell, from ``execute`` to the cell's final response (or its
  close), a child of the span current in the task that called ``execute``/``run``;
- a child span ``codemode.tool NAME`` per tool call and ``codemode.notify`` per notification,
  current while the delegate runs (so the tool's own spans nest under it). Over gRPC a tool
  call that carries the host's ``traceparent`` has the host's span as its parent instead;
- attributes ``codemode.session_id``, ``codemode.cell_id``, ``codemode.tool.name`` and
  ``codemode.outcome`` (``ok``, ``error``, ``cancelled`` for delegate calls; ``result``,
  ``error``, ``terminated`` or ``closed`` for cells).

Over gRPC the caller's span goes to the host as a ``traceparent`` with ``OpenSession``, and the
cell's span with ``Execute``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from .client.delegates import Delegate, describe_delegate_error
from .protocol.content import Notification, RuntimeResponse, ToolCall
from .protocol.values import JSON

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["CellTrace", "current_traceparent", "instrument", "start_cell", "uninstrument"]

#: The tracer every new cell uses; None while tracing is off.
_tracer: Tracer | None = None


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Turn tracing on for every cell started from now on, in this process.

    ``tracer_provider`` defaults to OpenTelemetry's global provider. Raises ``ImportError``
    when ``opentelemetry-api`` is not installed (``pip install 'codemode-trio[otel]'``).
    """
    from opentelemetry import trace

    global _tracer
    _tracer = trace.get_tracer("codemode_trio", tracer_provider=tracer_provider)


def uninstrument() -> None:
    """Turn tracing off for cells started from now on (running cells keep their spans)."""
    global _tracer
    _tracer = None


def start_cell(session_id: str) -> CellTrace | None:
    """Open the span of a cell being executed (in the caller's task), or None when off."""
    tracer = _tracer
    return None if tracer is None else CellTrace(tracer, session_id)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current in this task, when tracing is on."""
    return None if _tracer is None else _traceparent(None)


def _traceparent(context: Context | None) -> str | None:
    # The W3C format whatever the application's global propagator is: that is what hosts read.
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=context)
    return carrier.get("traceparent")


class CellTrace:
    """The span of one cell, and the factory of its delegate calls' spans."""

    __slots__ = ("_context", "_ended", "_span", "_tracer")

    def __init__(self, tracer: Tracer, session_id: str) -> None:
        from opentelemetry import trace

        self._tracer = tracer
        self._span: Span = tracer.start_span(
            "codemode.cell", attributes={"codemode.session_id": session_id}
        )
        self._context: Context = trace.set_span_in_context(self._span)
        self._ended = False

    def traceparent(self) -> str | None:
        """The cell span's ``traceparent``, sent to a gRPC host with ``Execute``."""
        return _traceparent(self._context)

    def started(self, cell_id: str) -> None:
        """The host named the cell."""
        self._span.set_attribute("codemode.cell_id", cell_id)

    def observed(self, response: RuntimeResponse) -> None:
        """An observation of the cell arrived; a final one ends the span."""
        if response.kind == "yielded" or self._ended:
            return
        if response.kind == "result" and response.error_text is not None:
            self._end("error", response.error_text)
        else:
            self._end(response.kind, None)

    def closed(self) -> None:
        """The cell is gone (or never started): end the span if no final response did."""
        if not self._ended:
            self._end("closed", None)

    def _end(self, outcome: str, error: str | None) -> None:
        self._ended = True
        _finish(self._span, outcome, error)
        self._span.end()

    def wrap(self, delegate: Delegate) -> Delegate:
        """The delegate that runs each call of this cell under its own span."""
        return _TracedDelegate(delegate, self)

    def _host_parent(self, traceparent: str) -> Context | None:
        """The host's span of a call as a parent context; None for a malformed traceparent."""
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        extracted = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
        if not trace.get_current_span(extracted).get_span_context().is_valid:
            return None  # a hostile or broken host's text: keep our own tree
        return extracted

    def start_call(self, name: str, cell_id: str, traceparent: str | None, tool: str | None) -> Any:
        """Start a delegate call's span, current in the calling task (a context manager).

        Its parent is the host's span for the call when the host sent a ``traceparent``, with
        a link to the cell's span (the host may trace in a tree of its own); else the cell's.
        """
        from opentelemetry.trace import Link

        attributes: dict[str, str] = {"codemode.cell_id": cell_id}
        if tool is not None:
            attributes["codemode.tool.name"] = tool
        parent = self._context
        links: list[Link] = []
        if traceparent is not None:
            host = self._host_parent(traceparent)
            if host is not None:
                parent = host
                links.append(Link(self._span.get_span_context()))
        return self._tracer.start_as_current_span(
            name,
            context=parent,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )


def _finish(span: Span, outcome: str, error: str | None) -> None:
    from opentelemetry.trace import StatusCode

    span.set_attribute("codemode.outcome", outcome)
    if error is not None:
        span.set_status(StatusCode.ERROR, error)


class _TracedDelegate:
    """A delegate whose every call runs inside a span of its cell's trace."""

    __slots__ = ("_inner", "_trace")

    def __init__(self, inner: Delegate, trace: CellTrace) -> None:
        self._inner = inner
        self._trace = trace

    async def invoke_tool(self, call: ToolCall) -> JSON:
        with self._trace.start_call(
            f"codemode.tool {call.name}", call.cell_id, call.traceparent, call.name
        ) as span:
            try:
                result = await self._inner.invoke_tool(call)
            except trio.Cancelled:
                _finish(span, "cancelled", None)
                raise
            except Exception as exc:
                _finish(span, "error", describe_delegate_error(exc))
                raise
            _finish(span, "ok", None)
            return result

    async def notify(self, note: Notification) -> None:
        with self._trace.start_call("codemode.notify", note.cell_id, None, None) as span:
            try:
                await self._inner.notify(note)
            except trio.Cancelled:
                _finish(span, "cancelled", None)
                raise
            except Exception as exc:
                _finish(span, "error", type(exc).__name__)
                raise
            _finish(span, "ok", None)

    def cell_closed(self, cell_id: str) -> None:
        self._inner.cell_closed(cell_id)
