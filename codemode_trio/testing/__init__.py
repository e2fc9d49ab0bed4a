"""Test support for codemode-trio and for applications built on it.

:class:`FakeHost` is a scriptable host over an in-memory stream: a test reads the exact frames
the client sent and injects exact host frames, on Trio's clock (``autojump_clock`` works).
"""

from .fake_host import FakeHost, open_fake_connection

__all__ = ["FakeHost", "open_fake_connection"]
