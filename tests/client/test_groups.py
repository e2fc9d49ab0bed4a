"""unwrapping_nursery: a lone error escapes as itself, with its own context and cause."""

from __future__ import annotations

import traceback

import pytest
import trio
import trio.testing

from codemode_trio._groups import unwrapping_nursery
from codemode_trio.testing import open_fake_connection


async def test_a_lone_error_escapes_bare_without_the_group_as_context() -> None:
    with pytest.raises(ValueError, match="body") as caught:
        async with unwrapping_nursery():
            raise ValueError("body")
    assert caught.value.__context__ is None
    assert "ExceptionGroup" not in "".join(traceback.format_exception(caught.value))


async def test_the_lone_error_keeps_its_own_context_and_cause() -> None:
    with pytest.raises(ValueError, match="while handling") as caught:
        async with unwrapping_nursery():
            try:
                raise KeyError("first")
            except KeyError:
                raise ValueError("while handling") from OSError("cause")
    assert isinstance(caught.value.__context__, KeyError)
    assert isinstance(caught.value.__cause__, OSError)


async def test_an_error_from_a_child_task_escapes_bare() -> None:
    async def fail() -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("child")

    with pytest.raises(RuntimeError, match="child") as caught:
        async with unwrapping_nursery() as nursery:
            nursery.start_soon(fail)
    assert caught.value.__context__ is None


async def test_several_errors_stay_in_their_group() -> None:
    async def fail(text: str) -> None:
        # No checkpoint first: both tasks must fail in their first step, before either
        # failure cancels the other.
        raise RuntimeError(text)

    with pytest.RaisesGroup(
        pytest.RaisesExc(RuntimeError, match="one"), pytest.RaisesExc(RuntimeError, match="two")
    ):
        async with unwrapping_nursery() as nursery:
            nursery.start_soon(fail, "one")
            nursery.start_soon(fail, "two")


async def test_an_interrupt_beside_errors_escapes_as_itself_with_them_as_context() -> None:
    async def interrupt() -> None:
        async with trio.open_nursery() as inner:  # a child's own nursery wraps it
            inner.start_soon(trio.lowlevel.checkpoint)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        async with unwrapping_nursery() as nursery:
            nursery.start_soon(interrupt)
            raise RuntimeError("the failure it caused")
    context = caught.value.__context__
    assert isinstance(context, BaseExceptionGroup)
    assert [str(e) for e in context.exceptions] == ["the failure it caused"]


async def test_two_interrupts_stay_in_their_group() -> None:
    async def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.RaisesGroup(KeyboardInterrupt, KeyboardInterrupt):
        async with unwrapping_nursery() as nursery:
            nursery.start_soon(interrupt)
            nursery.start_soon(interrupt)


async def test_a_users_error_inside_a_connection_has_a_clean_traceback() -> None:
    with pytest.raises(LookupError, match="mine") as caught:
        async with open_fake_connection():
            raise LookupError("mine")
    assert "ExceptionGroup" not in "".join(traceback.format_exception(caught.value))


async def test_a_group_the_body_raises_itself_comes_out_intact() -> None:
    with pytest.RaisesGroup(ValueError, match="the user's group") as caught:
        async with unwrapping_nursery():
            raise ExceptionGroup("the user's group", [ValueError("inside")])
    assert caught.value.message == "the user's group"


async def test_a_nested_nurserys_group_is_left_as_that_nursery_raised_it() -> None:
    async def fail() -> None:
        raise KeyError("deep")

    with pytest.RaisesGroup(KeyError, KeyError):
        async with unwrapping_nursery(), trio.open_nursery() as inner:
            # Two children, both failing in their first step, so the inner group has two.
            inner.start_soon(fail)
            inner.start_soon(fail)


async def test_cancellations_from_outside_escape_as_one_cancelled() -> None:
    escaped: list[BaseException] = []
    with trio.CancelScope() as scope:
        try:
            async with unwrapping_nursery() as outer, trio.open_nursery() as inner:
                # Cancelled in the body, in a child, and in a nested nursery's two children.
                outer.start_soon(trio.sleep_forever)
                inner.start_soon(trio.sleep_forever)
                inner.start_soon(trio.sleep_forever)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
                await trio.sleep_forever()
        except BaseException as exc:
            escaped.append(exc)
            raise
    assert scope.cancelled_caught
    assert [type(exc) for exc in escaped] == [trio.Cancelled]
