"""The argument checks every client applies before sending: u64 values and session limits."""

from __future__ import annotations

import pytest

from codemode_trio.protocol.checks import check_cell_limits, check_opt_u64
from codemode_trio.protocol.content import CellLimits
from codemode_trio.protocol.errors import UsageError


@pytest.mark.parametrize("value", [None, 0, 1, 2**64 - 1])
def test_an_optional_u64_accepts_none_and_the_whole_range(value: int | None) -> None:
    check_opt_u64(value, "yield_time_ms")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (-1, "-1"),
        (2**64, str(2**64)),
        (True, "True"),
        (1.0, "1.0"),
        ("5", "'5'"),
        ([1], "[1] (list)"),
    ],
)
def test_an_optional_u64_refuses_everything_else(value: object, shown: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_opt_u64(value, "yield_time_ms")
    assert str(caught.value) == f"yield_time_ms must be an integer from 0 to 2**64-1, not {shown}"


def test_cell_limits_within_u64_pass_and_are_returned() -> None:
    limits = CellLimits(max_yield_time_ms=2**64 - 1, max_heap_size_bytes=0)
    assert check_cell_limits(limits) is limits
    assert check_cell_limits(CellLimits()) == CellLimits()


@pytest.mark.parametrize(
    ("limits", "text"),
    [
        (
            CellLimits(max_yield_time_ms=-1),
            "failed to encode code-mode session execution limits: "
            "max_yield_time_ms=-1 does not fit u64",
        ),
        (
            CellLimits(max_heap_size_bytes=2**64),
            "failed to encode code-mode session execution limits: "
            f"max_heap_size_bytes={2**64} does not fit u64",
        ),
        (
            {"max_yield_time_ms": 1},
            "limits must be a CellLimits, not {'max_yield_time_ms': 1} (dict)",
        ),
    ],
)
def test_cell_limits_that_overflow_or_are_not_limits_are_refused(limits: object, text: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_cell_limits(limits)
    assert str(caught.value) == text
