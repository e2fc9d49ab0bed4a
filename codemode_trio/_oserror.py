"""OS errors written the way the reference client writes them.

The Rust client renders an ``io::Error`` as ``Broken pipe (os error 32)``; Python's own text is
``[Errno 32] Broken pipe``. Error messages that embed an OS error use this form, so logs from
either client read the same.
"""

from __future__ import annotations

__all__ = ["describe_stream_error", "os_error_text"]


def os_error_text(exc: OSError) -> str:
    """``"{strerror} (os error {errno})"`` when both are known, else ``str(exc)``."""
    if exc.strerror and exc.errno is not None:
        return f"{exc.strerror} (os error {exc.errno})"
    return str(exc)


def describe_stream_error(exc: BaseException) -> str:
    """The most useful short text for an error raised by a stream operation.

    Trio stream errors often carry no message of their own and keep the OS error as their
    cause; that cause is what a reader wants to see.
    """
    if isinstance(exc, OSError):
        return os_error_text(exc)
    text = str(exc)
    if text:
        return text
    if isinstance(exc.__cause__, OSError):
        return os_error_text(exc.__cause__)
    return type(exc).__name__
