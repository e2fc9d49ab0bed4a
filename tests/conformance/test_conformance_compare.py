"""How a run is judged against the reference record: exact values, durations aside."""

from __future__ import annotations

from codemode_trio.conformance import Observation
from codemode_trio.conformance.compare import first_difference, value_difference
from codemode_trio.conformance.observe import DURATION, normalise


def _observation(*groups: tuple[object, ...], exit_status: int = 0) -> Observation:
    return Observation(
        groups=groups, trailing=(), ended="complete", exit_status=exit_status, stderr=None
    )


def test_durations_are_normalised_but_kept() -> None:
    frame = {"Result": {"code_mode_host_duration_ns": 5, "result_buffered_for_ns": 0, "x": 1}}
    assert normalise(frame) == {
        "Result": {
            "code_mode_host_duration_ns": DURATION,
            "result_buffered_for_ns": DURATION,
            "x": 1,
        }
    }
    # A duration that is not an integer is a difference worth showing, not a duration.
    assert normalise({"code_mode_host_duration_ns": "soon"}) == {
        "code_mode_host_duration_ns": "soon"
    }


def test_value_difference_names_the_path() -> None:
    assert value_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) is None
    assert value_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == (
        ".a[1].b: expected 2, got 3"
    )
    assert value_difference({"a": 1}, {}) == ".: missing 'a' (expected 1)"
    assert value_difference({}, {"z": None}) == ".: unexpected 'z' = null"
    assert value_difference([1], [1, 2]) == ".: 2 items, expected 1"
    assert value_difference({"n": 1}, {"n": True}) == ".n: expected 1, got true"


def test_first_difference_in_order_and_as_a_set() -> None:
    one, two = {"type": "cell/closed", "cellId": "1"}, {"type": "cell/closed", "cellId": "2"}
    expected = _observation((one, two))
    swapped = _observation((two, one))
    assert first_difference(expected, swapped, unordered=(True,)) is None
    assert first_difference(expected, swapped) == (
        'expect #1 frame 1 (cell/closed) .cellId: expected "1", got "2"'
    )


def test_first_difference_reports_a_short_group_with_the_hosts_reason() -> None:
    expected = _observation(({"type": "connection/ready"},))
    closed = Observation(
        groups=((),),
        trailing=(),
        ended="closed",
        exit_status=1,
        stderr="Error: failed to read code-mode client message",
        cause="failed to decode code-mode IPC frame: unknown field `x`",
    )
    assert first_difference(expected, closed) == (
        'expect #1: 0 frames, expected 1; next expected {"type": "connection/ready"} '
        "(host closed its output, exit 1: failed to decode code-mode IPC frame: unknown field `x`)"
    )


def test_exit_status_is_compared_only_for_processes() -> None:
    expected = _observation((), exit_status=0)
    actual = _observation((), exit_status=1)
    assert first_difference(expected, actual) == "exit status 1, expected 0"
    assert first_difference(expected, actual, check_process=False) is None
