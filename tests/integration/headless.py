"""A real headless Chromium driven over the DevTools protocol (for the HTML timeline's tests).

``open_browser()`` starts ``chromium --headless`` with a throwaway profile and yields a
:class:`Browser`; :meth:`Browser.load` opens a page in a new tab and returns a :class:`Page`
that remembers every console message, uncaught exception, log entry (CSP violations land there)
and network request the page made, and can evaluate JavaScript in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

# A whole page's DOM can come back in one message.
_MAX_MESSAGE = 64 * 1024 * 1024
# The Debian package's name, and the other names it goes by.
_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str:
    """The Chromium binary; its absence FAILS the test (never skipped), naming the fix."""
    for name in _NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.fail("a headless Chromium is required: apt-get install -y chromium (.ci/run does)")


class DevTools:
    """One DevTools websocket: numbered calls, and every event kept for the test to read."""

    def __init__(self, socket: WebSocketConnection) -> None:
        self._socket = socket
        self._next_id = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self._arrived = trio.Event()
        self.events: list[dict[str, Any]] = []

    async def read_messages(self) -> None:
        """Route answers to their callers and keep events, until the socket closes."""
        while True:
            message = json.loads(await self._socket.get_message())
            if "id" in message:
                self._answers[message["id"]] = message
            else:
                self.events.append(message)
            self._arrived.set()
            self._arrived = trio.Event()

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        """Send ``method`` and return its result; a DevTools error fails the test."""
        self._next_id += 1
        number = self._next_id
        request: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session is not None:
            request["sessionId"] = session
        await self._socket.send_message(json.dumps(request))
        while number not in self._answers:
            await self._arrived.wait()
        answer = self._answers.pop(number)
        assert "error" not in answer, f"{method}: {answer['error']}"
        result: dict[str, Any] = answer["result"]
        return result

    async def event(self, method: str, session: str) -> dict[str, Any]:
        """The first event ``method`` of ``session``, waiting for it if it has not come yet."""
        while True:
            for event in self.events:
                if event["method"] == method and event.get("sessionId") == session:
                    return event
            await self._arrived.wait()


class Page:
    """A tab that has loaded one URL."""

    def __init__(self, tools: DevTools, session: str) -> None:
        self._tools = tools
        self._session = session

    def _events(self, *methods: str) -> list[dict[str, Any]]:
        return [
            event["params"]
            for event in self._tools.events
            if event.get("sessionId") == self._session and event["method"] in methods
        ]

    @property
    def problems(self) -> list[dict[str, Any]]:
        """Console messages, uncaught exceptions and log entries (CSP reports among them)."""
        return self._events("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")

    @property
    def requests(self) -> list[str]:
        """Every URL the page asked for, itself included."""
        return [params["request"]["url"] for params in self._events("Network.requestWillBeSent")]

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a thrown error fails the test)."""
        result = await self._tools.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self._session,
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")


class Browser:
    """A running headless Chromium."""

    def __init__(self, tools: DevTools) -> None:
        self._tools = tools

    async def load(self, url: str) -> Page:
        """Open ``url`` in a new tab, with every event domain the tests read switched on first."""
        target = await self._tools.call("Target.createTarget", {"url": "about:blank"})
        attached = await self._tools.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        session = attached["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            await self._tools.call(f"{domain}.enable", session=session)
        await self._tools.call("Page.navigate", {"url": url}, session=session)
        await self._tools.event("Page.loadEventFired", session)
        return Page(self._tools, session)


async def _discard(stream: trio.abc.ReceiveStream) -> None:
    # Chromium keeps writing to stderr; a full pipe would stall it.
    async for _ in stream:
        pass


@asynccontextmanager
async def open_browser() -> AsyncIterator[Browser]:
    """Start a headless Chromium (throwaway profile) and stop it afterwards."""
    binary = chromium_path()
    # Chromium's helper processes may still be writing the profile as it is removed: a leftover
    # file is no test failure.
    with tempfile.TemporaryDirectory(
        prefix="codemode-trio-chromium-", ignore_cleanup_errors=True
    ) as profile:
        argv = [
            binary,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to sandbox itself as root
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: the helpers are stopped with it
        )
        assert process.stderr is not None
        try:
            with trio.fail_after(60):
                url = await _devtools_url(process.stderr)
            async with open_websocket_url(url, max_message_size=_MAX_MESSAGE) as socket:
                tools = DevTools(socket)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_discard, process.stderr)
                    nursery.start_soon(tools.read_messages)
                    yield Browser(tools)
                    nursery.cancel_scope.cancel()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()


async def _devtools_url(stderr: trio.abc.ReceiveStream) -> str:
    """Read Chromium's stderr up to the line that says where DevTools listens."""
    seen = b""
    async for chunk in stderr:
        seen += chunk
        *lines, _partial = seen.decode(errors="replace").split("\n")
        for line in lines:
            if line.startswith("DevTools listening on "):
                return line.removeprefix("DevTools listening on ").strip()
    pytest.fail(f"chromium exited without a DevTools URL:\n{seen.decode(errors='replace')}")
