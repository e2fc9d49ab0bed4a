"""Locate, fetch and verify the ``codex-code-mode-host`` binary.

OpenAI publishes the host inside the per-platform npm packages of Codex
(``@openai/codex@<version>-linux-x64`` and friends). :func:`fetch_host` downloads one of those
packages, extracts only the host binary, checks it against a SHA-256 pin recorded here and installs
it into a per-user cache, recording what it verified (size, modification time, hash) in a small
sidecar file; :func:`locate_host` finds a host to run, looking at an explicit path, the environment,
that cache and ``$PATH``, in that order, and refuses a cached binary that changed since it was
verified.

This module is synchronous and uses only the standard library: it runs from the command line
(``codemode-trio host fetch``) and before any event loop needs the binary.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import os
import platform as _platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Final

from .errors import CodeModeError, HostNotFound, UsageError

__all__ = [
    "HOST_BINARY_NAME",
    "HOST_PATH_ENV",
    "HOST_SHA256",
    "CACHE_ENV",
    "PINNED_VERSION",
    "CachedHostChanged",
    "ChecksumMismatchError",
    "HostFetchError",
    "UnsupportedPlatformError",
    "cache_dir",
    "check_version",
    "expected_sha256",
    "fetch_host",
    "host_path_for",
    "locate_host",
    "platform_tag",
    "registry_url",
    "sha256_file",
    "unpinned_refusal",
    "verified_record_path",
]

PINNED_VERSION: Final = "0.171.0"
"""The host version this client is built and tested against; the default for fetch and locate."""

HOST_BINARY_NAME: Final = "codex-code-mode-host"

HOST_PATH_ENV: Final = "CODEX_CODE_MODE_HOST_PATH"
"""Environment variable naming an explicit host binary (consulted by :func:`locate_host`)."""

CACHE_ENV: Final = "CODEMODE_TRIO_CACHE"
"""Environment variable overriding the host cache directory (see :func:`cache_dir`)."""

NPM_PACKAGE: Final = "@openai/codex"
DEFAULT_REGISTRY: Final = "https://registry.npmjs.org/"

# npm platform suffix -> Rust target triple used in the package's vendor/ directory.
_TRIPLES: Final[Mapping[str, str]] = {
    "linux-x64": "x86_64-unknown-linux-musl",
    "linux-arm64": "aarch64-unknown-linux-musl",
}

HOST_SHA256: Final[Mapping[tuple[str, str], str]] = {
    # (version, platform) -> SHA-256 of package/vendor/<triple>/bin/codex-code-mode-host.
    # Each was computed from the tarball `npm pack @openai/codex@<version>-<platform>` returned.
    ("0.171.0", "linux-x64"): "f49bd4f0c0cc73cf1ec3a719009e07ce5b6e100520d023c760cc203fb37e5c6f",
    ("0.171.0", "linux-arm64"): "f330aa2016dc441e63084cc7030dce79f3815ed14e5de6b18608528e86826656",
    ("0.160.0", "linux-x64"): "37cab1584302611e9936902219640ab5e7a79fcfccd2504c6e85ea8cb97d0e10",
    ("0.150.0", "linux-x64"): "99a19eeb8e7f8d15f19a6ed05d9a5b92ecdbcdffa986aac8b569b066aac81e60",
}
"""SHA-256 pins of the host binary per ``(version, platform)``."""

# The real binaries are 55-75 MB. Anything far larger in that tar slot is not what we want,
# and refusing it early keeps a hostile or broken mirror from filling the disk.
_MAX_BINARY_BYTES: Final = 512 * 1024 * 1024
# npm pack of a ~170 MB tarball takes seconds on a good link; this only stops a wedged npm
# (for example one waiting on a proxy forever) from hanging the command indefinitely.
_NPM_TIMEOUT_S: Final = 900.0
# Per socket operation (connect, each read), not for the whole download.
_HTTP_TIMEOUT_S: Final = 60.0
_CHUNK: Final = 1024 * 1024
# The npm tarballs are ~170 MB. Downloads are counted while they stream, so a registry or mirror
# that sends more (or claims more) is cut off before it fills the disk.
_MAX_TARBALL_BYTES: Final = 768 * 1024 * 1024
# A per-version registry document is a few kilobytes.
_MAX_METADATA_BYTES: Final = 8 * 1024 * 1024
# Stream-mode tar reads through every entry before the one we want; a gzip bomb in front of it
# must not make us inflate without end.
_MAX_UNPACKED_BYTES: Final = 2 * 1024 * 1024 * 1024

# digits.digits.digits with an optional -prerelease: nothing that could climb out of, or
# reach around, the cache directory when used as a path component.
_VERSION_PATTERN: Final = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?")
_VERIFIED_SUFFIX: Final = ".verified.json"

Progress = Callable[[str], None]


class HostFetchError(CodeModeError):
    """Installing the host binary failed; the message names the step that failed."""


class CachedHostChanged(HostNotFound):
    """The cached host binary is not the one that was verified when it was installed."""


class UnsupportedPlatformError(HostFetchError):
    """No host binary is published for this operating system or CPU."""


class ChecksumMismatchError(HostFetchError):
    """A host binary's SHA-256 does not match its pin."""

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


