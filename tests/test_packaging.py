"""The sdist and the wheel, built as a release would build them (``python -m build``).

The build must print no warning; the sdist must carry every file its test suite, documentation
and examples need, so that its tests run; the wheel must carry the demo that ``codemode-trio
demo`` runs, the license and the metadata the package pages show.
"""

from __future__ import annotations

import email
import email.message
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import codemode_trio

REPO = Path(__file__).resolve().parents[1]
SHIPPED_FOLDERS = ("tests", "docs", "examples", "benchmarks", "scripts", ".ci")


class Built:
    def __init__(self, output: str, sdist: Path, wheel: Path) -> None:
        self.output = output
        self.sdist = sdist
        self.wheel = wheel

    def sdist_names(self) -> set[str]:
        with tarfile.open(self.sdist) as archive:
            # Every member sits under "codemode_trio-VERSION/".
            return {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}

    def wheel_names(self) -> set[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return set(archive.namelist())

    def metadata(self) -> email.message.Message:
        with zipfile.ZipFile(self.wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            return email.message_from_bytes(archive.read(name))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("dist")
    # PYTHONDONTWRITEBYTECODE makes setuptools warn that it skips byte-compiling: a fact of the
    # caller's environment, not of the package.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Built(output, sdist, wheel)


def tracked_files(folder: str) -> list[str]:
    """The files of ``folder`` the repository holds (git's list in a checkout, else the disk)."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--", folder],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if done.returncode == 0 and done.stdout:
        return [name for name in done.stdout.decode().split("\0") if name]
    # An unpacked sdist: what it holds is what the next sdist must hold.
    return [
        path.relative_to(REPO).as_posix()
        for path in (REPO / folder).rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and "_build" not in path.parts
        and path.suffix != ".pyc"
    ]


def test_the_build_prints_no_warning(built: Built) -> None:
    lines = built.output.splitlines()
    assert [line for line in lines if "warning" in line.lower()] == []
    assert [line for line in lines if "deprecat" in line.lower()] == []
    # distutils' word for a MANIFEST.in rule that matched nothing, without saying "warning".
    assert [line for line in lines if "no previously-included" in line] == []


def test_the_sdist_holds_the_test_suite_and_its_data(built: Built) -> None:
    names = built.sdist_names()
    assert {
        "tests/conftest.py",
        "tests/protocol/test_client_protocol.py",
        "tests/integration/test_real_host.py",
        "tests/data/transcript-0.171.0.cbor",
        "tests/data/frames-0.171.0.jsonl",
        "tests/protocol/data/spec_examples.json",
        "docs/protocol/spec.md",
        "docs/conf.py",
        "examples/inventory.js",
        "examples/tools.py",
        ".ci/run",
        "CHANGELOG.md",
        "LICENSE",
    } <= names
    missing = [
        name for folder in SHIPPED_FOLDERS for name in tracked_files(folder) if name not in names
    ]
    assert missing == []


def test_the_sdist_holds_no_caches(built: Built) -> None:
    names = built.sdist_names()
    assert [n for n in names if "__pycache__" in n or n.endswith(".pyc")] == []
    assert [n for n in names if n.startswith("docs/_build")] == []


def test_the_wheel_ships_the_demo_and_the_license(built: Built) -> None:
    names = built.wheel_names()
    assert {
        "codemode_trio/demo/inventory.js",
        "codemode_trio/demo/tools.py",
        "codemode_trio/py.typed",
    } <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    # Tests and examples belong to the sdist only.
    assert [n for n in names if n.startswith(("tests/", "examples/", "docs/"))] == []


def test_the_wheel_metadata(built: Built) -> None:
    metadata = built.metadata()
    assert metadata["Version"] == codemode_trio.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    classifiers = metadata.get_all("Classifier") or []
    assert {
        "Development Status :: 3 - Alpha",
        "Framework :: Trio",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Typing :: Typed",
    } <= set(classifiers)
    # The SPDX expression is the license; a classifier beside it would be a second source.
    assert [c for c in classifiers if c.startswith("License ::")] == []
    requires = metadata.get_all("Requires-Dist") or []
    assert 'h11>=0.16; extra == "websocket"' in requires
    assert 'h2>=4.3; extra == "grpc"' in requires
    assert {"docs", "dev", "host", "grpc", "websocket"} <= set(
        metadata.get_all("Provides-Extra") or []
    )
