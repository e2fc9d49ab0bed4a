"""RecentIds: the bounded window of used ids both machines and the gRPC session keep."""

from __future__ import annotations

import pytest

from codemode_trio.protocol.ids import RecentIds


def test_members_are_remembered_until_the_window_is_full() -> None:
    recent: RecentIds[int] = RecentIds(3)
    for item in (1, 2, 3):
        recent.add(item)
    assert [item in recent for item in (1, 2, 3, 4)] == [True, True, True, False]
    assert len(recent) == 3


def test_the_oldest_is_forgotten_first_and_the_size_is_a_bound() -> None:
    recent: RecentIds[int] = RecentIds(3)
    for item in range(10):
        recent.add(item)
        assert len(recent) == min(item + 1, 3)
    assert [item for item in range(10) if item in recent] == [7, 8, 9]


def test_adding_a_member_again_does_not_renew_it() -> None:
    recent: RecentIds[str] = RecentIds(2)
    assert recent.add("a") and recent.add("b")
    assert not recent.add("a")  # already held: a no-op, so "a" stays the oldest
    assert recent.add("c")
    assert "a" not in recent
    assert "b" in recent and "c" in recent


def test_a_discarded_id_added_again_is_not_evicted_by_its_old_entry() -> None:
    recent: RecentIds[str] = RecentIds(2)
    recent.add("a")
    recent.discard("a")
    assert "a" not in recent
    recent.discard("never added")  # no error
    recent.add("b")
    recent.add("a")  # newer than "b" now
    recent.add("c")  # pushes out "b", the oldest, never the new "a"
    assert "a" in recent
    assert "c" in recent
    assert len(recent) == 2


def test_memory_stays_bounded_over_a_long_run() -> None:
    recent: RecentIds[int] = RecentIds(64)
    for item in range(100_000):
        recent.add(item)
        if item % 3 == 0:
            recent.discard(item)
    assert len(recent) <= 64
    # Every third id was discarded right after it was added (its add pushed out the oldest);
    # what stays is the newest of the rest, one short of full after the last such pair.
    kept = [item for item in range(100_000) if item % 3]
    assert {item for item in range(100_000) if item in recent} == set(kept[-63:])


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_a_window_must_hold_at_least_one_id(size: object) -> None:
    with pytest.raises(ValueError, match="size must be a positive integer"):
        RecentIds(size)  # type: ignore[arg-type]
