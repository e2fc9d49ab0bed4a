"""A task-tree printer for the course: a small ``trio.abc.Instrument``.

``with trace_tasks() as tree:`` inside an async function prints one line whenever a task
below the current one starts or exits, indented by its depth in the task tree, with the time
since the block began. Names are whatever the tasks were given (``name=`` on ``start_soon``,
or Trio's default, the function's dotted path, which is shortened to its last two parts so
``codemode_trio.client.shell.ClientShell.run_tasks`` reads ``ClientShell.run_tasks``).

``tree.alive()`` lists the traced tasks that have not exited yet: after an ``async with`` that
owns tasks it must be empty, which is the "no orphan tasks" property made visible.

``stamp()`` gives ``[ 0.123s]``, the time since the last ``trace_tasks`` block (or the first
``stamp()``) began, so the examples' own lines share the tree's clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

_DOTTED = re.compile(r"^[\w<>]+(\.[\w<>]+)+$")
_start: float | None = None


def stamp() -> str:
    """``[ seconds]`` since the clock was started (by ``trace_tasks`` or the first call)."""
    global _start
    if _start is None:
        _start = trio.current_time()
    return f"[{trio.current_time() - _start:6.3f}s]"


def short_name(task: trio.lowlevel.Task) -> str:
    """The task's name, with a Python dotted path cut to its last two parts."""
    name = task.name
    if _DOTTED.match(name):
        name = ".".join(name.split(".")[-2:])
    return name


def _parent(task: trio.lowlevel.Task) -> trio.lowlevel.Task | None:
    nursery = task.parent_nursery
    return nursery.parent_task if nursery is not None else None


class TaskTree(trio.abc.Instrument):
    """Prints spawn/exit of every task that descends from ``root``."""

    def __init__(
        self,
        root: trio.lowlevel.Task,
        *,
        show: Callable[[str], bool] = lambda name: True,
        out: Callable[[str], None] = print,
    ) -> None:
        self.root = root
        self.show = show
        self.out = out
        self.spawned: list[str] = []
        self._alive: dict[trio.lowlevel.Task, int] = {}

    def _depth(self, task: trio.lowlevel.Task) -> int | None:
        """How far below ``root`` the task is, or None if it is not below it."""
        depth = 0
        current: trio.lowlevel.Task | None = task
        while current is not None:
            if current is self.root:
                return depth
            current = _parent(current)
            depth += 1
        return None

    def _line(self, what: str, task: trio.lowlevel.Task, depth: int) -> None:
        name = short_name(task)
        if self.show(name):
            self.out(f"{stamp()}   {what} {'   ' * (depth - 1)}{name}")

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        depth = self._depth(task)
        if depth is None or depth == 0:
            return
        self._alive[task] = depth
        self.spawned.append(short_name(task))
        self._line("start", task, depth)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        depth = self._alive.pop(task, None)
        if depth is not None:
            self._line("exit ", task, depth)

    def alive(self) -> list[str]:
        """Names of traced tasks that have started and not exited."""
        return [short_name(task) for task in self._alive]


@contextmanager
def trace_tasks(
    show: Callable[[str], bool] = lambda name: True,
    out: Callable[[str], None] = print,
) -> Iterator[TaskTree]:
    """Trace the tasks started below the calling task while the block runs."""
    global _start
    _start = trio.current_time()
    tree = TaskTree(trio.lowlevel.current_task(), show=show, out=out)
    trio.lowlevel.add_instrument(tree)
    try:
        yield tree
    finally:
        trio.lowlevel.remove_instrument(tree)
