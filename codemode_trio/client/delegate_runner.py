"""Delegate calls run the same way on every transport: one task and one cancel scope per call.

The stdio shell and the gRPC session both hand each call the host makes (a tool call or a
notification) to a :class:`DelegateRunner`, which owns what the transports must not differ on:

- **One task per call**, in the runner's nursery, under the call's own :class:`trio.CancelScope`,
  spawned in the context of the cell's ``execute`` caller (its context variables, its trace).
- **Revocation without awaiting**: :meth:`DelegateRunner.revoke` cancels the scope and marks the
  call; a revoked call's result is dropped (no reply), and a call revoked before its task ran
  never reaches the delegate. Nobody waits for a revoked delegate to notice.
- **One exception policy**: a :class:`ToolError` is the script's error text; any other
  ``Exception`` is described by :func:`describe_delegate_error` and logged; a ``BaseException``
  (``KeyboardInterrupt``, ``SystemExit``) ends the connection (``on_fatal``) and comes out of the
  connection's opener as itself (:func:`raise_fatal_over`).
- **A cell's notifications reach the delegate one at a time, in the order the host sent them**
  (they read as a log): Trio may start a batch of new tasks in any order, so each waits until
  the cell's previous one is over. Tool calls are concurrent by nature: no order.

What the transport does with an outcome (write a reply, call ``CompleteToolCall``) is its
``finish`` callback, called only for a call nobody revoked.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from ..protocol.content import Notification, ToolCall
from .deadlines import CellHold
from .delegates import Delegate, ToolError, describe_delegate_error, safe_str

__all__ = ["DelegateRunner", "DelegateTask", "Finish", "fatal_reason", "raise_fatal_over"]

logger = logging.getLogger("codemode_trio.connection")


class DelegateTask:
    """One delegate call: the transport's record, request, delegate, hold and revoking scope."""

    __slots__ = (
        "_turn",
        "call",
        "delegate",
        "done",
        "hold",
        "key",
        "predecessor",
        "request",
        "revoked",
        "scope",
    )

    def __init__(
        self,
        call: Any,
        request: ToolCall | Notification,
        delegate: Delegate,
        hold: CellHold | None = None,
    ) -> None:
        self.call = call
        self.request = request
        self.delegate = delegate
        self.hold = hold
        self.scope = trio.CancelScope()
        self.revoked = False
        self.key: Hashable = None
        self.predecessor: DelegateTask | None = None
        self.done = False
        self._turn: trio.Event | None = None


#: What the transport does with an outcome ``(task, ok, value, error_text)``: answer at once
#: (``None``), or return an awaitable the task awaits under the call's scope.
Finish = Callable[[DelegateTask, bool, Any, str], Awaitable[None] | None]


