"""Compare what a host did with what the reference host did, and say where they first differ."""

from __future__ import annotations

import json
from typing import Any

from .observe import Observation

__all__ = ["first_difference"]

_SHOWN = 90


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _path_step(path: str, key: Any) -> str:
    return f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]"


def value_difference(expected: Any, actual: Any, path: str = "") -> str | None:
    """The first place where ``actual`` differs from ``expected``, or ``None``."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, item in expected.items():
            if key not in actual:
                return f"{path or '.'}: missing {key!r} (expected {_show(item)})"
            found = value_difference(item, actual[key], _path_step(path, key))
            if found is not None:
                return found
        for key in actual:
            if key not in expected:
                return f"{path or '.'}: unexpected {key!r} = {_show(actual[key])}"
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for index, (want, got) in enumerate(zip(expected, actual, strict=False)):
            found = value_difference(want, got, _path_step(path, index))
            if found is not None:
                return found
        if len(expected) != len(actual):
            return f"{path or '.'}: {len(actual)} items, expected {len(expected)}"
        return None
    # bool is an int in Python, but not in JSON: true and 1 differ.
    if type(expected) is not type(actual) or expected != actual:
        return f"{path or '.'}: expected {_show(expected)}, got {_show(actual)}"
    return None


def _label(message: Any) -> str:
    tag = message.get("type") if isinstance(message, dict) else None
    return tag if isinstance(tag, str) else "frame"


def _canonical(messages: tuple[Any, ...]) -> list[Any]:
    return sorted(messages, key=lambda message: json.dumps(message, sort_keys=True))


def _group_difference(
    where: str, expected: tuple[Any, ...], actual: tuple[Any, ...], *, unordered: bool
) -> str | None:
    want = _canonical(expected) if unordered else list(expected)
    got = _canonical(actual) if unordered else list(actual)
    for index, (one, other) in enumerate(zip(want, got, strict=False)):
        found = value_difference(one, other)
        if found is not None:
            return f"{where} frame {index + 1} ({_label(one)}) {found}"
    if len(got) < len(want):
        missing = _show(want[len(got)])
        return f"{where}: {len(got)} frames, expected {len(want)}; next expected {missing}"
    if len(got) > len(want):
        return f"{where}: unexpected frame {_show(got[len(want)])}"
    return None


def first_difference(
    expected: Observation,
    actual: Observation,
    *,
    unordered: tuple[bool, ...] = (),
    check_process: bool = True,
) -> str | None:
    """A one-line description of the first way ``actual`` departs from ``expected``.

    ``unordered[i]`` says whether the i-th frame group is compared as a set.
    ``check_process`` compares the exit status and stderr (not for a TCP host).
    """
    for index, want in enumerate(expected.groups):
        got = actual.groups[index] if index < len(actual.groups) else ()
        loose = unordered[index] if index < len(unordered) else False
        found = _group_difference(f"expect #{index + 1}", want, got, unordered=loose)
        if found is not None:
            if actual.ended != "complete" and len(got) < len(want):
                how = "closed its output" if actual.ended == "closed" else "went silent"
                if actual.exit_status is not None and actual.ended == "closed":
                    how += f", exit {actual.exit_status}"
                if actual.cause or actual.stderr:
                    how += f": {actual.cause or actual.stderr}"
                found += f" (host {how})"
            return found
    found = _group_difference("after EOF", expected.trailing, actual.trailing, unordered=True)
    if found is not None:
        return found
    if actual.ended != expected.ended:
        return f"exchange ended {actual.ended!r}, expected {expected.ended!r}"
    if check_process:
        if actual.exit_status != expected.exit_status:
            return f"exit status {actual.exit_status}, expected {expected.exit_status}"
        if actual.stderr != expected.stderr:
            return f"stderr {_show(actual.stderr)}, expected {_show(expected.stderr)}"
    return None
