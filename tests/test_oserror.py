"""OS errors in the reference client's words."""

from __future__ import annotations

import errno

import trio

from codemode_trio._oserror import describe_stream_error, os_error_text


def test_os_errors_read_as_rust_renders_them() -> None:
    assert os_error_text(BrokenPipeError(errno.EPIPE, "Broken pipe")) == (
        "Broken pipe (os error 32)"
    )
    assert os_error_text(OSError("no errno here")) == "no errno here"


def test_stream_errors_prefer_their_own_text_then_their_os_cause() -> None:
    assert describe_stream_error(trio.BrokenResourceError("pipe closed")) == "pipe closed"
    bare = trio.BrokenResourceError()
    bare.__cause__ = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    assert describe_stream_error(bare) == "Connection reset by peer (os error 104)"
    assert describe_stream_error(trio.ClosedResourceError()) == "ClosedResourceError"
    assert describe_stream_error(OSError(errno.EIO, "Input/output error")) == (
        "Input/output error (os error 5)"
    )
