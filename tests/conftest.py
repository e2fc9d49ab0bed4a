"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

import codemode_trio as cm
from codemode_trio import hostbin

OLDER_HOST_VERSION = "0.150.0"


@pytest.fixture(scope="session")
def host_path() -> Path:
    """The real host binary; its absence FAILS the test (never skipped)."""
    try:
        return hostbin.locate_host()
    except cm.HostNotFound as exc:
        pytest.fail(
            f"the real host is required; install it with `codemode-trio host fetch`.\n{exc}"
        )


@pytest.fixture(scope="session")
def older_host_path() -> Path:
    """The older host release used to exercise version-skew tolerance."""
    path = hostbin.host_path_for(OLDER_HOST_VERSION)
    if not path.is_file():
        pytest.fail(
            f"host {OLDER_HOST_VERSION} is required; install it with "
            f"`codemode-trio host fetch --version {OLDER_HOST_VERSION}` (missing: {path})"
        )
    return path