def platform_tag(machine: str | None = None) -> str:
    """Return the npm platform suffix for this machine: ``"linux-x64"`` or ``"linux-arm64"``.

    ``machine`` overrides :func:`platform.machine` (useful for tests and cross-installs).
    Raises :class:`UnsupportedPlatformError` anywhere else.
    """
    arch = (machine if machine is not None else _platform.machine()).lower()
    if sys.platform.startswith("linux"):
        if arch in ("x86_64", "amd64"):
            return "linux-x64"
        if arch in ("aarch64", "arm64"):
            return "linux-arm64"
    raise UnsupportedPlatformError(
        f"no {HOST_BINARY_NAME} build is published for {sys.platform}/{arch or 'unknown'}; "
        f"supported platforms: {', '.join(_TRIPLES)}. Build the host yourself and point "
        f"${HOST_PATH_ENV} at it."
    )


def cache_dir() -> Path:
    """Return the root of the host cache.

    ``$CODEMODE_TRIO_CACHE`` if set, else ``${XDG_CACHE_HOME:-~/.cache}/codemode-trio/hosts``.
    """
    override = os.environ.get(CACHE_ENV)
    if override:
        # Absolute, so every path derived from it names the same file from any directory.
        return Path(os.path.abspath(Path(override).expanduser()))
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "codemode-trio" / "hosts"


def check_version(version: str) -> str:
    """Return ``version`` if it is ``MAJOR.MINOR.PATCH[-PRERELEASE]``; else raise ``UsageError``.

    The prerelease may use ``[0-9A-Za-z.-]``. Versions become cache directory names, so
    anything looser (``../../x``) is refused before it reaches a path.
    """
    if not isinstance(version, str) or not _VERSION_PATTERN.fullmatch(version):
        raise UsageError(
            f"invalid host version {version!r}: expected MAJOR.MINOR.PATCH with an optional "
            f"-PRERELEASE of letters, digits, '.' and '-' (for example {PINNED_VERSION})"
        )
    return version


def host_path_for(version: str = PINNED_VERSION, platform: str | None = None) -> Path:
    """Return where the cache keeps ``version`` of the host for ``platform`` (default: this one).

    The layout is ``<cache>/<version>/<platform>/codex-code-mode-host``. The file may not exist.
    A malformed ``version`` raises :class:`~codemode_trio.UsageError` (see
    :func:`check_version`), an unknown ``platform`` :class:`UnsupportedPlatformError`.
    """
    check_version(version)
    platform = platform or platform_tag()
    if platform not in _TRIPLES:
        raise UnsupportedPlatformError(
            f"unknown host platform {platform!r}; expected one of: {', '.join(_TRIPLES)}"
        )
    return cache_dir() / version / platform / HOST_BINARY_NAME


