from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import platform
import shutil
import stat
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from codemode_trio import hostbin
from codemode_trio.errors import CodeModeError, HostNotFound
from codemode_trio.hostbin import (
    ChecksumMismatchError,
    HostFetchError,
    UnsupportedPlatformError,
)

FAKE_VERSION = "9.9.9"
FAKE_BINARY = b"#!/bin/sh\necho fake code-mode host\n"
FAKE_SHA256 = hashlib.sha256(FAKE_BINARY).hexdigest()
NPM = shutil.which("npm")


def _member(platform: str = "linux-x64") -> str:
    triple = {"linux-x64": "x86_64", "linux-arm64": "aarch64"}[platform]
    return f"package/vendor/{triple}-unknown-linux-musl/bin/codex-code-mode-host"


def make_tarball(path: Path, members: dict[str, bytes], *, symlink: str | None = None) -> Path:
    """Write an npm-style .tgz holding ``members`` (plus an optional symlink entry)."""
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            archive.addfile(info, io.BytesIO(data))
        if symlink is not None:
            info = tarfile.TarInfo(symlink)
            info.type = tarfile.SYMTYPE
            info.linkname = "/bin/sh"
            archive.addfile(info)
    return path


def make_executable(path: Path, body: bytes = FAKE_BINARY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated environment: empty PATH dir, private cache, no host env var."""
    path_dir = tmp_path / "bin"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    monkeypatch.delenv("CODEX_CODE_MODE_HOST_PATH", raising=False)
    monkeypatch.setenv("CODEMODE_TRIO_CACHE", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def fake_pin(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pin FAKE_VERSION on this platform to the hash of FAKE_BINARY."""
    pins = dict(hostbin.HOST_SHA256)
    pins[(FAKE_VERSION, hostbin.platform_tag())] = FAKE_SHA256
    monkeypatch.setattr(hostbin, "HOST_SHA256", pins)
    return FAKE_SHA256


def serve_tarball(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, members: dict[str, bytes]
) -> list[str]:
    """Make fetch_host's download step hand back a local tarball; return the specs asked for."""
    tarball = make_tarball(tmp_path / "fake.tgz", members)
    asked: list[str] = []

    def fake_download(spec: str, workdir: Path, say: hostbin.Progress) -> Path:
        asked.append(spec)
        return Path(shutil.copy(tarball, workdir / "fake.tgz"))

    monkeypatch.setattr(hostbin, "_download_package", fake_download)
    return asked


# ----------------------------------------------------------------------------- platform / cache


@pytest.mark.parametrize(
    ("machine", "tag"),
    [
        ("x86_64", "linux-x64"),
        ("AMD64", "linux-x64"),
        ("aarch64", "linux-arm64"),
        ("arm64", "linux-arm64"),
    ],
)
def test_platform_tag_maps_linux_machines(machine: str, tag: str) -> None:
    assert hostbin.platform_tag(machine) == tag


def test_platform_tag_rejects_unknown_cpu() -> None:
    with pytest.raises(UnsupportedPlatformError, match=r"riscv64.*linux-x64, linux-arm64"):
        hostbin.platform_tag("riscv64")


def test_platform_tag_rejects_other_operating_systems(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(UnsupportedPlatformError, match="darwin"):
        hostbin.platform_tag("arm64")


def test_cache_dir_prefers_explicit_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEMODE_TRIO_CACHE", "/srv/hosts")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert hostbin.cache_dir() == Path("/srv/hosts")


def test_cache_dir_follows_xdg_then_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEMODE_TRIO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert hostbin.cache_dir() == Path("/xdg/codemode-trio/hosts")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", "/home/someone")
    assert hostbin.cache_dir() == Path("/home/someone/.cache/codemode-trio/hosts")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert hostbin.cache_dir() == Path("/home/someone/.cache/codemode-trio/hosts")


def test_host_path_for_uses_version_and_platform_layout(env: Path) -> None:
    assert hostbin.host_path_for("0.150.0", "linux-arm64") == (
        env / "cache" / "0.150.0" / "linux-arm64" / "codex-code-mode-host"
    )
    assert hostbin.host_path_for().parent.name == hostbin.platform_tag()
    assert hostbin.host_path_for().parent.parent.name == hostbin.PINNED_VERSION


def test_pins_cover_required_versions_and_platforms() -> None:
    for key in [
        ("0.171.0", "linux-x64"),
        ("0.171.0", "linux-arm64"),
        ("0.160.0", "linux-x64"),
        ("0.150.0", "linux-x64"),
    ]:
        digest = hostbin.HOST_SHA256[key]
        assert len(digest) == 64
        int(digest, 16)
    assert hostbin.PINNED_VERSION == "0.171.0"
    assert hostbin.expected_sha256("0.171.0", "linux-x64") == (
        "f49bd4f0c0cc73cf1ec3a719009e07ce5b6e100520d023c760cc203fb37e5c6f"
    )
    assert hostbin.expected_sha256("0.0.1", "linux-x64") is None


# ----------------------------------------------------------------------------- locate


def test_locate_prefers_explicit_argument(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = make_executable(env / "explicit" / "host")
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", str(make_executable(env / "from-env")))
    make_executable(env / "bin" / "codex-code-mode-host")
    make_executable(hostbin.host_path_for())
    assert hostbin.locate_host(explicit) == explicit
    assert hostbin.locate_host(str(explicit)) == explicit


def test_locate_env_var_beats_path_and_cache(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from_env = make_executable(env / "from-env")
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", str(from_env))
    make_executable(env / "bin" / "codex-code-mode-host")
    make_executable(hostbin.host_path_for())
    assert hostbin.locate_host() == from_env


def test_locate_path_beats_cache(env: Path) -> None:
    on_path = make_executable(env / "bin" / "codex-code-mode-host")
    make_executable(hostbin.host_path_for())
    assert hostbin.locate_host() == on_path


def test_locate_falls_back_to_cache_for_pinned_version(env: Path) -> None:
    cached = make_executable(hostbin.host_path_for(hostbin.PINNED_VERSION))
    make_executable(hostbin.host_path_for("0.150.0"))
    assert hostbin.locate_host() == cached


def test_locate_ignores_non_executable_on_path_and_in_cache(env: Path) -> None:
    make_executable(env / "bin" / "codex-code-mode-host").chmod(0o644)
    make_executable(hostbin.host_path_for()).chmod(0o644)
    with pytest.raises(HostNotFound):
        hostbin.locate_host()


def test_locate_explicit_missing_path_is_an_error_not_a_fallthrough(env: Path) -> None:
    make_executable(env / "bin" / "codex-code-mode-host")
    missing = env / "nope" / "codex-code-mode-host"
    with pytest.raises(HostNotFound, match="does not exist") as info:
        hostbin.locate_host(missing)
    assert str(missing) in str(info.value)
    assert info.value.searched == (f"host_path argument: {missing}",)


def test_locate_env_missing_path_is_an_error(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_executable(hostbin.host_path_for())
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", str(env / "gone"))
    with pytest.raises(HostNotFound, match=r"\$CODEX_CODE_MODE_HOST_PATH\) does not exist"):
        hostbin.locate_host()


def test_locate_explicit_directory_or_non_executable_is_an_error(env: Path) -> None:
    with pytest.raises(HostNotFound, match="is not a file"):
        hostbin.locate_host(env)
    plain = make_executable(env / "plain")
    plain.chmod(0o644)
    with pytest.raises(HostNotFound, match="is not executable"):
        hostbin.locate_host(plain)


def test_locate_explicit_bare_name_is_looked_up_on_path(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(env)
    nightly = make_executable(env / "bin" / "host-nightly")
    assert hostbin.locate_host("host-nightly") == nightly


def test_locate_not_found_lists_every_place_and_how_to_fetch(env: Path) -> None:
    with pytest.raises(HostNotFound) as info:
        hostbin.locate_host()
    error = info.value
    cached = hostbin.host_path_for()
    assert error.searched == (
        "$CODEX_CODE_MODE_HOST_PATH (not set)",
        "codex-code-mode-host on $PATH",
        f"the host cache: {cached}",
    )
    message = str(error)
    for place in error.searched:
        assert place in message
    assert "codemode-trio host fetch" in message
    assert hostbin.PINNED_VERSION in message
    assert isinstance(error, CodeModeError)
    assert isinstance(error, FileNotFoundError)


def test_locate_on_unsupported_platform_still_reports_places(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "sparc64")
    with pytest.raises(HostNotFound) as info:
        hostbin.locate_host()
    assert len(info.value.searched) == 3
    assert "unavailable" in info.value.searched[2]


# ----------------------------------------------------------------------------- fetch (offline)


def test_fetch_refuses_unpinned_version_without_downloading(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostbin, "_download_package", pytest.fail)
    with pytest.raises(HostFetchError, match=r"no SHA-256 pin .* 0\.0\.1 .*allow_unpinned"):
        hostbin.fetch_host("0.0.1")
    assert not hostbin.host_path_for("0.0.1").exists()


def test_fetch_installs_verified_binary_atomically(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    asked = serve_tarball(monkeypatch, env, {"package/package.json": b"{}", _member(): FAKE_BINARY})
    notes: list[str] = []
    path = hostbin.fetch_host(FAKE_VERSION, progress=notes.append)
    assert path == hostbin.host_path_for(FAKE_VERSION)
    assert path.read_bytes() == FAKE_BINARY
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert asked == [f"@openai/codex@{FAKE_VERSION}-{hostbin.platform_tag()}"]
    # Nothing but the binary is left next to it (the temp dir is gone).
    assert os.listdir(path.parent) == ["codex-code-mode-host"]
    assert any(fake_pin in note for note in notes)


def test_fetch_returns_verified_cache_without_downloading(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    cached = make_executable(hostbin.host_path_for(FAKE_VERSION))
    monkeypatch.setattr(hostbin, "_download_package", pytest.fail)
    assert hostbin.fetch_host(FAKE_VERSION) == cached


def test_fetch_replaces_corrupted_cache(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    cached = make_executable(hostbin.host_path_for(FAKE_VERSION), b"tampered")
    asked = serve_tarball(monkeypatch, env, {_member(): FAKE_BINARY})
    assert hostbin.fetch_host(FAKE_VERSION) == cached
    assert cached.read_bytes() == FAKE_BINARY
    assert len(asked) == 1


def test_fetch_force_downloads_again(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    make_executable(hostbin.host_path_for(FAKE_VERSION))
    asked = serve_tarball(monkeypatch, env, {_member(): FAKE_BINARY})
    hostbin.fetch_host(FAKE_VERSION, force=True)
    assert len(asked) == 1


def test_fetch_detects_hash_mismatch_and_installs_nothing(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    evil = b"#!/bin/sh\necho not the host\n"
    serve_tarball(monkeypatch, env, {_member(): evil})
    with pytest.raises(ChecksumMismatchError, match="SHA-256 mismatch") as info:
        hostbin.fetch_host(FAKE_VERSION)
    assert info.value.expected == fake_pin
    assert info.value.actual == hashlib.sha256(evil).hexdigest()
    dest = hostbin.host_path_for(FAKE_VERSION)
    assert not dest.exists()
    assert os.listdir(dest.parent) == []


def test_fetch_reports_missing_member(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    serve_tarball(monkeypatch, env, {"package/vendor/other/bin/codex": FAKE_BINARY})
    with pytest.raises(HostFetchError, match="package layout may have changed"):
        hostbin.fetch_host(FAKE_VERSION)


def test_fetch_rejects_a_symlink_in_place_of_the_binary(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    tarball = make_tarball(env / "link.tgz", {}, symlink=_member())
    monkeypatch.setattr(
        hostbin,
        "_download_package",
        lambda spec, workdir, say: Path(shutil.copy(tarball, workdir / "x.tgz")),
    )
    with pytest.raises(HostFetchError, match="not a regular file"):
        hostbin.fetch_host(FAKE_VERSION)
    assert not hostbin.host_path_for(FAKE_VERSION).exists()


def test_fetch_reports_corrupt_tarball(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    def garbage(spec: str, workdir: Path, say: hostbin.Progress) -> Path:
        (workdir / "bad.tgz").write_bytes(b"this is not gzip")
        return workdir / "bad.tgz"

    monkeypatch.setattr(hostbin, "_download_package", garbage)
    with pytest.raises(HostFetchError, match="failed to extract"):
        hostbin.fetch_host(FAKE_VERSION)


def test_fetch_allow_unpinned_installs_unverified(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_tarball(monkeypatch, env, {_member(): FAKE_BINARY})
    notes: list[str] = []
    path = hostbin.fetch_host("0.0.1", allow_unpinned=True, progress=notes.append)
    assert path.read_bytes() == FAKE_BINARY
    assert "unverified" in notes[-1]


# ----------------------------------------------------------------- fetch over HTTP(S), no npm


class _Registry:
    """A tiny npm registry on localhost serving one package version."""

    def __init__(self, tarball: bytes, integrity: str | None) -> None:
        self.tarball = tarball
        self.integrity = integrity
        self.requests: list[str] = []
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append(self.path)
                if self.path.endswith(".tgz"):
                    body, kind = registry.tarball, "application/octet-stream"
                elif self.path.startswith("/@openai%2Fcodex/"):
                    dist: dict[str, str] = {"tarball": f"{registry.url}@openai/codex/-/codex.tgz"}
                    if registry.integrity is not None:
                        dist["integrity"] = registry.integrity
                    body, kind = json.dumps({"dist": dist}).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"


@pytest.fixture
def registry(
    env: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[_Registry]:
    tarball = make_tarball(env / "pkg.tgz", {_member(): FAKE_BINARY}).read_bytes()
    integrity = getattr(request, "param", "good")
    sri = {
        "good": "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode(),
        "bad": "sha512-" + base64.b64encode(hashlib.sha512(b"other").digest()).decode(),
        "none": None,
    }[integrity]
    reg = _Registry(tarball, sri)
    thread = threading.Thread(target=reg.server.serve_forever, daemon=True)
    thread.start()
    # No npm on PATH (the env fixture's PATH is an empty dir), so fetch goes over HTTP.
    monkeypatch.delenv("npm_config_registry", raising=False)
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", reg.url)
    # A proxy configured for the real internet must not intercept the local registry.
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    try:
        yield reg
    finally:
        reg.server.shutdown()
        reg.server.server_close()
        thread.join()


@pytest.mark.parametrize("registry", ["good", "none"], indirect=True)
def test_fetch_without_npm_downloads_from_configured_registry(
    registry: _Registry, fake_pin: str
) -> None:
    assert shutil.which("npm") is None
    path = hostbin.fetch_host(FAKE_VERSION)
    assert path.read_bytes() == FAKE_BINARY
    assert registry.requests == [
        f"/@openai%2Fcodex/{FAKE_VERSION}-{hostbin.platform_tag()}",
        "/@openai/codex/-/codex.tgz",
    ]


@pytest.mark.parametrize("registry", ["bad"], indirect=True)
def test_fetch_without_npm_checks_registry_integrity(registry: _Registry, fake_pin: str) -> None:
    with pytest.raises(HostFetchError, match="integrity check"):
        hostbin.fetch_host(FAKE_VERSION)
    assert not hostbin.host_path_for(FAKE_VERSION).exists()


def test_fetch_without_npm_reports_registry_http_errors(
    registry: _Registry, fake_pin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", registry.url + "missing")
    with pytest.raises(HostFetchError, match=r"GET .*missing/@openai%2Fcodex/.* HTTP 404"):
        hostbin.fetch_host(FAKE_VERSION)


def test_registry_url_prefers_upper_case_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NPM_CONFIG_REGISTRY", raising=False)
    monkeypatch.delenv("npm_config_registry", raising=False)
    assert hostbin.registry_url() == "https://registry.npmjs.org/"
    monkeypatch.setenv("npm_config_registry", "https://lower.example/npm")
    assert hostbin.registry_url() == "https://lower.example/npm/"
    monkeypatch.setenv("NPM_CONFIG_REGISTRY", "https://upper.example/")
    assert hostbin.registry_url() == "https://upper.example/"


# ----------------------------------------------------------------------------- fetch for real


def test_fetch_pinned_host_end_to_end_with_npm(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert NPM is not None
    empty_path = os.environ["PATH"]
    # npm (and the node it runs on) live in the real PATH, which the env fixture replaced.
    monkeypatch.setenv("PATH", os.path.dirname(NPM))
    path = hostbin.fetch_host()
    assert path == hostbin.host_path_for(hostbin.PINNED_VERSION)
    assert hostbin.sha256_file(path) == hostbin.expected_sha256(hostbin.PINNED_VERSION)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    monkeypatch.setenv("PATH", empty_path)
    assert hostbin.locate_host() == path
