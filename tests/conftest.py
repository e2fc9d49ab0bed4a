"""Fixtures shared by the whole suite."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from hypothesis import settings

import codemode_trio as cm
from codemode_trio import hostbin

# Hypothesis's wall-clock deadline fails a property on a busy machine, not on a defect.
settings.register_profile("codemode-trio", deadline=None)
settings.load_profile("codemode-trio")

OLDER_HOST_VERSION = "0.150.0"
REPO = Path(__file__).resolve().parents[1]

# The hosts every test taking ``host_path`` runs against: the Rust reference and our own.
HOSTS = ("rust-0.171.0", "serve")


@pytest.fixture(scope="session")
def rust_host_path() -> Path:
    """The real host binary; its absence FAILS the test (never skipped)."""
    try:
        return hostbin.locate_host()
    except cm.HostNotFound as exc:
        pytest.fail(
            f"the real host is required; install it with `codemode-trio host fetch`.\n{exc}"
        )


@pytest.fixture(scope="session")
def serve_host_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable that runs ``codemode-trio serve`` from this checkout, as a host binary.

    A client spawns a host with no arguments; this is what the ``codemode-trio-host`` console
    script does once installed, pinned to the code under test.
    """
    path = tmp_path_factory.mktemp("serve") / "codemode-trio-host"
    path.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m codemode_trio.host "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="session", params=HOSTS)
def host_path(request: pytest.FixtureRequest, rust_host_path: Path) -> Path:
    """Each host in turn: the real 0.171.0 binary (required), then ``codemode-trio serve``."""
    if request.param == "serve":
        path: Path = request.getfixturevalue("serve_host_path")
        return path
    return rust_host_path


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
