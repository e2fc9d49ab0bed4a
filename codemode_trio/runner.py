"""What ``codemode-trio run`` does: run one JavaScript cell on the real host, with Python tools.

Output is streamed as the cell produces it: each observation's text goes to stdout when it
arrives (a cell that yields shows its output before it finishes), notifications go to stderr as
they arrive, and images or audio are shown as a short placeholder. With ``json_output`` every
output item, notification and the final outcome is one JSON object per line on stdout instead.
The exit status is 0 for a successful cell, 1 when the script threw (its error text goes to
stderr) or was terminated, 130 when interrupted. A cell is model-written code, so what it
prints has its control characters escaped unless ``raw`` is set.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import trio

from ._terminal import json_terminal_safe, terminal_safe
from .client.registry import ToolRegistry
from .connect.host import open_host_process
from .errors import UsageError
from .protocol.content import (
    AudioItem,
    ContentItem,
    ImageItem,
    Notification,
    RuntimeResponse,
    TextItem,
    ToolCall,
    ToolDefinition,
)
from .protocol.values import JSON

__all__ = ["describe_item", "load_tools", "run_cell"]


def _import_tools_module(spec: str) -> ModuleType:
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise UsageError(f"tools file not found: {spec}")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise UsageError(f"cannot import tools from {spec}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            # The user's module is broken, not this program: say where, in one line.
            del sys.modules[module_spec.name]
            raise UsageError(f"tools file {spec} failed to import: {_one_line(exc)}") from exc
        return module
    try:
        return importlib.import_module(spec)
    except Exception as exc:
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        if missing is not None and spec.startswith(missing):
            raise UsageError(f"cannot import tools module {spec!r}: {exc}") from exc
        raise UsageError(f"tools module {spec} failed to import: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_tools(spec: str, name: str | None = None) -> ToolRegistry:
    """Import ``spec`` (a module name or a ``.py`` path) and return its :class:`ToolRegistry`.

    With ``name``, that attribute is used; otherwise an attribute called ``tools``, otherwise
    the module's only ``ToolRegistry``. Raises :class:`UsageError` (naming the file and the
    error) when the module cannot be found, fails to import or has no such registry.
    """
    module = _import_tools_module(spec)
    if name is not None:
        registry = getattr(module, name, None)
        if not isinstance(registry, ToolRegistry):
            raise UsageError(f"{spec} has no ToolRegistry named {name!r}")
        return registry
    found = {k: v for k, v in vars(module).items() if isinstance(v, ToolRegistry)}
    if "tools" in found:
        return found["tools"]
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise UsageError(f"{spec} defines no ToolRegistry")
    raise UsageError(
        f"{spec} defines several ToolRegistry objects ({', '.join(sorted(found))}); "
        "pick one with --registry"
    )


def describe_item(item: ContentItem) -> str:
    """Render one content item for a terminal (images and audio as a placeholder)."""
    if type(item) is TextItem:
        return item.text
    url = item.image_url if type(item) is ImageItem else item.audio_url  # type: ignore[union-attr]
    media = url[5 : url.find(";")] if url.startswith("data:") and ";" in url else "unknown"
    payload = url.partition(",")[2].strip()
    size = len(payload) * 3 // 4 - (len(payload) - len(payload.rstrip("=")))
    if type(item) is ImageItem:
        detail = f", detail {item.detail}" if item.detail else ""
        return f"[image {media}, {size} bytes{detail}]"
    assert type(item) is AudioItem
    return f"[audio {media}, {size} bytes]"


class _Output:
    """Where a run's items, notifications and outcome go: terminal text, or JSON lines.

    Everything printed comes from the cell, which is model-written code: unless ``raw``, its
    control characters are escaped (:func:`terminal_safe`, keeping line breaks and tabs) so
    that it cannot drive the terminal. JSON lines stay valid JSON of the same values.
    """

    def __init__(self, out: TextIO, err: TextIO, *, json_lines: bool, raw: bool = False) -> None:
        self.out = out
        self.err = err
        self.json_lines = json_lines
        self.raw = raw

    def _print(self, text: str, file: TextIO) -> None:
        print(text if self.raw else terminal_safe(text, keep_lines=True), file=file, flush=True)

    def _emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False)
        print(line if self.raw else json_terminal_safe(line), file=self.out, flush=True)

    def item(self, item: ContentItem) -> None:
        if self.json_lines:
            self._emit(item.to_wire())
        else:
            self._print(describe_item(item), self.out)

    def note(self, note: Notification) -> None:
        if self.json_lines:
            self._emit({"type": "notification", "text": note.text})
        else:
            self._print(f"[notify] {note.text}", self.err)

    def outcome(self, kind: str, error_text: str | None) -> None:
        """The end of the run: a JSON line, or (in text mode) the reason it failed on stderr."""
        if self.json_lines:
            self._emit({"type": "outcome", "kind": kind, "error_text": error_text})
            return
        message = {
            "interrupted": "interrupted: cell terminated",
            "terminated": "cell was terminated",
        }.get(kind, error_text)
        if message is not None:
            self._print(message, self.err)


class _ShowingDelegate:
    """The tools module's registry, with each notification also shown to the user.

    Wrapping instead of replacing the registry's handler leaves the user's registry as it was.
    """

    def __init__(self, registry: ToolRegistry, output: _Output) -> None:
        self._registry = registry
        self._output = output

    def definitions(self) -> tuple[ToolDefinition, ...]:
        return self._registry.definitions()

    async def invoke_tool(self, call: ToolCall) -> JSON:
        return await self._registry.invoke_tool(call)

    def cell_closed(self, cell_id: str) -> None:
        self._registry.cell_closed(cell_id)

    async def notify(self, note: Notification) -> None:
        self._output.note(note)
        handler = self._registry.notification_handler
        if handler is not None:  # the tools module's own handler still runs
            await handler(note)


#: How often ``run`` observes the cell, so output streams out while the cell runs.
STREAM_YIELD_MS = 1_000
# How long an interrupted run waits for the host to confirm the termination.
_TERMINATE_ON_INTERRUPT_S = 5.0


async def run_cell(
    source: str,
    *,
    tools: ToolRegistry | None = None,
    host_path: str | os.PathLike[str] | None = None,
    yield_time_ms: int | None = STREAM_YIELD_MS,
    transcript: str | os.PathLike[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    handle_sigint: bool = False,
    json_output: bool = False,
    raw: bool = False,
) -> int:
    """Run ``source`` as one cell on a freshly spawned host; return the exit status.

    Every observation (the initial response, then waits of ``yield_time_ms``) prints the output
    produced since the previous one. With ``handle_sigint``, Ctrl-C cancels the run: the cell is
    terminated on the host, what it had produced since the last observation is printed, the
    host is reaped, and the status is 130. What the cell wrote is printed with its control
    characters escaped unless ``raw``.
    """
    output = _Output(
        out if out is not None else sys.stdout,
        err if err is not None else sys.stderr,
        json_lines=json_output,
        raw=raw,
    )
    delegate = _ShowingDelegate(tools if tools is not None else ToolRegistry(), output)
    wait_ms = STREAM_YIELD_MS if yield_time_ms is None else yield_time_ms

    interrupted = False
    response: RuntimeResponse | None = None
    async with (
        open_host_process(host_path, transcript=transcript) as conn,
        conn.open_session(delegate) as session,
        trio.open_nursery() as nursery,
    ):
        work = trio.CancelScope()
        if handle_sigint:

            async def on_sigint(*, task_status: trio.TaskStatus[None]) -> None:
                nonlocal interrupted
                # Ctrl-C becomes an ordinary cancellation of the work below, instead of a
                # KeyboardInterrupt landing in whichever task happens to be running.
                with trio.open_signal_receiver(signal.SIGINT) as signals:
                    task_status.started()
                    async for _ in signals:
                        interrupted = True
                        work.cancel()
                        return

            await nursery.start(on_sigint)
        cell = None
        with work:
            cell = await session.execute(source, yield_time_ms=yield_time_ms)
            response = await cell.initial_response()
            while True:
                for item in response.content_items:
                    output.item(item)
                if response.kind != "yielded":
                    break
                response = (await session.wait(cell.cell_id, yield_time_ms=wait_ms)).response
        if work.cancelled_caught and cell is not None:
            # Stop the cell on the host before the session and the process go away, and show
            # what it produced since the last observation.
            with trio.move_on_after(_TERMINATE_ON_INTERRUPT_S, shield=True):
                stopped = await session.terminate(cell.cell_id)
                if stopped.live:
                    for item in stopped.response.content_items:
                        output.item(item)
        nursery.cancel_scope.cancel()
    if interrupted or response is None:
        output.outcome("interrupted", None)
        return 130
    output.outcome(response.kind, response.error_text)
    return 1 if response.kind == "terminated" or response.error_text is not None else 0


def run_from_cli(
    source: str,
    *,
    tools_spec: str | None,
    registry_name: str | None,
    host_path: str | None,
    yield_time_ms: int | None,
    transcript: str | None,
    json_output: bool = False,
    raw: bool = False,
) -> int:
    """Synchronous entry point used by the CLI."""
    tools = load_tools(tools_spec, registry_name) if tools_spec else None
    return trio.run(
        lambda: run_cell(
            source,
            tools=tools,
            host_path=host_path,
            yield_time_ms=STREAM_YIELD_MS if yield_time_ms is None else yield_time_ms,
            transcript=transcript,
            handle_sigint=True,
            json_output=json_output,
            raw=raw,
        )
    )