def verified_record_path(binary: Path) -> Path:
    """Return the sidecar file where the cache records what it verified about ``binary``."""
    return binary.with_name(binary.name + _VERIFIED_SUFFIX)


def expected_sha256(version: str, platform: str | None = None) -> str | None:
    """Return the pinned SHA-256 of the host for ``version`` on ``platform``, or ``None``."""
    return HOST_SHA256.get((version, platform or platform_tag()))


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the hex SHA-256 of a file's contents."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# locate


def _absolute(path: Path | str) -> Path:
    # Absolute, so the program spawned is the one reported: a relative name would be resolved
    # again (against $PATH or another working directory) at spawn time.
    return Path(os.path.abspath(path))


def _resolve_explicit(value: str, origin: str) -> Path:
    """Resolve a host path the user named; an unusable one is an error, never skipped.

    The error names the path as it was given (``./host`` stays ``./host``) and ``origin``.
    """
    path = Path(value).expanduser()
    if os.sep not in value and not path.exists():
        # A bare command name ("codex-code-mode-host-nightly") means "look it up on PATH",
        # as it would for a shell or for the reference client's Command::new.
        found = shutil.which(value)
        if found is not None:
            return _absolute(found)
    if not path.exists():
        problem = "does not exist"
    elif not path.is_file():
        problem = "is not a file"
    elif not os.access(path, os.X_OK):
        problem = "is not executable"
    else:
        return _absolute(path)
    raise HostNotFound(
        f"code-mode host {value} ({origin}) {problem}", searched=[f"{origin}: {value}"]
    )


