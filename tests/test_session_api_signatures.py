"""Every transport's session, cell and connection types offer exactly the declared API.

mypy checks that each type satisfies the protocols of ``codemode_trio.surface``; this checks
more than mypy does: each public method has the protocol's parameters with the same names,
kinds and defaults, in the same order, and nothing else unless it is listed below as
belonging to one transport only.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

import codemode_trio as cm
from codemode_trio.surface import ConnectionAPI, SessionAPI, SessionSource, StartedCellAPI

# Parameters one transport has and the others cannot: the gRPC API's pending delegate call
# cap (the stdio protocol has no such field), and the catch-all with which a stdio connection
# explains a misplaced ``tools=`` instead of a bare TypeError.
ONLY_HERE: dict[tuple[type, str], set[str]] = {
    (cm.GrpcConnection, "start_session"): {"max_pending_delegate_calls"},
    (cm.GrpcConnection, "open_session"): {"max_pending_delegate_calls"},
    (cm.Connection, "start_session"): {"unexpected"},
    (cm.Connection, "open_session"): {"unexpected"},
}

CASES: list[tuple[type, type]] = [
    (SessionAPI, cm.Session),
    (SessionAPI, cm.GrpcSession),
    (SessionAPI, cm.ReconnectingSession),
    (StartedCellAPI, cm.StartedCell),
    (StartedCellAPI, cm.GrpcStartedCell),
    (StartedCellAPI, cm.ReconnectingCell),
    (ConnectionAPI, cm.Connection),
    (ConnectionAPI, cm.GrpcConnection),
    (SessionSource, cm.HostPool),
]


def _members(protocol: type) -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if callable(value) or isinstance(value, property)
        if not name.startswith("_") or name in ("__aenter__", "__aexit__")
    }


def _sets(implementation: type, name: str) -> bool:
    return any(
        re.search(rf"self\.{name}(: [^=]+)? = ", inspect.getsource(klass))
        or name in getattr(klass, "__slots__", ())
        for klass in implementation.__mro__
        if klass.__module__.startswith("codemode_trio")
    )


def _shape(function: Any, skip: set[str]) -> list[tuple[str, Any, Any]]:
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(function).parameters.values()
        if p.name not in skip
    ]


@pytest.mark.parametrize(("protocol", "implementation"), CASES, ids=lambda t: t.__name__)
def test_each_method_has_the_declared_parameters(protocol: type, implementation: type) -> None:
    members = _members(protocol)
    assert members, "the protocol declares nothing"
    for name, declared in members.items():
        actual = inspect.getattr_static(implementation, name, None)
        if isinstance(declared, property):
            # A read-only property of the protocol is a property or an instance attribute.
            assert isinstance(actual, property) or _sets(implementation, name), (
                f"{implementation.__name__} has no {name}"
            )
            continue
        assert actual is not None, f"{implementation.__name__} has no {name}"
        actual = getattr(implementation, name)
        assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(declared), (
            f"{implementation.__name__}.{name}: async on one side only"
        )
        extra = ONLY_HERE.get((implementation, name), set())
        assert _shape(actual, extra) == _shape(declared, set()), f"{implementation.__name__}.{name}"
        present = set(inspect.signature(actual).parameters)
        assert extra <= present, f"{implementation.__name__}.{name} lost {extra - present}"


def test_the_declared_attributes_are_set_by_each_implementation() -> None:
    # Plain attributes live on instances; their names must be the protocols' on every type.
    assert SessionAPI.__annotations__.keys() == {"delegate"}
    assert StartedCellAPI.__annotations__.keys() == {"cell_id", "session_id"}
    assert ConnectionAPI.__annotations__.keys() == {"capabilities", "protocol_version"}
    for cell_type in (cm.StartedCell, cm.GrpcStartedCell, cm.ReconnectingCell):
        assert _sets(cell_type, "cell_id") and _sets(cell_type, "session_id")
    for session_type in (cm.Session, cm.GrpcSession, cm.ReconnectingSession):
        assert _sets(session_type, "delegate")
    for connection_type in (cm.Connection, cm.GrpcConnection):
        assert _sets(connection_type, "capabilities") and _sets(connection_type, "protocol_version")


def test_the_protocols_are_exported() -> None:
    for name in ("SessionAPI", "StartedCellAPI", "ConnectionAPI", "SessionSource"):
        assert name in cm.__all__
        assert getattr(cm, name).__module__ == "codemode_trio.surface"
