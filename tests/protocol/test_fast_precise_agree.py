"""The fast and the precise decoder of every message agree on every input, in both modes.

Both come from one declaration (``codemode_trio.protocol.schema``): the fast decoder handles the
happy path and declines everything else with ``OffHappyPath``; the precise decoder applies the
mode, reports unknown fields and words the errors. On any input the fast decoder must either
decline or return exactly what the precise decoder returns, strict and tolerant, without an
unknown field reported; the codec (fast first, precise as the fallback) must say exactly what
the precise decoder says, success or error; and whatever decodes re-encodes to a frame that
decodes to the same thing.

Inputs: every recorded frame of ``tests/data/frames-*.jsonl`` and every spec example, then
mutations of them: keys dropped, added, renamed, set to ``null``, to values of the wrong type
or out of range, wrapped in an extra list or object, list items dropped or repeated. One test
walks a fixed catalogue of single mutations over every key of every frame shape; a Hypothesis
property stacks random ones.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode_trio.protocol import (
    ClientProtocolViolation,
    HostProtocolViolation,
    ProtocolViolation,
    _wire,
    decode_client_message,
    decode_host_message,
    encode_client_message,
    encode_host_message,
)
from codemode_trio.protocol._wire import DecodeContext, OffHappyPath, UnknownFieldCounts
from codemode_trio.protocol.messages import CLIENT_MESSAGES, HOST_MESSAGES

DATA = Path(__file__).resolve().parents[1] / "data"
SPEC_EXAMPLES = Path(__file__).parent / "data" / "spec_examples.json"


@attrs.frozen
class Side:
    """One direction of the wire: its message union, codec functions and error class."""

    messages: Any
    error: type[ProtocolViolation]
    where: str
    decode: Callable[..., Any]
    encode: Callable[[Any], bytes]


SIDES = {
    "host": Side(
        HOST_MESSAGES,
        HostProtocolViolation,
        "host message",
        decode_host_message,
        encode_host_message,
    ),
    "client": Side(
        CLIENT_MESSAGES,
        ClientProtocolViolation,
        "client message",
        decode_client_message,
        encode_client_message,
    ),
}


def _load_seeds() -> list[tuple[str, Any]]:
    seeds: dict[str, tuple[str, Any]] = {}
    for path in sorted(DATA.glob("frames-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                frame = json.loads(line)
                side = "host" if frame["direction"] == "host->client" else "client"
                data = json.loads(frame["payload"])
                seeds.setdefault(json.dumps([side, data]), (side, data))
    for example in json.loads(SPEC_EXAMPLES.read_text(encoding="utf-8")):
        side = "host" if example["direction"] == "<<" else "client"
        data = json.loads(example["json"])
        seeds.setdefault(json.dumps([side, data]), (side, data))
    return list(seeds.values())


SEEDS = _load_seeds()


def _shape(value: Any) -> Any:
    # A frame's structure with the scalars reduced to their types (tags kept: they pick the
    # variant), so that the catalogue walks each shape once.
    if type(value) is dict:
        return {key: _shape(item) for key, item in value.items()}
    if type(value) is list:
        return [_shape(item) for item in value]
    return value if type(value) is str and "/" in value else type(value).__name__


def _unique_shapes() -> list[tuple[str, Any]]:
    shapes: dict[str, tuple[str, Any]] = {}
    for side, data in SEEDS:
        shapes.setdefault(json.dumps([side, _shape(data)], sort_keys=True), (side, data))
    return list(shapes.values())


SHAPES = _unique_shapes()


def snapshot(value: Any) -> Any:
    """Everything about a decoded value, types and the ``wire_nulls`` record included."""
    cls = type(value)
    if attrs.has(cls):
        return (
            cls.__name__,
            tuple((f.name, snapshot(getattr(value, f.name))) for f in attrs.fields(cls)),
        )
    if cls is tuple or cls is list:
        return (cls.__name__, tuple(snapshot(item) for item in value))
    if cls is dict:
        return ("dict", tuple((key, snapshot(item)) for key, item in value.items()))
    if cls is frozenset:
        return ("frozenset", tuple(sorted(value)))
    return (cls.__name__, value)


def _outcome(decode: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        return ("ok", snapshot(decode(*args, **kwargs)))
    except ProtocolViolation as exc:
        return ("error", type(exc).__name__, str(exc))


@contextmanager
def _private_unknown_field_counts() -> Iterator[None]:
    # Mutations invent many unknown fields; count them apart from the process-wide counter so
    # that other tests see it as they left it.
    with mock.patch.object(_wire, "unknown_field_counts", UnknownFieldCounts()):
        yield


def check_agreement(side_name: str, data: Any) -> bool:
    """Assert every agreement property for one input; return whether the fast path took it."""
    side = SIDES[side_name]
    try:
        fast = side.messages.fast(data)
    except OffHappyPath:
        fast = None
    accepted = fast is not None
    for strict in (False, True):
        reports: list[tuple[str, tuple[str, ...]]] = []
        ctx = DecodeContext(
            strict=strict,
            error=side.error,
            on_unknown=lambda where, names, reports=reports: reports.append((where, names)),
        )
        precise = _outcome(side.messages.decode, data, side.where, ctx)
        if accepted:
            assert precise == ("ok", snapshot(fast)), (strict, data)
            assert reports == [], data
        payload = json.dumps(data, ensure_ascii=False).encode()
        assert _outcome(side.decode, payload, strict=strict) == precise, (strict, data)
        if precise[0] == "ok":
            again = side.encode(side.decode(payload, strict=strict))
            assert _outcome(side.decode, again, strict=strict) == precise, (strict, data)
    return accepted


# --------------------------------------------------------------------------- recorded frames


def test_the_fast_path_takes_almost_every_recorded_frame_and_re_encodes_it_exactly() -> None:
    declined = []
    with _private_unknown_field_counts():
        for side_name, data in SEEDS:
            if check_agreement(side_name, data):
                assert SIDES[side_name].messages.fast(data).to_wire() == data
            else:
                declined.append(data)
    assert len(SEEDS) >= 200
    # Only frames of hosts older than 0.171 (without the timing fields) need the precise
    # decoder, and only a few of those (a wait that yields, a result) do.
    assert all("code_mode_host_duration_ns" not in json.dumps(data) for data in declined)
    assert len(declined) < 0.15 * len(SEEDS)


# --------------------------------------------------------------------------- mutations

WRONG_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**31,
    2**63,
    2**64,
    1.5,
    "",
    " ",
    "x",
    "function",
    [],
    ["x"],
    [0],
    {},
    {"type": "input_text"},
]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every object and array inside ``value``, ``value`` itself first."""
    if type(value) in (dict, list):
        yield path
        items = value.items() if type(value) is dict else enumerate(value)
        for key, item in items:
            yield from _paths(item, (*path, key))


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step]
    return data


