r"""The cell runtime of the reference host: real JavaScript on V8 through mini-racer.

:class:`V8CellRuntime` implements :class:`~codemode_trio.host.runtime.CellRuntime`. Each cell
gets a fresh isolate (:mod:`codemode_trio.host.v8_engine`) with the globals of host 0.171.0
and no others (``v8_prelude.js``, whose bridge to Python no global reaches). The script runs on
the isolate's thread; everything it asks of the host reaches the Trio task awaiting
:meth:`V8CellRuntime.run`, which calls the shell's
:class:`~codemode_trio.host.runtime.CellHooks`. Many cells run concurrently under one Trio loop.
What arrives from the isolate is checked before it is used: a malformed message ends its cell
with an error, never the connection.

How a cell ends:

* the script finishes, throws, or calls ``exit()``: ``run`` returns a :class:`CellOutcome`;
* ``run``'s caller is cancelled (terminate, shutdown): the isolate is freed, which stops the
  script at once, even in ``while (true) {}``.

Either way, every ``call_tool`` still being awaited (a tool call the script did not await) is
**cancelled before run returns**: the shell sees ``trio.Cancelled`` inside its ``call_tool`` and
answers it with ``delegate/cancel``, so that frame precedes the cell's final response, as with
the reference host. Pending ``setTimeout`` callbacks are dropped.

The hooks are called on the Trio thread, in the order the script caused them. ``load`` and
``notify`` run while the script waits (they are synchronous in JavaScript): a
:class:`~codemode_trio.host.runtime.ToolCallRejected` raised by ``notify`` is thrown at the
script's ``notify()`` call. Any other exception from a hook is the shell's bug: the cell stops
and ``run`` raises it.

The body is compiled as an async function (mini-racer has no modules) inside a wrapper function,
the script's value, which Python hands to the prelude; it is laid out so that stack positions
read as the reference host's: ``Error: boom\n    at exec_main.mjs:1:7``. Having no
module loader either, it would refuse ``import(...)`` with its own error and ``import.meta``
as a SyntaxError: both are rewritten first (:mod:`codemode_trio.host.dynamic_import`) to a
function of the prelude that answers as the reference host does.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

import trio

from ..protocol.content import AudioItem, ContentItem, ImageItem, TextItem, ToolDefinition
from ..protocol.toolnames import normalize_identifier
from .audio_clip import SHORT_CLIP_TEXT, is_short_wav
from .dynamic_import import (
    REPLACEMENT,
    ImportKind,
    Stopped,
    check_source,
    find_imports,
    runtime_source,
    static_import_specifier,
)
from .runtime import MISSING, CellHooks, CellOutcome, ToolCallRejected
from .v8_engine import EvalFailure, Isolate

__all__ = ["DEFAULT_HEAP_LIMIT_BYTES", "MIN_HEAP_LIMIT_BYTES", "V8CellRuntime"]

#: The heap cap of a cell whose session set no ``maxHeapSizeBytes``. V8 aborts the whole
#: process when a heap outgrows its own limit; a cap below that makes a runaway cell fail alone.
DEFAULT_HEAP_LIMIT_BYTES = 1024 * 1024 * 1024

#: The smallest cap applied: the reference host does not enforce ``maxHeapSizeBytes`` at all,
#: so a tiny value must not break cells that it would run.
MIN_HEAP_LIMIT_BYTES = 64 * 1024 * 1024

_MODULE_NAME = "exec_main.mjs"
# The body starts on line 1 after this prefix; the prelude shifts positions on line 1 back.
# The script's value is the outer function, which binds what import() and import.meta were
# rewritten to in the body's own scope: no global, and a script's own declarations can only
# shadow it.
_PREFIX = f'"use strict";(function ({REPLACEMENT}) {{ return async function () {{'
_SUFFIX = f"\n}}}})\n//# sourceURL={_MODULE_NAME}"
# What the reference host says of a stray `}`: the only way for a body to make the script's
# value something other than the wrapper (the engine reports it as "not-a-function").
_STRAY_BRACE = "SyntaxError: Unexpected token '}'"

# How many posted evaluations (timer callbacks) may wait in an isolate's queue.
_MAX_QUEUED_POSTS = 1024

# How long the end of a cell waits for V8 to free its isolate (normally about a millisecond).
_CLOSE_TIMEOUT = 30.0

_PRELUDE: str | None = None


def _prelude() -> str:
    global _PRELUDE
    if _PRELUDE is None:
        _PRELUDE = resources.files(__package__).joinpath("v8_prelude.js").read_text("utf-8")
    return _PRELUDE


# `export` before a declaration is dropped, as in the reference host (which ignores exports);
# blanked rather than removed, so that positions stay put.
_EXPORT = re.compile(r"^([ \t]*)export[ \t]+(?=(?:const|let|var|function|class|async)\b)", re.M)


def _as_body(source: str) -> str:
    """``source`` made valid as a function body, with every position unchanged."""
    # A hashbang is only allowed at the very start of a script: it becomes a line comment.
    if source.startswith("#!"):
        source = "//" + source[2:]
    return _EXPORT.sub(lambda m: m[1] + " " * (len(m[0]) - len(m[1])), source)


def _wrapped_sources(
    source: str, stop: threading.Event | None = None
) -> tuple[str | None, str, str | None]:
    """The import check's source, the script to run, and the first static import's module.

    The check's source is ``None`` if none is needed, the module (for the error V8 gives a
    static import) if there is none. The script is the body with its ``import(...)`` and
    ``import.meta`` rewritten, in the wrapper that binds their replacement. A module's syntax
    errors at those places are V8's to find, in the body nearly as written, which the prelude
    compiles first. Setting ``stop`` ends the work early with
    :class:`~codemode_trio.host.dynamic_import.Stopped`.
    """

    def checkpoint() -> None:
        if stop is not None and stop.is_set():
            raise Stopped

    body = _as_body(source)
    sites = find_imports(body, checkpoint=checkpoint)
    rewritten = any(site.kind is not ImportKind.STATEMENT for site in sites)
    check = check_source(body, sites) if rewritten else None
    specifier = static_import_specifier(body, sites)
    return check, _PREFIX + runtime_source(body, sites) + _SUFFIX, specifier


def _syntax_error_text(message: str, specifier: str | None) -> str:
    """The reference host's text for a script that does not compile."""
    # mini-racer's message ends with V8's "SyntaxError: ..." line, after a source excerpt.
    lines = [line for line in message.splitlines() if line.strip()]
    last = lines[-1] if lines else message
    if last == "SyntaxError: Cannot use import statement outside a module":
        return f"Unsupported import in exec: {specifier or ''}"
    return last


