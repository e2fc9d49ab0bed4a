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
from codemode_trio.errors import CodeModeError, HostNotFound, UsageError
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


def test_a_relative_cache_override_still_gives_absolute_paths(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(env)
    monkeypatch.setenv("CODEMODE_TRIO_CACHE", "relative-cache")
    assert hostbin.cache_dir() == env / "relative-cache"
    assert hostbin.host_path_for().is_absolute()


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


@pytest.fixture
def pinned_cache(env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """FAKE_BINARY installed by fetch_host as the pinned version (so it is verified)."""
    pins = dict(hostbin.HOST_SHA256)
    pins[(hostbin.PINNED_VERSION, hostbin.platform_tag())] = FAKE_SHA256
    monkeypatch.setattr(hostbin, "HOST_SHA256", pins)
    serve_tarball(monkeypatch, env, {_member(): FAKE_BINARY})
    path = hostbin.fetch_host()
    monkeypatch.setattr(hostbin, "_download_package", pytest.fail)
    return path


def test_locate_prefers_explicit_argument(
    env: Path, monkeypatch: pytest.MonkeyPatch, pinned_cache: Path
) -> None:
    explicit = make_executable(env / "explicit" / "host")
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", str(make_executable(env / "from-env")))
    make_executable(env / "bin" / "codex-code-mode-host")
    assert hostbin.locate_host(explicit) == explicit
    assert hostbin.locate_host(str(explicit)) == explicit


def test_locate_env_var_beats_cache_and_path(
    env: Path, monkeypatch: pytest.MonkeyPatch, pinned_cache: Path
) -> None:
    from_env = make_executable(env / "from-env")
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", str(from_env))
    make_executable(env / "bin" / "codex-code-mode-host")
    assert hostbin.locate_host() == from_env


def test_locate_verified_cache_beats_a_host_planted_on_path(env: Path, pinned_cache: Path) -> None:
    make_executable(env / "bin" / "codex-code-mode-host", b"#!/bin/sh\necho impostor\n")
    assert hostbin.locate_host() == pinned_cache


def test_locate_uses_path_when_nothing_is_cached(env: Path) -> None:
    on_path = make_executable(env / "bin" / "codex-code-mode-host")
    make_executable(hostbin.host_path_for("0.150.0"))  # another version does not count
    assert hostbin.locate_host() == on_path


def test_locate_ignores_non_executable_on_path_and_in_cache(env: Path) -> None:
    make_executable(env / "bin" / "codex-code-mode-host").chmod(0o644)
    make_executable(hostbin.host_path_for()).chmod(0o644)
    with pytest.raises(HostNotFound):
        hostbin.locate_host()


def test_fetch_records_what_it_verified_next_to_the_binary(pinned_cache: Path) -> None:
    record = json.loads(hostbin.verified_record_path(pinned_cache).read_text())
    info = pinned_cache.stat()
    assert record == {"sha256": FAKE_SHA256, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def test_a_cached_binary_replaced_after_verification_is_refused(
    env: Path, pinned_cache: Path
) -> None:
    make_executable(env / "bin" / "codex-code-mode-host")  # no fallback to $PATH either
    pinned_cache.write_bytes(b"#!/bin/sh\necho swapped in later\n")
    with pytest.raises(hostbin.CachedHostChanged) as info:
        hostbin.locate_host()
    message = str(info.value)
    assert message.startswith(f"cached host {pinned_cache} changed since it was verified (size ")
    assert "refusing to run it" in message
    assert "codemode-trio host fetch" in message
    assert isinstance(info.value, HostNotFound)


def test_a_same_size_replacement_is_caught_by_its_modification_time(pinned_cache: Path) -> None:
    before = pinned_cache.stat()
    pinned_cache.write_bytes(FAKE_BINARY.replace(b"fake", b"evil"))
    os.utime(pinned_cache, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert pinned_cache.stat().st_size == before.st_size
    with pytest.raises(hostbin.CachedHostChanged, match=r"\(modification time changed\)"):
        hostbin.locate_host()


def test_fetch_again_reverifies_a_touched_but_intact_cache(pinned_cache: Path) -> None:
    os.utime(pinned_cache, ns=(0, 0))
    with pytest.raises(hostbin.CachedHostChanged):
        hostbin.locate_host()
    assert hostbin.fetch_host() == pinned_cache  # hashes, matches the pin, downloads nothing
    assert hostbin.locate_host() == pinned_cache


def test_a_forged_or_corrupt_record_is_refused(pinned_cache: Path) -> None:
    record_path = hostbin.verified_record_path(pinned_cache)
    record = json.loads(record_path.read_text())
    record_path.write_text(json.dumps({**record, "sha256": "0" * 64}))
    with pytest.raises(hostbin.CachedHostChanged, match="recorded SHA-256 is not the pin"):
        hostbin.locate_host()
    record_path.write_text("{not json")
    with pytest.raises(hostbin.CachedHostChanged):
        hostbin.locate_host()


def test_a_cache_entry_without_a_record_is_hashed_once_then_recorded(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    pins = dict(hostbin.HOST_SHA256)
    pins[(hostbin.PINNED_VERSION, hostbin.platform_tag())] = FAKE_SHA256
    monkeypatch.setattr(hostbin, "HOST_SHA256", pins)
    cached = make_executable(hostbin.host_path_for())
    assert hostbin.locate_host() == cached
    assert hostbin.verified_record_path(cached).is_file()
    monkeypatch.setattr(hostbin, "sha256_file", pytest.fail)  # later calls are cheap
    assert hostbin.locate_host() == cached


def test_a_cache_entry_without_a_record_that_fails_its_pin_is_refused(env: Path) -> None:
    cached = make_executable(hostbin.host_path_for())  # not the real 0.171.0
    with pytest.raises(hostbin.CachedHostChanged, match="does not match its SHA-256 pin"):
        hostbin.locate_host()
    assert not hostbin.verified_record_path(cached).exists()


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


def test_locate_always_returns_absolute_paths(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(env)
    here = make_executable(env / "host-here")
    assert hostbin.locate_host("host-here") == here  # a file in the working directory
    assert hostbin.locate_host("./host-here") == here
    # A relative $PATH entry: the spawn would resolve it again, maybe elsewhere.
    monkeypatch.setenv("PATH", "bin")
    on_path = make_executable(env / "bin" / "codex-code-mode-host")
    assert hostbin.locate_host() == on_path
    assert hostbin.locate_host("codex-code-mode-host") == on_path
    monkeypatch.setenv("CODEX_CODE_MODE_HOST_PATH", "host-here")
    assert hostbin.locate_host() == here
    for found in (hostbin.locate_host(), hostbin.locate_host("./host-here")):
        assert found.is_absolute()


def test_locate_not_found_lists_every_place_and_how_to_fetch(env: Path) -> None:
    with pytest.raises(HostNotFound) as info:
        hostbin.locate_host()
    error = info.value
    cached = hostbin.host_path_for()
    assert error.searched == (
        "$CODEX_CODE_MODE_HOST_PATH (not set)",
        f"the host cache: {cached}",
        "codex-code-mode-host on $PATH",
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
    assert "unavailable" in info.value.searched[1]


# ----------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    "version",
    [
        "../../x",
        "..",
        "1.2",
        "1.2.3.4",
        "v1.2.3",
        "1.2.3-",
        "1.2.3-a/b",
        "1.2.3/../x",
        "",
        "\uff11.2.3",
        "1.2.3 ",
        "1.2.3\n",
        "1.2.3-a b",
    ],
)
def test_malformed_versions_are_usage_errors_before_any_download(
    env: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setattr(hostbin, "_download_package", pytest.fail)
    with pytest.raises(UsageError, match="invalid host version"):
        hostbin.fetch_host(version, allow_unpinned=True)
    with pytest.raises(UsageError, match="invalid host version"):
        hostbin.host_path_for(version)
    assert not (env / "cache").exists()


@pytest.mark.parametrize(
    "version", ["0.171.0", "10.0.12", "1.2.3-alpha.1", "1.2.3-rc-1", "1.0.0-0"]
)
def test_well_formed_versions_name_a_directory_inside_the_cache(env: Path, version: str) -> None:
    path = hostbin.host_path_for(version)
    assert path.parent.parent == env / "cache" / version
    assert path.resolve().is_relative_to((env / "cache").resolve())


def test_an_unknown_platform_is_refused_for_cache_paths(env: Path) -> None:
    with pytest.raises(UnsupportedPlatformError, match="unknown host platform '../x'"):
        hostbin.host_path_for("1.2.3", "../x")


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
    # Nothing but the binary and its verification record is left (the temp dir is gone).
    assert sorted(os.listdir(path.parent)) == [
        "codex-code-mode-host",
        "codex-code-mode-host.verified.json",
    ]
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
        # False: send bodies without Content-Length (the end is the connection closing).
        self.declare_length = True
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
                if registry.declare_length:
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


@pytest.mark.parametrize("declare_length", [True, False])
def test_a_tarball_over_the_size_cap_is_cut_off_while_streaming(
    registry: _Registry, fake_pin: str, monkeypatch: pytest.MonkeyPatch, declare_length: bool
) -> None:
    registry.declare_length = declare_length
    registry.tarball += b"\0" * 200_000  # gzip ignores nothing: the tail is just bulk
    monkeypatch.setattr(hostbin, "_MAX_TARBALL_BYTES", 100_000)
    expected = "announced 2" if declare_length else "sent more than 100000 bytes"
    with pytest.raises(HostFetchError, match=expected):
        hostbin.fetch_host(FAKE_VERSION)
    assert not hostbin.host_path_for(FAKE_VERSION).exists()


def test_registry_metadata_over_its_cap_is_refused(
    registry: _Registry, fake_pin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.declare_length = False
    monkeypatch.setattr(hostbin, "_MAX_METADATA_BYTES", 10)
    with pytest.raises(HostFetchError, match="sent more than 10 bytes"):
        hostbin.fetch_host(FAKE_VERSION)
    assert registry.requests == [f"/@openai%2Fcodex/{FAKE_VERSION}-{hostbin.platform_tag()}"]


def test_extraction_stops_at_the_unpacked_size_cap(
    env: Path, monkeypatch: pytest.MonkeyPatch, fake_pin: str
) -> None:
    # A bulky entry in front of the binary: stream mode would have to inflate all of it.
    serve_tarball(monkeypatch, env, {"package/filler": b"\0" * 300_000, _member(): FAKE_BINARY})
    monkeypatch.setattr(hostbin, "_MAX_UNPACKED_BYTES", 100_000)
    with pytest.raises(HostFetchError, match="unpacks to more than 100000 bytes"):
        hostbin.fetch_host(FAKE_VERSION)
    assert not hostbin.host_path_for(FAKE_VERSION).exists()


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
