"""The ``codemode-trio`` command line.

Each subcommand is a *registrar* (adds its parser and points ``handler`` at a function) plus one
handler function per leaf command taking the parsed arguments and returning an exit status. To add
a command, write both and append the registrar to ``_REGISTRARS``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TypeAlias

from . import hostbin
from .errors import CodeModeError, HostNotFound, UsageError

# The environment variable that makes open_host_process record transcripts.
TRANSCRIPT_ENV = "CODEMODE_TRIO_TRANSCRIPT"

__all__ = ["build_parser", "main"]

Handler: TypeAlias = Callable[[argparse.Namespace], int]
_Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _host_fetch(args: argparse.Namespace) -> int:
    """``host fetch``: install the host into the cache and print its path."""
    path = hostbin.fetch_host(
        args.version,
        force=args.force,
        allow_unpinned=args.allow_unpinned,
        progress=_note,
    )
    print(path)
    return 0


def _host_path(args: argparse.Namespace) -> int:
    """``host path``: print the host that would be run, or say where none was found."""
    try:
        path = hostbin.locate_host(args.host_path)
    except HostNotFound as exc:
        print(exc, file=sys.stderr)
        return 1
    print(path)
    return 0


def _register_host(commands: _Subparsers) -> None:
    host = commands.add_parser(
        "host",
        help="locate or fetch the codex-code-mode-host binary",
        description="Locate or fetch the codex-code-mode-host binary.",
    )
    actions = host.add_subparsers(dest="host_command", metavar="ACTION", required=True)

    fetch = actions.add_parser(
        "fetch",
        help="download, verify and cache the host",
        description=(
            "Download the host from the @openai/codex npm package, check its SHA-256 pin and "
            "install it into the cache. Prints the installed path."
        ),
    )
    fetch.add_argument(
        "--version",
        default=hostbin.PINNED_VERSION,
        help="host version to install (default: %(default)s)",
    )
    fetch.add_argument(
        "--force", action="store_true", help="download again even if a verified copy is cached"
    )
    fetch.add_argument(
        "--allow-unpinned",
        action="store_true",
        help="install a version that has no SHA-256 pin (unverified)",
    )
    fetch.set_defaults(handler=_host_fetch)

    path = actions.add_parser(
        "path",
        help="print the host binary that would be used",
        description=(
            "Print the host binary that would be used: HOST_PATH if given, else "
            f"${hostbin.HOST_PATH_ENV}, else {hostbin.HOST_BINARY_NAME} on $PATH, else the "
            f"cached {hostbin.PINNED_VERSION}."
        ),
    )
    path.add_argument("host_path", nargs="?", metavar="HOST_PATH", help="explicit host path")
    path.set_defaults(handler=_host_path)


def _run(args: argparse.Namespace) -> int:
    """``run``: execute one cell on the real host with Python tools."""
    from .runner import run_from_cli  # imports trio: only when running a cell

    if args.source is not None:
        source = args.source
    elif args.file == "-":
        source = sys.stdin.read()
    elif args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as file:
                source = file.read()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc}") from None
    else:
        raise UsageError("give a JavaScript FILE or -e SOURCE")
    return run_from_cli(
        source,
        tools_spec=args.tools,
        registry_name=args.registry,
        host_path=args.host,
        yield_time_ms=args.yield_time_ms,
        transcript=args.transcript,
    )


def _register_run(commands: _Subparsers) -> None:
    run = commands.add_parser(
        "run",
        help="run a JavaScript cell on the host, with Python tools",
        description=(
            "Run one JavaScript cell on codex-code-mode-host. Text output goes to stdout as it "
            "arrives, notifications to stderr; the exit status is 1 if the script throws. "
            f"Set ${TRANSCRIPT_ENV} to record every frame."
        ),
    )
    run.add_argument("file", nargs="?", metavar="FILE", help="JavaScript file ('-' for stdin)")
    run.add_argument("-e", dest="source", metavar="SOURCE", help="JavaScript source to run")
    run.add_argument(
        "--tools", metavar="MODULE_OR_FILE", help="module or .py file defining a ToolRegistry"
    )
    run.add_argument(
        "--registry", metavar="NAME", help="name of the ToolRegistry in --tools (default: tools)"
    )
    run.add_argument("--host", metavar="HOST_PATH", help="host binary (default: located)")
    run.add_argument(
        "--yield-time-ms",
        type=int,
        metavar="MS",
        help="how often output is collected and printed while the cell runs (default 1000)",
    )
    run.add_argument(
        "--transcript", metavar="FILE", help="record every frame to FILE (CBOR sequence)"
    )
    run.set_defaults(handler=_run)


def _transcript_show(args: argparse.Namespace) -> int:
    """``transcript show``: one decoded line per recorded frame."""
    from .transcript_view import format_transcript

    for line in format_transcript(args.file, full=args.full):
        print(line)
    return 0


def _register_transcript(commands: _Subparsers) -> None:
    transcript = commands.add_parser(
        "transcript",
        help="inspect recorded frame transcripts",
        description="Inspect transcripts recorded with transcript=... or $" + TRANSCRIPT_ENV,
    )
    actions = transcript.add_subparsers(dest="transcript_command", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show", help="print one decoded line per frame", description="Print one line per frame."
    )
    show.add_argument("file", metavar="FILE", help="transcript file (CBOR sequence)")
    show.add_argument("--full", action="store_true", help="do not shorten long payloads")
    show.set_defaults(handler=_transcript_show)


# One entry per top-level command, in the order `--help` lists them.
def _serve(args: argparse.Namespace) -> int:
    """``serve``: run the reference host on stdio or TCP."""
    from .host.listen import ListenError, run_host  # loads V8 only here

    try:
        return run_host(args.listen, allow_remote=args.allow_remote)
    except ListenError as exc:
        print(f"codemode-trio: error: {exc}", file=sys.stderr)
        return 2


def _register_serve(commands: _Subparsers) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the reference code-mode host (JavaScript cells on V8)",
        description=(
            "Serve the code-mode host protocol, answering as codex-code-mode-host 0.171.0 "
            "does. On stdio (the default) it serves one connection; on tcp://IP:PORT one "
            "connection per accepted socket, printing the bound URL as the first line of "
            "stdout. Logs go to stderr."
        ),
    )
    serve.add_argument(
        "--listen",
        default="stdio",
        metavar="URL",
        help="stdio, stdio:// or tcp://IP:PORT (default: %(default)s)",
    )
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback TCP address (anyone who connects can run JavaScript)",
    )
    serve.set_defaults(handler=_serve)


_REGISTRARS: tuple[Callable[[_Subparsers], None], ...] = (
    _register_run,
    _register_host,
    _register_transcript,
    _register_serve,
)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="codemode-trio",
        description="Trio client tools for the code-mode host protocol.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _REGISTRARS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except CodeModeError as exc:
        print(f"codemode-trio: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _note(message: str) -> None:
    print(f"codemode-trio: {message}", file=sys.stderr)