_SHAPES: dict[str, tuple[type, ...]] = {
    "emit": (dict,),
    "yield": (),
    "done": (),
    "exit": (),
    "store": (str, str),
    "call": (int, str, str),
    "timers": (list,),  # [id, delay, id, delay, ...]
    "syntax": (str,),
    "error": (str,),
}
_ITEM_FIELDS = {
    "input_text": ("text",),
    "input_image": ("image_url", "detail"),
    "input_audio": ("audio_url",),
}


class _Malformed(ValueError):
    """What the isolate sent is not a message of the bridge."""


def _parse_message(text: str) -> list[Any]:
    """A message from the prelude, checked; the JSON a ``store`` or ``call`` carries is decoded."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Malformed(f"not JSON ({exc})") from None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        raise _Malformed("not an array starting with a kind")
    shape = _SHAPES.get(message[0])
    if shape is None:
        raise _Malformed(f"unknown kind {message[0]!r}")
    fields = message[1:]
    if len(fields) != len(shape) or not all(
        isinstance(field, kind) and not isinstance(field, bool)
        for field, kind in zip(fields, shape, strict=True)
    ):
        raise _Malformed(f"a {message[0]!r} message of the wrong shape")
    if message[0] == "emit":
        item = message[1]
        kind = item.get("type")
        names = _ITEM_FIELDS.get(kind) if type(kind) is str else None  # [] is not hashable
        if names is None or not all(isinstance(item.get(name), str) for name in names):
            raise _Malformed("an output item of the wrong shape")
    elif message[0] == "timers":
        pairs = message[1]
        ids, delays = pairs[0::2], pairs[1::2]
        if len(ids) != len(delays) or not all(
            type(timer_id) is int and type(delay) in (int, float) and 0 <= delay < math.inf
            for timer_id, delay in zip(ids, delays, strict=True)
        ):
            raise _Malformed("a 'timers' message of the wrong shape")
    elif message[0] in ("store", "call"):
        try:
            message[-1] = json.loads(message[-1])
        except (ValueError, RecursionError) as exc:
            raise _Malformed(f"a {message[0]!r} message with a bad value ({exc})") from None
    return message


def _parse_sync_request(text: str) -> tuple[str, str]:
    """A synchronous request from the prelude, checked: ``["notify" | "load", text]``."""
    try:
        request = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Malformed(f"not JSON ({exc})") from None
    if (
        not isinstance(request, list)
        or len(request) != 2
        or request[0] not in ("notify", "load")
        or not isinstance(request[1], str)
    ):
        raise _Malformed("not a notify or load request")
    return request[0], request[1]


def _malformed_text(problem: _Malformed) -> str:
    return f"code-mode host: the cell's bridge sent {problem}"


def _content_item(data: dict[str, Any]) -> ContentItem:
    kind = data["type"]
    if kind == "input_text":
        return TextItem(data["text"])
    if kind == "input_image":
        return ImageItem(data["image_url"], data["detail"])
    if is_short_wav(data["audio_url"]):
        return TextItem(SHORT_CLIP_TEXT)
    return AudioItem(data["audio_url"])


# What V8 rejects a dynamic import() with when the embedder has no module loader.
_V8_DYNAMIC_IMPORT_ERROR = "Error: Not supported\n"


class V8CellRuntime:
    """Runs each cell in a fresh V8 isolate (see the module docstring).

    V8 is initialised when the first isolate opens, unless the program did it first with
    :func:`~codemode_trio.host.v8_engine.initialize_v8`: a program that calls that on its main
    thread before starting any thread keeps V8's memory protection keys; otherwise V8 runs
    without them, so that isolates work on every thread.

    ``default_heap_limit_bytes`` caps a cell whose session gave no ``maxHeapSizeBytes``;
    ``memory_poll_interval`` is how often (seconds) a cell checks whether V8 stopped it for
    passing the cap, since V8 reports that only through a flag.
    """

    def __init__(
        self,
        *,
        default_heap_limit_bytes: int = DEFAULT_HEAP_LIMIT_BYTES,
        memory_poll_interval: float = 0.1,
    ) -> None:
        self._default_heap_limit = default_heap_limit_bytes
        self._poll_interval = memory_poll_interval

    def heap_limit_for(self, max_heap_size_bytes: int | None) -> int:
        """The V8 heap cap asked for a cell of a session with this ``maxHeapSizeBytes``.

        A session's value can only lower the default cap, never below
        :data:`MIN_HEAP_LIMIT_BYTES`. The isolate lowers it further if V8's own heap limit
        (which aborts the process) is near.
        """
        if max_heap_size_bytes is None:
            return self._default_heap_limit
        return max(MIN_HEAP_LIMIT_BYTES, min(self._default_heap_limit, max_heap_size_bytes))

    async def run(
        self,
        source: str,
        tools: Sequence[ToolDefinition],
        hooks: CellHooks,
        *,
        max_heap_size_bytes: int | None,
    ) -> CellOutcome:
        """Run ``source`` to its end (see :class:`~codemode_trio.host.runtime.CellRuntime`)."""
        cell = _Cell(hooks, self.heap_limit_for(max_heap_size_bytes), self._poll_interval)
        return await cell.run(source, tools)


class _Cell:
    """One run of one cell: the isolate, its tool calls and timers."""

    def __init__(self, hooks: CellHooks, heap_limit: int, poll_interval: float) -> None:
        self._hooks = hooks
        self._heap_limit = heap_limit
        self._poll_interval = poll_interval
        self._outcome: CellOutcome | None = None
        self._fault: BaseException | None = None
        self._ended = trio.Event()
        self._isolate: Isolate | None = None
        self._nursery: trio.Nursery | None = None
        self._last_call_turn: trio.Event | None = None
        self._timers: list[tuple[float, int]] = []
        self._timers_changed = trio.Event()
        self._source = ""
        self._specifier: str | None = None

    async def run(self, source: str, tools: Sequence[ToolDefinition]) -> CellOutcome:
        self._source = source
        token = trio.lowlevel.current_trio_token()

        def open_isolate() -> None:
            # Kept from the worker thread itself: if this task is cancelled meanwhile, the
            # thread still finishes, and the finally clause below must find what it opened.
            self._isolate = Isolate.open(
                token,
                self._on_message,
                self._on_failure,
                self._on_sync,
                prelude=_prelude(),
                heap_limit_bytes=self._heap_limit,
            )

        # Lexing a large cell takes a while: on a thread rather than on the Trio thread, and
        # abandoned at once when the cell is cancelled (terminated, or its client gone),
        # which also makes the lexer stop at its next checkpoint.
        stop = threading.Event()
        try:
            check, script, self._specifier = await trio.to_thread.run_sync(
                _wrapped_sources, source, stop, abandon_on_cancel=True
            )
        except BaseException:
            stop.set()
            raise
        try:
            await trio.to_thread.run_sync(open_isolate)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._run_timers)
                nursery.start_soon(self._watch_memory)
                bindings = [[normalize_identifier(t.name), t.description] for t in tools]
                self._post(["run", bindings, source, len(_PREFIX), check])
                # Evaluated directly (not by JavaScript's eval), so that frames are unnamed
                # like a module's; a syntax error comes back as a failed evaluation.
                if self._outcome is None and self._isolate is not None:
                    self._isolate.run_cell(script)
                await self._ended.wait()
                # Un-awaited tool calls are cancelled here, before the outcome is returned.
                nursery.cancel_scope.cancel()
            if self._fault is not None:
                raise self._fault
            assert self._outcome is not None
            return self._outcome
        finally:
            self._end()
            if self._isolate is not None:
                with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                    # Freeing the context terminates any running script; it waits for the
                    # isolate's thread, so it must not run on the Trio thread. Should V8 never
                    # let go, the thread is left to finish on its own.
                    await trio.to_thread.run_sync(self._isolate.close, abandon_on_cancel=True)

    def _post(self, message: list[Any]) -> None:
        # Python's requests to the prelude (see v8_prelude.js's dispatch).
        if self._outcome is None and self._isolate is not None:
            self._isolate.dispatch(json.dumps(message))

    def _end(self, error_text: str | None = None) -> None:
        if self._outcome is None:
            self._outcome = CellOutcome(error_text)
            self._ended.set()

    # ------------------------------------------------------------ calls from the isolate
    # These run on the Trio thread, as run_sync_soon callbacks: they must never raise, so a
    # failure of the shell's hooks is kept and re-raised by run().

    def _on_message(self, text: str) -> None:
        if self._outcome is not None:
            return
        try:
            message = _parse_message(text)
        except _Malformed as problem:
            self._end(_malformed_text(problem))
            return
        try:
            self._handle(message)
        except Exception as exc:
            self._fault = exc
            self._end()

    def _on_failure(self, failure: EvalFailure) -> None:
        isolate = self._isolate
        if isolate is not None and isolate.heap_limit_reached():
            self._end(self._out_of_memory())
        elif failure.kind == "parse":
            self._end(_syntax_error_text(failure.message, self._specifier))
        elif failure.kind == "not-a-function":
            self._end(_STRAY_BRACE)
        else:
            # The prelude catches the script's errors, so this is a termination or a fault of
            # the bridge itself; either way the cell cannot continue.
            self._end(failure.message)

    def _on_sync(self, request: str) -> str:
        # load(key) or notify(text), while the script waits. The answer starts with a tag
        # (see v8_prelude.js's request()): "o" done, "m" no value, "v" + JSON, "e" + the text
        # of a refusal the script sees thrown.
        if self._outcome is not None:
            return "m"
        try:
            kind, argument = _parse_sync_request(request)
            if kind == "notify":
                self._hooks.notify(argument)
                return "o"
            value = self._hooks.load(argument)
            if value is MISSING:
                return "m"
            return "v" + json.dumps(value)
        except _Malformed as problem:
            self._end(_malformed_text(problem))
        except ToolCallRejected as refused:
            return "e" + refused.message
        except Exception as exc:  # the shell's fault: run() re-raises it
            self._fault = exc
            self._end()
        return "m"

    def _out_of_memory(self) -> str:
        applied = self._isolate.heap_limit_bytes if self._isolate else self._heap_limit
        return f"RangeError: the cell ran out of memory (V8 heap limit {applied} bytes)"

    def _handle(self, message: list[Any]) -> None:
        hooks = self._hooks
        kind = message[0]
        if kind == "emit":
            hooks.emit(_content_item(message[1]))
        elif kind == "yield":
            hooks.yield_control()
        elif kind == "store":
            hooks.store(message[1], message[2])  # decoded by _parse_message
        elif kind == "call":
            assert self._nursery is not None
            # Calls reach the shell in the order the script made them (the shell numbers them
            # as it receives them), though Trio may start a batch of new tasks in any order.
            previous, turn = self._last_call_turn, trio.Event()
            self._last_call_turn = turn
            self._nursery.start_soon(
                self._call_tool, message[1], message[2], message[3], previous, turn
            )
        elif kind == "timers":
            pairs = message[1]  # [id, delay, id, delay, ...]
            for index in range(0, len(pairs) - 1, 2):
                self._add_timer(pairs[index], pairs[index + 1])
        elif kind == "syntax":
            # The prelude's compile of the source with its import() calls as written failed.
            self._end(_syntax_error_text(message[1], self._specifier))
        elif kind == "error":
            # Already the reference host's text (the prelude's errorText), but for one case
            # only the bridge can tell: an import() the rewrite cannot reach (in code given to
            # eval or Function) is refused by V8, which has no module loader, with
            # "Error: Not supported", where the reference host says it its own way.
            text = message[1]
            if text.startswith(_V8_DYNAMIC_IMPORT_ERROR) and "import" in self._source:
                text = "unsupported import in exec"
            self._end(text)
        else:  # "done" and "exit"
            self._end()

    # ------------------------------------------------------------ tool calls

    async def _call_tool(
        self,
        call_id: int,
        binding: str,
        input_value: Any,
        previous: trio.Event | None,
        turn: trio.Event,
    ) -> None:
        try:
            if previous is not None and not previous.is_set():
                await previous.wait()
        finally:
            turn.set()  # also when cancelled: the calls after this one must not hang
        try:
            result = await self._hooks.call_tool(binding, input_value)
            settlement = ["settle", call_id, True, json.dumps(result)]
        except ToolCallRejected as rejected:
            settlement = ["settle", call_id, False, rejected.message]
        except Exception as exc:  # the shell's fault: run() re-raises it, unwrapped
            self._fault = exc
            self._end()
            return
        self._post(settlement)

    # ------------------------------------------------------------ timers and memory

    def _add_timer(self, timer_id: int, delay_ms: float) -> None:
        # The prelude sends a finite delay of at least 0 (see setTimeout there).
        deadline = trio.current_time() + delay_ms / 1000
        heapq.heappush(self._timers, (deadline, timer_id))
        self._timers_changed.set()

    async def _run_timers(self) -> None:
        # One loop, so that timers due at the same time fire in the order they were set.
        while True:
            self._timers_changed = trio.Event()
            if not self._timers:
                await self._timers_changed.wait()
                continue
            with trio.move_on_at(self._timers[0][0]):
                await self._timers_changed.wait()
                continue
            now = trio.current_time()
            while self._timers and self._timers[0][0] <= now:
                _, timer_id = heapq.heappop(self._timers)
                # One evaluation per timer: microtasks run between callbacks, as in a browser.
                self._post(["fire", timer_id])
                await self._keep_queue_short()

    async def _keep_queue_short(self) -> None:
        # Hundreds of thousands of timers may be due at once: posted in one go, they would
        # hold the Trio thread (every connection's) for seconds and queue as many calls in
        # the isolate, which freeing it then has to discard. So at most _MAX_QUEUED_POSTS
        # wait in the isolate, and the loop yields while they run.
        isolate = self._isolate
        if isolate is not None and isolate.posted - isolate.finished >= _MAX_QUEUED_POSTS:
            shorter = trio.Event()
            isolate.when_queue_below(_MAX_QUEUED_POSTS // 2, lambda _: shorter.set())
            await shorter.wait()

    async def _watch_memory(self) -> None:
        # V8 stops a script that passes the heap cap without any result to report (for
        # example inside a promise continuation), so the flag is polled.
        isolate = self._isolate
        assert isolate is not None  # started once the isolate is open
        while True:
            await trio.sleep(self._poll_interval)
            if isolate.heap_limit_reached():
                self._end(self._out_of_memory())
                return
