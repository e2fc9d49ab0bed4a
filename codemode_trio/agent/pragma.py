"""The ``// @exec:`` pragma: a model's per-call options on the first line of its program.

.. code-block:: javascript

    // @exec: {"yield_time_ms": 2000, "max_output_tokens": 500}
    text(await tools.search({ q: "trio" }));

:func:`parse_exec_source` splits it off and validates it as Codex does, with Codex's error
texts, so that a model sees the same answers to the same mistakes. Its result feeds
:meth:`Session.execute <codemode_trio.Session.execute>`::

    source = parse_exec_source(model_input)
    cell = await session.execute(
        source.code,
        yield_time_ms=source.yield_time_ms,
        max_output_tokens=source.max_output_tokens,
    )
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from ..errors import UsageError

__all__ = ["PRAGMA_PREFIX", "ExecPragmaError", "ExecSource", "parse_exec_source"]

PRAGMA_PREFIX = "// @exec:"
_FIELDS = ("yield_time_ms", "max_output_tokens")
_MAX_SAFE_INTEGER = 2**53 - 1
_FIELDS_TEXT = "supported fields `yield_time_ms` and `max_output_tokens`"


class ExecPragmaError(UsageError):
    """The ``exec`` input is empty or its pragma is malformed; the message is for the model."""


@attrs.frozen
class ExecSource:
    """An ``exec`` input split into its program and its pragma's options (None when unset)."""

    code: str
    yield_time_ms: int | None = None
    max_output_tokens: int | None = None


def parse_exec_source(text: str) -> ExecSource:
    """Split the optional first-line pragma off ``text`` and validate it.

    Without a pragma the whole text is the program. With one (the first line, after leading
    whitespace, starts ``// @exec:``), the program is everything after that line, and the
    pragma must be a JSON object whose only keys are ``yield_time_ms`` and
    ``max_output_tokens``, each a non-negative integer up to 2**53 - 1 (or null).

    Raises :class:`ExecPragmaError` with Codex's message for an empty input, a pragma with no
    program after it, and a pragma that is not such an object.
    """
    if not text.strip():
        raise ExecPragmaError(
            "exec expects raw JavaScript source text (non-empty). Provide JS only, optionally "
            'with first-line `// @exec: {"yield_time_ms": 10000, "max_output_tokens": 1000}`.'
        )
    first, _, rest = text.partition("\n")
    stripped = first.lstrip()
    if not stripped.startswith(PRAGMA_PREFIX):
        return ExecSource(text)
    if not rest.strip():
        raise ExecPragmaError(
            "exec pragma must be followed by JavaScript source on subsequent lines"
        )
    directive = stripped[len(PRAGMA_PREFIX) :].strip()
    not_an_object = f"exec pragma must be a JSON object with {_FIELDS_TEXT}"
    if not directive:
        raise ExecPragmaError(not_an_object)
    try:
        value = json.loads(directive, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ExecPragmaError(
            f"exec pragma must be valid JSON with {_FIELDS_TEXT}: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ExecPragmaError(not_an_object)
    for key in value:
        if key not in _FIELDS:
            raise ExecPragmaError(
                f"exec pragma only supports `yield_time_ms` and `max_output_tokens`; got `{key}`"
            )
    return ExecSource(rest, *(_count(key, value.get(key)) for key in _FIELDS))


def _refuse_constant(name: str) -> Any:
    # JSON has no NaN or Infinity; Python's decoder would otherwise accept them.
    raise ValueError(f"{name} is not JSON")


def _count(key: str, value: Any) -> int | None:
    if value is None:
        return None
    # Beyond 64 bits is a decoding failure in Codex, not a range error.
    if type(value) is not int or value < 0 or value >= 2**64:
        raise ExecPragmaError(
            "exec pragma fields `yield_time_ms` and `max_output_tokens` must be non-negative "
            f"safe integers: `{key}` is {json.dumps(value)}"
        )
    if value > _MAX_SAFE_INTEGER:
        raise ExecPragmaError(f"exec pragma field `{key}` must be a non-negative safe integer")
    return value