def _record_verified(binary: Path, sha256: str) -> None:
    """Write the sidecar saying ``binary`` (as it is now) was verified to hash to ``sha256``."""
    info = binary.stat()
    record = {"sha256": sha256, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
    sidecar = verified_record_path(binary)
    # A unique staging name: two processes recording at once must not trip over each other.
    fd, staged = tempfile.mkstemp(prefix=".verified-", dir=sidecar.parent)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
        os.chmod(staged, 0o644)
        os.replace(staged, sidecar)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise


def _read_verified(binary: Path) -> dict[str, object] | None:
    try:
        record = json.loads(verified_record_path(binary).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable or corrupt: matches nothing
    return record if isinstance(record, dict) else {}


def _check_cached(binary: Path, expected: str | None) -> None:
    """Raise :class:`CachedHostChanged` unless ``binary`` is what the cache verified.

    The cheap check (size and modification time against the sidecar) runs on every call; the
    hash is only computed for an entry that has no sidecar yet (installed by an older release),
    and the sidecar is then written so that later calls are cheap again.
    """
    refetch = (
        "run `codemode-trio host fetch` to check it against the pin again "
        "(it downloads a fresh copy if the hash no longer matches)"
    )
    record = _read_verified(binary)
    info = binary.stat()
    if record is None:
        actual = sha256_file(binary)
        if expected is None or actual != expected:
            raise CachedHostChanged(
                f"cached host {binary} does not match its SHA-256 pin (expected {expected}, "
                f"got {actual}); {refetch}",
                searched=[f"the host cache: {binary}"],
            )
        # Best effort: a read-only cache still runs its verified host, just without a sidecar.
        with contextlib.suppress(OSError):
            _record_verified(binary, actual)
        return
    changes = []
    if record.get("size") != info.st_size:
        changes.append(f"size {record.get('size')} -> {info.st_size} bytes")
    if record.get("mtime_ns") != info.st_mtime_ns:
        changes.append("modification time changed")
    if expected is not None and record.get("sha256") != expected:
        changes.append("its recorded SHA-256 is not the pin")
    if changes:
        raise CachedHostChanged(
            f"cached host {binary} changed since it was verified ({'; '.join(changes)}); "
            f"refusing to run it; {refetch}",
            searched=[f"the host cache: {binary}"],
        )


def locate_host(
    host_path: str | os.PathLike[str] | None = None, *, named_by: str = "host_path argument"
) -> Path:
    """Find the ``codex-code-mode-host`` binary to run; always an absolute path.

    Looks, in order, at ``host_path``, ``$CODEX_CODE_MODE_HOST_PATH``, the cache entry for
    :data:`PINNED_VERSION` on this platform (filled and verified by ``codemode-trio host
    fetch``), then ``codex-code-mode-host`` on ``$PATH``. An explicit path or environment value
    that does not name an executable file is an error rather than a reason to keep looking:
    silently running some other host than the one asked for would be worse.

    A cached binary whose size or modification time differs from what was recorded when it
    was verified raises :class:`CachedHostChanged` (which says how to fetch it again); it is
    not re-hashed on every call, because hashing ~70 MB per connection would cost more than
    the connection itself.

    Raises :class:`~codemode_trio.errors.HostNotFound` listing every place looked at; when
    ``host_path`` is not usable, its message calls it ``named_by`` (a command line passes the
    option that gave it, such as ``--host``).
    """
    if host_path is not None:
        return _resolve_explicit(os.fspath(host_path), named_by)
    env_value = os.environ.get(HOST_PATH_ENV)
    if env_value:
        return _resolve_explicit(env_value, f"${HOST_PATH_ENV}")

    searched = [f"${HOST_PATH_ENV} (not set)"]
    try:
        cached = host_path_for(PINNED_VERSION)
    except UnsupportedPlatformError as exc:
        searched.append(f"the host cache (unavailable: {exc})")
    else:
        searched.append(f"the host cache: {cached}")
        if cached.is_file() and os.access(cached, os.X_OK):
            try:
                _check_cached(cached, expected_sha256(PINNED_VERSION))
            except CachedHostChanged:
                raise
            except OSError as exc:
                raise CachedHostChanged(
                    f"cannot check cached host {cached}: {exc}", searched=searched
                ) from exc
            return _absolute(cached)

    searched.append(f"{HOST_BINARY_NAME} on $PATH")
    found = shutil.which(HOST_BINARY_NAME)
    if found is not None:
        return _absolute(found)

    places = "\n".join(f"  - {place}" for place in searched)
    raise HostNotFound(
        f"{HOST_BINARY_NAME} was not found; looked at:\n{places}\n"
        f"Run `codemode-trio host fetch` to download and verify version {PINNED_VERSION}, "
        f"or set ${HOST_PATH_ENV} to the binary's path.",
        searched=searched,
    )


# --------------------------------------------------------------------------------------------
# fetch


def unpinned_refusal(
    version: str, platform: str | None = None, *, hint: str = "pass allow_unpinned=True"
) -> str | None:
    """Why :func:`fetch_host` refuses ``version`` without ``allow_unpinned``; None if pinned.

    ``hint`` says how to install it anyway, in the caller's words (the command line says
    ``give --allow-unpinned``).
    """
    platform = platform or platform_tag()
    if (version, platform) in HOST_SHA256:
        return None
    pinned = ", ".join(sorted(v for v, p in HOST_SHA256 if p == platform)) or "none"
    return (
        f"no SHA-256 pin for {HOST_BINARY_NAME} {version} on {platform} (pinned versions: "
        f"{pinned}); refusing to install an unverified binary: {hint} to install it anyway"
    )


def fetch_host(
    version: str = PINNED_VERSION,
    *,
    force: bool = False,
    allow_unpinned: bool = False,
    platform: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Install ``version`` of the host into the cache (if needed) and return its path.

    A cached binary whose SHA-256 matches the pin is returned as is unless ``force`` is set.
    Otherwise the npm package ``@openai/codex@<version>-<platform>`` is downloaded (with
    ``npm pack`` when ``npm`` is on ``PATH``, else straight from the registry over HTTPS; the
    registry is ``$NPM_CONFIG_REGISTRY`` / ``$npm_config_registry`` or the public one), the host
    binary alone is extracted, checked against its pin and moved into place atomically.

    A version with no pin in :data:`HOST_SHA256` is refused unless ``allow_unpinned`` is true;
    such a binary is installed unverified. What was verified (size, modification time, hash) is
    recorded next to the binary for :func:`locate_host`. Downloads are capped in size while they
    stream. ``progress``, if given, receives one-line status messages. A malformed ``version``
    raises :class:`~codemode_trio.UsageError` before anything is downloaded; every other failure
    raises :class:`HostFetchError` (or a subclass) naming the step.
    """
    check_version(version)
    platform = platform or platform_tag()
    dest = host_path_for(version, platform)  # refuses an unknown platform
    expected = HOST_SHA256.get((version, platform))
    if expected is None and not allow_unpinned:
        refusal = unpinned_refusal(version, platform, hint="pass allow_unpinned=True")
        raise HostFetchError(refusal or "")
    say = progress or (lambda _message: None)

    if not force and dest.is_file():
        if expected is None:
            # Installed unpinned earlier; there is nothing to check it against.
            return dest
        try:
            actual = sha256_file(dest)
        except OSError as exc:
            raise HostFetchError(f"failed to read cached host {dest}: {exc}") from exc
        if actual == expected:
            _record_or_fail(dest, actual)
            return dest
        say(f"cached {dest} does not match its SHA-256 pin; downloading it again")

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HostFetchError(f"failed to create cache directory {dest.parent}: {exc}") from exc

    spec = f"{NPM_PACKAGE}@{version}-{platform}"
    member = f"package/vendor/{_TRIPLES[platform]}/bin/{HOST_BINARY_NAME}"
    # Work next to the destination so the final os.replace stays on one filesystem (atomic),
    # and so a ~170 MB tarball does not land on a small tmpfs /tmp.
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest.parent) as tmp:
        workdir = Path(tmp)
        tarball = _download_package(spec, workdir, say)
        say(f"extracting {member}")
        staged = workdir / HOST_BINARY_NAME
        actual = _extract_member(tarball, member, staged, spec)
        if expected is not None and actual != expected:
            raise ChecksumMismatchError(
                f"SHA-256 mismatch for {HOST_BINARY_NAME} from {spec}: expected {expected}, "
                f"got {actual}; refusing to install it",
                expected=expected,
                actual=actual,
            )
        try:
            os.chmod(staged, 0o755)
            os.replace(staged, dest)
        except OSError as exc:
            raise HostFetchError(f"failed to install host into {dest}: {exc}") from exc
        _record_or_fail(dest, actual)
    say(f"installed {spec} host ({'sha256 ' + actual if expected else 'unverified'})")
    return dest


def _record_or_fail(binary: Path, sha256: str) -> None:
    try:
        _record_verified(binary, sha256)
    except OSError as exc:
        raise HostFetchError(
            f"failed to record the verified host in {verified_record_path(binary)}: {exc}"
        ) from exc


def _download_package(spec: str, workdir: Path, say: Progress) -> Path:
    """Download the npm tarball for ``spec`` into ``workdir``; return the tarball's path."""
    npm = shutil.which("npm")
    if npm is None:
        return _download_over_https(spec, workdir, say)
    try:
        return _npm_pack(npm, spec, workdir, say)
    except HostFetchError as npm_error:
        # A broken npm setup (unwritable ~/.npm, odd config) should not stop us when the
        # registry itself is reachable, so try the direct route before giving up.
        say(f"{npm_error}; trying the registry directly")
        try:
            return _download_over_https(spec, workdir, say)
        except HostFetchError as https_error:
            raise HostFetchError(f"{npm_error}; then {https_error}") from https_error


def _npm_pack(npm: str, spec: str, workdir: Path, say: Progress) -> Path:
    say(f"downloading {spec} with npm pack")
    try:
        completed = subprocess.run(
            [npm, "pack", "--json", "--ignore-scripts", spec],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_NPM_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostFetchError(f"npm pack {spec} failed: {exc}") from exc
    if completed.returncode != 0:
        detail = _last_lines(completed.stderr) or _last_lines(completed.stdout) or "no output"
        raise HostFetchError(
            f"npm pack {spec} failed with exit status {completed.returncode}: {detail}"
        )
    # npm prints the file name in its JSON report; fall back to whatever .tgz appeared
    # (older npm versions print lifecycle noise around the JSON).
    try:
        report = json.loads(completed.stdout)
        filename = Path(str(report[0]["filename"])).name
    except (ValueError, LookupError, TypeError):
        candidates = sorted(workdir.glob("*.tgz"))
        if len(candidates) != 1:
            raise HostFetchError(
                f"npm pack {spec} succeeded but produced no tarball in {workdir}"
            ) from None
        return candidates[0]
    tarball = workdir / filename
    if not tarball.is_file():
        raise HostFetchError(f"npm pack {spec} reported {filename} but did not write it")
    if tarball.stat().st_size > _MAX_TARBALL_BYTES:
        raise HostFetchError(
            f"npm pack {spec} produced {tarball.stat().st_size} bytes, more than the "
            f"{_MAX_TARBALL_BYTES}-byte limit for a host package"
        )
    return tarball


def _last_lines(output: bytes, count: int = 5) -> str:
    lines = []
    for raw in output.decode("utf-8", "replace").splitlines():
        # npm prefixes every line ("npm error 404 ...") and ends with a pointer to its debug
        # log; keep only the words that explain the failure.
        line = raw.removeprefix("npm error").removeprefix("npm ERR!").strip()
        if line and not line.isdigit() and not line.startswith("A complete log of this run"):
            lines.append(line)
    return " / ".join(lines[-count:])


def registry_url() -> str:
    """Return the npm registry base URL (``$NPM_CONFIG_REGISTRY``, ``$npm_config_registry``)."""
    for name in ("NPM_CONFIG_REGISTRY", "npm_config_registry"):
        value = os.environ.get(name)
        if value:
            return value if value.endswith("/") else value + "/"
    return DEFAULT_REGISTRY


def _download_over_https(spec: str, workdir: Path, say: Progress) -> Path:
    name, _, version = spec.rpartition("@")
    base = registry_url()
    # Scoped names keep the "@" but escape the "/" in the document path, as npm itself does.
    metadata_url = urllib.parse.urljoin(
        base, f"{urllib.parse.quote(name, safe='@')}/{urllib.parse.quote(version)}"
    )
    say(f"downloading {spec} from {base}")
    try:
        with _open_url(metadata_url, accept="application/json") as response:
            _check_declared_length(response, metadata_url, _MAX_METADATA_BYTES)
            data = response.read(_MAX_METADATA_BYTES + 1)
            if len(data) > _MAX_METADATA_BYTES:
                raise _too_large(metadata_url, _MAX_METADATA_BYTES)
            metadata = json.loads(data)
        dist = metadata["dist"]
        tarball_url = str(dist["tarball"])
        integrity = dist.get("integrity")
    except (OSError, http.client.HTTPException, ValueError, LookupError, TypeError) as exc:
        raise HostFetchError(f"failed to read registry metadata {metadata_url}: {exc}") from exc
    if urllib.parse.urlsplit(tarball_url).scheme not in ("https", "http"):
        raise HostFetchError(f"registry gave an unsupported tarball URL for {spec}: {tarball_url}")

    tarball = workdir / "package.tgz"
    sri = _SriChecker(integrity if isinstance(integrity, str) else None)
    try:
        with _open_url(tarball_url) as response, open(tarball, "wb") as out:
            _check_declared_length(response, tarball_url, _MAX_TARBALL_BYTES)
            received = 0
            while chunk := response.read(_CHUNK):
                received += len(chunk)
                if received > _MAX_TARBALL_BYTES:
                    raise _too_large(tarball_url, _MAX_TARBALL_BYTES)
                sri.update(chunk)
                out.write(chunk)
    except (OSError, http.client.HTTPException) as exc:
        raise HostFetchError(f"failed to download {tarball_url}: {exc}") from exc
    # The binary's own pin is the real guarantee; the registry's integrity hash catches a
    # truncated or corrupted transfer with a clearer message than a tar error would.
    problem = sri.problem()
    if problem is not None:
        raise HostFetchError(
            f"tarball {tarball_url} failed its registry integrity check: {problem}"
        )
    return tarball


def _too_large(url: str, limit: int) -> HostFetchError:
    return HostFetchError(f"GET {url} sent more than {limit} bytes; refusing to download more")


def _check_declared_length(response: IO[bytes], url: str, limit: int) -> None:
    headers = getattr(response, "headers", None)
    declared = ((headers.get("Content-Length") if headers is not None else None) or "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HostFetchError(
            f"GET {url} announced {int(declared)} bytes, more than the {limit}-byte limit"
        )


def _open_url(url: str, *, accept: str | None = None) -> IO[bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        response: IO[bytes] = urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        raise HostFetchError(f"GET {url} failed: HTTP {exc.code} {exc.reason}") from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        # URLError wraps the interesting part (DNS failure, refused connection) in .reason.
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise HostFetchError(f"GET {url} failed: {reason}") from exc
    return response


class _SriChecker:
    """Checks a download against an npm ``dist.integrity`` string (``sha512-<base64>``)."""

    def __init__(self, integrity: str | None) -> None:
        self._expected: list[tuple[str, bytes]] = []
        for token in (integrity or "").split():
            algorithm, _, digest = token.partition("-")
            if algorithm in ("sha512", "sha384", "sha256"):
                try:
                    self._expected.append((algorithm, base64.b64decode(digest, validate=True)))
                except ValueError:
                    continue
        self._hashers = {algorithm: hashlib.new(algorithm) for algorithm, _ in self._expected}

    def update(self, chunk: bytes) -> None:
        for hasher in self._hashers.values():
            hasher.update(chunk)

    def problem(self) -> str | None:
        # SRI semantics: any one matching hash is enough.
        if not self._expected or any(self._hashers[a].digest() == d for a, d in self._expected):
            return None
        algorithm, digest = self._expected[0]
        got = base64.b64encode(self._hashers[algorithm].digest()).decode()
        return f"expected {algorithm}-{base64.b64encode(digest).decode()}, got {algorithm}-{got}"


def _extract_member(tarball: Path, member: str, out_path: Path, spec: str) -> str:
    """Copy one regular-file member of a .tgz to ``out_path``; return its hex SHA-256.

    Only the named member is read, through ``extractfile``: nothing from the archive chooses a
    path on disk, so names with ``..``, absolute paths, links and device entries cannot escape
    or be created.
    """
    digest = hashlib.sha256()
    try:
        # Stream mode: the host is near the start of the archive, so stop reading once found.
        with tarfile.open(tarball, mode="r|gz") as archive:
            for entry in archive:
                if entry.offset_data + entry.size > _MAX_UNPACKED_BYTES:
                    raise HostFetchError(
                        f"{spec} unpacks to more than {_MAX_UNPACKED_BYTES} bytes before "
                        f"{member}; refusing to read further"
                    )
                if entry.name != member:
                    continue
                if not entry.isreg():
                    raise HostFetchError(
                        f"{member} in {spec} is not a regular file (tar type {entry.type!r})"
                    )
                if entry.size > _MAX_BINARY_BYTES:
                    raise HostFetchError(
                        f"{member} in {spec} is implausibly large ({entry.size} bytes)"
                    )
                source = archive.extractfile(entry)
                if source is None:  # pragma: no cover - isreg() entries always have data
                    raise HostFetchError(f"cannot read {member} from {spec}")
                with source, open(out_path, "wb") as out:
                    while chunk := source.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                return digest.hexdigest()
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise HostFetchError(f"failed to extract {member} from {spec} ({tarball}): {exc}") from exc
    raise HostFetchError(f"{spec} has no {member}; the package layout may have changed")