def _mutants(data: Any) -> Iterator[Any]:
    """Every single mutation of the catalogue, at every key and item of ``data``."""
    for path in list(_paths(data)):
        target = _at(data, path)
        keys = list(target) if type(target) is dict else list(range(len(target)))
        for key in keys:
            for value in (*WRONG_VALUES, [target[key]], {"x": target[key]}):
                mutant = copy.deepcopy(data)
                _at(mutant, path)[key] = copy.deepcopy(value)
                yield mutant
            mutant = copy.deepcopy(data)
            del _at(mutant, path)[key]
            yield mutant
            if type(target) is dict:
                mutant = copy.deepcopy(data)
                container = _at(mutant, path)
                container["x_renamed"] = container.pop(key)
                yield mutant
            else:
                mutant = copy.deepcopy(data)
                _at(mutant, path).append(copy.deepcopy(target[key]))
                yield mutant
        if type(target) is dict:
            mutant = copy.deepcopy(data)
            _at(mutant, path)["x_added"] = 1
            yield mutant


def test_fast_and_precise_agree_on_every_single_mutation_of_every_frame_shape() -> None:
    taken = declined = 0
    with _private_unknown_field_counts():
        for side_name, data in SHAPES:
            for mutant in _mutants(data):
                if check_agreement(side_name, mutant):
                    taken += 1
                else:
                    declined += 1
    # Both arms are exercised: some mutants stay on the happy path (a changed string, a null
    # for an optional key), most leave it.
    assert taken > 1000
    assert declined > 10000


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    # Copied: later mutations must not change the catalogue's own lists and objects.
    | st.sampled_from(WRONG_VALUES).map(copy.deepcopy),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def mutated_frames(draw: st.DrawFn) -> tuple[str, Any]:
    """A recorded frame with one to four random mutations stacked on it."""
    side_name, data = draw(st.sampled_from(SEEDS))
    data = copy.deepcopy(data)
    known_keys = sorted({key for path in _paths(data) for key in _keys(_at(data, path))})
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(data))
        if not paths:
            break
        target = _at(data, draw(st.sampled_from(paths)))
        if type(target) is dict:
            operation = draw(st.sampled_from(["set", "drop", "add", "rename", "wrap"]))
            if operation == "add" or not target:
                target[draw(st.sampled_from([*known_keys, "x_new"]))] = draw(json_values)
                continue
            key = draw(st.sampled_from(sorted(target)))
            if operation == "set":
                target[key] = draw(json_values)
            elif operation == "drop":
                del target[key]
            elif operation == "rename":
                target[draw(st.sampled_from([*known_keys, "x_new"]))] = target.pop(key)
            else:
                target[key] = draw(st.sampled_from([[target[key]], {key: target[key]}]))
        else:
            operation = draw(st.sampled_from(["set", "drop", "repeat", "append"]))
            if operation == "append" or not target:
                target.append(draw(json_values))
                continue
            index = draw(st.integers(0, len(target) - 1))
            if operation == "set":
                target[index] = draw(json_values)
            elif operation == "drop":
                del target[index]
            else:
                target.append(copy.deepcopy(target[index]))
    return side_name, data


def _keys(value: Any) -> list[str]:
    return list(value) if type(value) is dict else []


@settings(max_examples=300, deadline=None)
@given(mutated_frames())
def test_fast_and_precise_agree_on_randomly_mutated_frames(frame: tuple[str, Any]) -> None:
    with _private_unknown_field_counts():
        check_agreement(*frame)


@settings(max_examples=100, deadline=None)
@given(json_values, st.sampled_from(sorted(SIDES)))
def test_fast_and_precise_agree_on_arbitrary_json(data: Any, side_name: str) -> None:
    with _private_unknown_field_counts():
        check_agreement(side_name, data)