class DelegateRunner:
    """Runs delegate calls as tasks in ``nursery`` (set once the nursery exists)."""

    __slots__ = ("_finish", "_last_note", "_on_fatal", "_on_timeout", "nursery")

    def __init__(
        self,
        finish: Finish,
        on_fatal: Callable[[BaseException], None],
        *,
        on_timeout: Callable[[DelegateTask], None] | None = None,
        nursery: trio.Nursery | None = None,
    ) -> None:
        self._finish = finish
        self._on_fatal = on_fatal
        self._on_timeout = on_timeout  # an awaited answer's deadline (the scope's) passed
        self.nursery = nursery
        # The latest notification of each cell not yet at its delegate: the next one waits.
        self._last_note: dict[Hashable, DelegateTask] = {}

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the delegate tasks: a nursery that lives until this task is cancelled."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def start(
        self,
        task: DelegateTask,
        context: contextvars.Context | None,
        name: str,
        order: Hashable = None,
    ) -> None:
        """Start ``task`` (in ``context``, if given); with ``order``, after that key's last one."""
        if order is not None:
            task.key = order
            task.predecessor = self._last_note.get(order)
            self._last_note[order] = task
        nursery = self.nursery
        assert nursery is not None
        if context is None:
            nursery.start_soon(self._run, task, name=name)
        else:
            # start_soon gives the new task a copy of the context it is called in: the cell's
            # execute caller's, not the reader's. (mypy cannot match Context.run's ParamSpec
            # with start_soon's TypeVarTuple.)
            context.run(nursery.start_soon, self._run, task, name=name)  # type: ignore[arg-type]

    def revoke(self, task: DelegateTask) -> None:
        """Revoke ``task`` without waiting for it: its result, if any, is dropped."""
        task.revoked = True
        task.scope.cancel()
        hold = task.hold
        if hold is not None:
            hold.leave()
        if task.key is not None:
            self._release(task)  # the cell's next notification does not wait for this one

    async def _run(self, task: DelegateTask) -> None:
        request = task.request
        ok = False
        value: Any = None
        message = ""
        scope = task.scope
        with scope:
            try:
                if task.predecessor is not None:
                    await self._wait_turn(task)
                if task.revoked:
                    return  # revoked before it ran: the delegate is never invoked
                if type(request) is ToolCall:
                    value = await task.delegate.invoke_tool(request)
                else:
                    assert type(request) is Notification
                    await task.delegate.notify(request)
                ok = True
            except ToolError as exc:
                # A deliberate rejection for the script, not a bug: no traceback.
                message = describe_delegate_error(exc)
            except Exception as exc:
                message = describe_delegate_error(exc)
                level = logging.DEBUG if task.revoked else logging.WARNING
                # The task's name says which call it is ("delegate 7 tools.search").
                name = trio.lowlevel.current_task().name
                logger.log(level, "%s raised %s", name, message, exc_info=True)
            except trio.Cancelled:
                raise
            except BaseExceptionGroup as group:
                # A delegate that runs a nursery and is cancelled raises a group holding
                # Cancelled, which is not the delegate's BaseException: the Cancelled goes on
                # (to this scope or the connection's), and any error with it is dropped with
                # the revoked call, unless it is itself a BaseException.
                cancelled, rest = group.split(trio.Cancelled)
                if cancelled is None:
                    self._on_fatal(group)
                    return
                if rest is not None and not isinstance(rest, Exception):
                    self._on_fatal(rest)
                raise cancelled from None
            except BaseException as exc:
                # SystemExit, KeyboardInterrupt and the like are not this call's business:
                # they end the connection and come out of its opener as themselves.
                self._on_fatal(exc)
                return
            finally:
                if task.key is not None:
                    self._release(task)  # the delegate returned: the next notification goes
            if task.revoked:
                return  # revoked: its completion path is cut, no reply is ever sent
            hold = task.hold
            if hold is not None:
                hold.leave()
            answer = self._finish(task, ok, value, message)
            if answer is not None:
                await answer
        if scope.cancelled_caught and not task.revoked and self._on_timeout is not None:
            self._on_timeout(task)  # the deadline a finish set on the scope passed

    async def _wait_turn(self, task: DelegateTask) -> None:
        """Wait until the cell's previous notification is over (returned, failed or revoked)."""
        before = task.predecessor
        task.predecessor = None  # no chain of finished calls is kept alive
        if before is not None and not before.done:
            if before._turn is None:
                before._turn = trio.Event()
            await before._turn.wait()

    def _release(self, task: DelegateTask) -> None:
        """The notification's delegate returned (or never will): the cell's next one may go."""
        if self._last_note.get(task.key) is task:
            del self._last_note[task.key]
        if not task.done:
            task.done = True
            if task._turn is not None:
                task._turn.set()


def fatal_reason(exc: BaseException) -> str:
    """The connection's failure reason when a delegate raised ``exc``."""
    return f"a delegate raised {type(exc).__name__}: {safe_str(exc)}"


@contextmanager
def raise_fatal_over(fatal: Callable[[], BaseException | None]) -> Iterator[None]:
    """Around a connection's block: what a delegate raised comes out of it, as itself.

    It wins over the ``ConnectionFailed`` or ``Cancelled`` its fallout caused in the body.
    """
    try:
        yield
    except BaseException as exc:
        raised = fatal()
        if raised is not None and raised is not exc:
            raise raised from None  # noqa: ASYNC104
        raise
    raised = fatal()
    if raised is not None:
        raise raised
