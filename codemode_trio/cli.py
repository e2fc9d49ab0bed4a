"""The ``codemode-trio`` command line.

Each subcommand is a *registrar* (adds its parser and points ``handler`` at a function) plus one
handler function per leaf command taking the parsed arguments and returning an exit status. To add
a command, write both and append the registrar to ``_REGISTRARS``.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeAlias, cast

from . import __version__, hostbin
from ._terminal import json_terminal_safe, terminal_safe
from .errors import CodeModeError, HostNotFound, UsageError

# The environment variable that makes open_host_process record transcripts.
TRANSCRIPT_ENV = "CODEMODE_TRIO_TRANSCRIPT"
# The environment variable that makes errors show their Python traceback, like --debug.
DEBUG_ENV = "CODEMODE_TRIO_DEBUG"

__all__ = ["build_parser", "main"]

Handler: TypeAlias = Callable[[argparse.Namespace], int]
_Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _host_fetch(args: argparse.Namespace) -> int:
    """``host fetch``: install the host into the cache and print its path."""
    if not args.allow_unpinned:
        # Refused here, in the command line's words, before fetch_host says it in the API's.
        hostbin.check_version(args.version)
        refusal = hostbin.unpinned_refusal(args.version, hint="give --allow-unpinned")
        if refusal is not None:
            raise UsageError(refusal)
    path = hostbin.fetch_host(
        args.version, force=args.force, allow_unpinned=args.allow_unpinned, progress=_note
    )
    print(path)
    return 0


def _explicit_host(value: str, named_by: str) -> str:
    """The absolute path of a host the user named; one that is not there is a usage error."""
    try:
        return str(hostbin.locate_host(value, named_by=named_by))
    except HostNotFound as exc:
        raise UsageError(str(exc)) from exc


def _host_path(args: argparse.Namespace) -> int:
    """``host path``: print the absolute path of the host that would run, or why there is none."""
    if args.host_path is not None:
        print(_explicit_host(args.host_path, "HOST_PATH"))
    else:
        # Not found anywhere, or a cached binary that changed since it was verified (the
        # message says so): status 1, since the command itself was right.
        print(hostbin.locate_host())
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
        description="Download the host from the @openai/codex npm package, check its SHA-256 pin "
        "and install it into the cache. Prints the installed path.",
    )
    fetch.add_argument(
        "--version",
        default=hostbin.PINNED_VERSION,
        help="host version to install, MAJOR.MINOR.PATCH[-PRERELEASE] (default: %(default)s)",
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
        description="Print the absolute path of the host binary that would run: HOST_PATH if "
        f"given, else ${hostbin.HOST_PATH_ENV}, else the verified cached {hostbin.PINNED_VERSION} "
        f"(refused if it changed since it was verified), else {hostbin.HOST_BINARY_NAME} on $PATH.",
    )
    path.add_argument("host_path", nargs="?", metavar="HOST_PATH", help="explicit host path")
    path.set_defaults(handler=_host_path)


def _run(args: argparse.Namespace) -> int:
    """``run``: execute one cell on the real host with Python tools."""
    from ._oserror import os_error_text
    from .runner import run_from_cli  # imports trio: only when running a cell

    if args.source is not None:
        source = args.source
    elif args.file == "-":
        source = sys.stdin.read()
    else:
        try:
            with open(args.file, encoding="utf-8") as file:
                source = file.read()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {os_error_text(exc)}") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"cannot read {args.file}: not UTF-8 ({exc.reason})") from None
    host = _explicit_host(args.host, "--host") if args.host is not None else None
    return run_from_cli(
        source,
        tools_spec=args.tools,
        registry_name=args.registry,
        host_path=host,
        yield_time_ms=args.yield_time_ms,
        transcript=args.transcript,
        json_output=args.json,
        raw=args.raw,
    )


_U64_MAX = 2**64 - 1


def _milliseconds(text: str) -> int:
    """An argparse type: a whole number of milliseconds, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of milliseconds: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    if value > _U64_MAX:
        # The protocol carries it as an unsigned 64-bit number.
        raise argparse.ArgumentTypeError(f"must be at most {_U64_MAX}, got {value}")
    return value


def _check_run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what argparse alone cannot: exactly one of FILE and -e SOURCE (exit status 2)."""
    if args.source is not None and args.file is not None:
        parser.error("give a JavaScript FILE or -e SOURCE, not both")
    if args.source is None and args.file is None:
        parser.error("give a JavaScript FILE or -e SOURCE")


def _register_run(commands: _Subparsers) -> None:
    run = commands.add_parser(
        "run",
        help="run a JavaScript cell on the host, with Python tools",
        description="Run one JavaScript cell on codex-code-mode-host. Text output goes to stdout "
        "as it arrives, notifications to stderr, with control characters escaped (see --raw); the "
        "exit status is 1 if the script throws or is terminated, 130 after Ctrl-C. Set "
        f"${TRANSCRIPT_ENV} to record every frame.",
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
        type=_milliseconds,
        metavar="MS",
        help="how often output is collected and printed while the cell runs (default 1000)",
    )
    run.add_argument(
        "--transcript", metavar="FILE", help="record every frame to FILE (CBOR sequence)"
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print each output item, notification and the outcome as one JSON object per line",
    )
    run.add_argument(
        "--raw",
        action="store_true",
        help="print the cell's text as it is, control characters and escape sequences included "
        "(only for a cell you trust: it can retitle the terminal or write the clipboard)",
    )
    run.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,  # so it does not reset a --debug given before `run`
        help=f"also show the Python traceback of an error (also ${DEBUG_ENV}=1)",
    )
    run.set_defaults(handler=_run, check=functools.partial(_check_run, run))


def _transcript_show(args: argparse.Namespace) -> int:
    """``transcript show``: one decoded line per recorded frame, or an HTML timeline."""
    if args.html is not None:
        from .transcript_html import write_timeline

        write_timeline(args.file, args.html)
        return 0

    from .transcript_view import format_transcript

    # A hostile transcript may hold characters this terminal's encoding lacks; show them
    # escaped rather than dying on the first one.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        for line in format_transcript(args.file, full=args.full):
            print(line)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`transcript show FILE | head -1`): not an error.
        _silence_stdout()
    return 0


def _register_transcript(commands: _Subparsers) -> None:
    transcript = commands.add_parser(
        "transcript",
        help="inspect recorded frame transcripts",
        description="Inspect transcripts recorded with transcript=... or $" + TRANSCRIPT_ENV,
    )
    actions = transcript.add_subparsers(dest="transcript_command", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="print one decoded line per frame",
        description="Print one line per frame, with control characters escaped; a line marks where "
        "each appended connection begins, and an empty transcript prints 'no frames'. With "
        "--html OUT, write a timeline page instead (one file, no network access).",
    )
    show.add_argument("file", metavar="FILE", help="transcript file (CBOR sequence)")
    show.add_argument("--full", action="store_true", help="do not shorten long payloads")
    show.add_argument(
        "--html",
        metavar="OUT",
        help="write a self-contained HTML timeline of the transcript to OUT instead: a lane per "
        "cell, a bar per tool call and notification, marks for yields, waits and cancels",
    )
    show.set_defaults(handler=_transcript_show)


# One entry per top-level command, in the order `--help` lists them.
def _serve(args: argparse.Namespace) -> int:
    """``serve``: run the reference host on stdio or TCP."""
    from .faults import parse_faults
    from .host.listen import ListenError, ListenLimits, run_host  # loads V8 only here

    # A bad name is a UsageError: one line, exit status 2, before V8 is loaded.
    faults = parse_faults(args.fault) if args.fault else ()
    try:
        return run_host(
            args.listen,
            allow_remote=args.allow_remote,
            faults=faults,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            limits=ListenLimits(
                args.max_connections, args.hello_timeout, args.max_connection_memory
            ),
            no_token=args.no_token,
            allow_origins=args.allow_origin,
            allow_hosts=args.allow_host,
        )
    except ListenError as exc:
        raise UsageError(str(exc)) from exc


def _register_serve(commands: _Subparsers) -> None:
    from .faults.plan import FAULT_HELP  # no trio, no V8: cheap at start-up
    from .host.admission import ALLOW_HOST_HELP, ALLOW_ORIGIN_HELP, ALLOW_REMOTE_HELP, NO_TOKEN_HELP

    serve = commands.add_parser(
        "serve",
        help="run the reference code-mode host (JavaScript cells on V8)",
        description="Serve the code-mode host protocol, answering as codex-code-mode-host 0.171.0 "
        "does. On stdio (the default) it serves one connection; on tcp://IP:PORT one "
        "connection per accepted socket, printing the bound URL as the first line of "
        "stdout. Logs go to stderr. With --fault, a fault that ends a stdio connection "
        "ends the process: silent-exit-after with status 0 and nothing on stderr, the "
        "others with status 1 and 'Error: fault injected: NAME=N'. On ws://IP:PORT, "
        "where each frame is one whole message, truncate-after and oversize-after are "
        "refused.",
    )
    serve.add_argument(
        "--listen",
        default="stdio",
        metavar="URL",
        help="stdio, stdio://, tcp://IP:PORT, ws://IP:PORT or wss://IP:PORT (default: %(default)s)",
    )
    serve.add_argument("--allow-remote", action="store_true", help=ALLOW_REMOTE_HELP)
    serve.add_argument("--no-token", action="store_true", help=NO_TOKEN_HELP)
    serve.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN", help=ALLOW_ORIGIN_HELP
    )
    serve.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME", help=ALLOW_HOST_HELP
    )
    serve.add_argument(
        "--tls-cert", metavar="FILE", help="the certificate of a wss:// listener (PEM)"
    )
    serve.add_argument("--tls-key", metavar="FILE", help="the key of a wss:// listener (PEM)")
    serve.add_argument("--fault", metavar="NAME[=N][,...]", help=FAULT_HELP)
    serve.add_argument(
        "--max-connections",
        type=int,
        default=64,
        metavar="N",
        help="on tcp://, ws:// or wss://, how many connections are served at once, each in a "
        "process of its own; the next client is refused (default: %(default)s)",
    )
    serve.add_argument(
        "--hello-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on tcp://, ws:// or wss://, how long a client may take to send its first byte (on "
        "a WebSocket its request head), and again to finish its hello once a worker has "
        "it, before its socket is closed (default: %(default)s)",
    )
    serve.add_argument(
        "--max-connection-memory",
        type=int,
        default=4096,
        metavar="MIB",
        help="on tcp://, ws:// or wss://, the resident memory in MiB one connection's worker "
        "may use; past it, that connection alone is closed (default: %(default)s)",
    )
    serve.set_defaults(handler=_serve)


def _why_not_runnable(program: str) -> str | None:
    """Why ``program`` (a host command's first word) cannot be started, or None if it can."""
    import shutil

    if os.sep not in program:
        return None if shutil.which(program) else "not found on $PATH"
    if not os.path.exists(program):
        return "it does not exist"
    if not os.path.isfile(program):
        return "it is not a file"
    if not os.access(program, os.X_OK):
        return "it is not executable"
    return None


def _conform(args: argparse.Namespace) -> int:
    """``conform``: run the conformance suite against hosts; exit 0 only if all pass."""
    import trio

    from .conformance import SCENARIOS, HostTarget, ScenarioResult, run_suite, scenario_named
    from .conformance.report import json_lines, table

    if args.list:
        for scenario in SCENARIOS:
            print(scenario.name)
        return 0
    if args.client is not None:
        return _conform_client(args)
    targets = [HostTarget.parse(spec) for spec in args.host]
    if len({target.label for target in targets}) != len(targets):
        raise UsageError("each --host may be given once")
    try:
        scenarios = [scenario_named(name) for name in args.scenario] if args.scenario else SCENARIOS
    except KeyError as exc:
        names = ", ".join(scenario.name for scenario in SCENARIOS)
        raise UsageError(
            f"no scenario named {exc.args[0]!r} (`conform --list` prints them); "
            f"the scenarios are: {names}"
        ) from None
    for target in targets:
        if target.argv is not None and (problem := _why_not_runnable(target.argv[0])) is not None:
            raise UsageError(f"cannot run host {target.argv[0]}: {problem}")

    def emit(result: ScenarioResult) -> None:
        if args.json:
            print(json_terminal_safe(json_lines([result])[0]), flush=True)

    results = trio.run(lambda: run_suite(targets, scenarios=scenarios, on_result=emit))
    if not args.json:
        _say("\n".join(table(scenarios, targets, results)))
    return 0 if all(result.passed for result in results) else 1


def _check_conform(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Without --list, exactly one of --host and --client (argparse checks "not both")."""
    if not args.list and args.host is None and args.client is None:
        parser.error("one of the arguments --host --client is required (or --list)")


def _conform_client(args: argparse.Namespace) -> int:
    """``conform --client``: run a client against the reference host in checking mode."""
    import json

    import attrs
    import trio

    from .conformance.client_check import check_client

    client = _command("--client", args.client)
    if args.reference_host is not None:
        host = _command("--reference-host", args.reference_host, needed=False)
    else:
        host = [str(hostbin.locate_host())]
    report = trio.run(check_client, client, host)
    if args.json:
        verdict = {
            "client": args.client,
            "passed": report.passed,
            "exit_status": report.exit_status,
            "connections": report.connections,
            "violations": [attrs.asdict(violation) for violation in report.violations],
        }
        print(json_terminal_safe(json.dumps(verdict)))
    else:
        _say(f"client: {args.client}")
        print(f"connections checked: {report.connections}; exit status {report.exit_status}")
        for violation in report.violations:
            _say(f"  broke {violation}")
        if report.passed:
            print("no rule broken")
        elif not report.violations:
            reason = "never connected" if not report.connections else "did not finish its work"
            print(f"no rule broken, but the client {reason}")
    return 0 if report.passed else 1


def _command(option: str, value: str, *, needed: bool = True) -> list[str]:
    """A shell-quoted command line given with ``option``, split into its words."""
    import shlex

    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise UsageError(f"{option} {value!r}: {exc}") from None
    if needed and not words:
        raise UsageError(f"{option} needs a command")
    return words


def _register_conform(commands: _Subparsers) -> None:
    conform = commands.add_parser(
        "conform",
        help="check code-mode hosts against the protocol, scenario by scenario",
        description="Run the conformance scenarios against each host and compare every frame it "
        "sends, its exit status and the first line of its stderr with what host 0.171.0 does "
        "(durations aside). Prints a scenario x host table with the first difference of each "
        "failure; exit status 0 only when every scenario passes on every host.",
    )
    which = conform.add_mutually_exclusive_group()
    which.add_argument(
        "--host",
        action="append",
        metavar="CMD",
        help="a host command line (shell-quoted; spawned once per scenario) or tcp://HOST:PORT; "
        "repeat for several hosts",
    )
    which.add_argument(
        "--client",
        metavar="CMD",
        help="a client command line: run with CODEX_CODE_MODE_HOST_PATH pointing at the "
        "reference host in checking mode; reports every protocol rule the client breaks",
    )
    conform.add_argument(
        "--reference-host",
        metavar="CMD",
        help="with --client: the host to check against (default: the cached 0.171.0 host)",
    )
    conform.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object per result: {"scenario","section","host","passed","detail"}',
    )
    conform.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help="run only this scenario (repeatable; --list names them)",
    )
    conform.add_argument(
        "--list", action="store_true", help="print the scenario names, one per line, and exit"
    )
    conform.set_defaults(handler=_conform, check=functools.partial(_check_conform, conform))


def _transcript_replay(args: argparse.Namespace) -> int:
    """``transcript replay``: one side of a recording against a live host or client."""
    import trio

    from .conformance import HostTarget, observe
    from .conformance.compare import first_difference
    from .conformance.replay import replay_scenarios
    from .conformance.replay_client import replay_against_client
    from .conformance.steps import Expect

    if args.client is not None:
        from .transcript import read_transcript_items

        # A missing or malformed transcript is the caller's error (status 2), found before
        # any client is started, as with --host.
        for _item in read_transcript_items(args.file):
            pass
        verdict = trio.run(replay_against_client, args.file, _command("--client", args.client))
        if not verdict.connected:
            print("the client never started its host")
        elif verdict.divergence is not None:
            _say(f"first divergence: {verdict.divergence}")
        else:
            print(f"replays clean: {verdict.client_frames} client frames matched")
        if verdict.exit_status != 0:
            print(f"the client exited with status {verdict.exit_status}")
        return 0 if verdict.clean else 1

    target = HostTarget.parse(args.host)
    recorded = replay_scenarios(args.file)
    if not recorded:
        raise UsageError(f"{args.file} records no connection")

    async def replay() -> list[str | None]:
        found: list[str | None] = []
        for scenario, expected in recorded:
            actual = await observe(target, scenario)
            unordered = tuple(step.unordered for step in scenario.steps if isinstance(step, Expect))
            found.append(
                first_difference(expected, actual, unordered=unordered, check_process=False)
            )
        return found

    differences = trio.run(replay)
    for number, difference in enumerate(differences, start=1):
        if difference is None:
            print(f"connection {number}: replays clean")
        else:
            _say(f"connection {number}: first divergence: {difference}")
    return 0 if all(difference is None for difference in differences) else 1


def _register_transcript_replay(commands: _Subparsers) -> None:
    # A leaf of the `transcript` command registered above: its parser is looked up rather
    # than edited, so that this command lives with the other conformance tools.
    transcript = commands.choices["transcript"]
    actions = next(
        action for action in transcript._actions if isinstance(action, argparse._SubParsersAction)
    )
    replay = actions.add_parser(
        "replay",
        help="replay one side of a transcript against a live host or client",
        description="With --host, send the recorded client frames to a host and compare its "
        "answers with the recorded ones (durations aside). With --client, run a client command "
        "whose host plays the recorded host side, and report the first client frame that differs. "
        "Exit status 0 only when the replay is clean.",
    )
    replay.add_argument("file", metavar="FILE", help="transcript file (CBOR sequence)")
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--host", metavar="CMD", help="a host command line or tcp://HOST:PORT")
    which.add_argument(
        "--client",
        metavar="CMD",
        help="a client command line (run with CODEX_CODE_MODE_HOST_PATH set to the replayer)",
    )
    replay.set_defaults(handler=_transcript_replay)


def _register_demo(commands: _Subparsers) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the packaged inventory demo cell, with its Python tools",
        description="Run the inventory demo shipped in the package (codemode_trio/demo): the same "
        "cell and tools as `run examples/inventory.js --tools examples/tools.py`.",
    )
    demo.add_argument("--host", metavar="HOST_PATH", help="host binary (default: located)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    """``demo``: run the packaged demo cell."""
    from .demo import run_demo

    return run_demo(_explicit_host(args.host, "--host") if args.host is not None else None)


_REGISTRARS: tuple[Callable[[_Subparsers], None], ...] = (
    _register_run,
    _register_host,
    _register_transcript,
    _register_serve,
    _register_conform,
    _register_transcript_replay,
    _register_demo,
)


class _Parser(argparse.ArgumentParser):
    """An argument parser that speaks the command line's one error convention.

    Its error is the usage of the command that was being parsed, then one line
    ``codemode-trio: error: …``, and exit status 2. Every (sub)command's parser refuses its own
    unrecognised arguments, so ``run FILE --bogus`` shows ``run``'s usage rather than the
    top-level one that argparse would show after the subparser passed the leftovers up.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            # The innermost command parsed so far: argparse hands leftovers up from a
            # subcommand, and only the subcommand knows its own usage.
            owner: argparse.ArgumentParser = getattr(parsed, "_leaf_parser", self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {terminal_safe(message)}\n")


PROG = "codemode-trio"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every registered subcommand."""
    parser = _Parser(prog=PROG, description="Trio client tools for the code-mode host protocol.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="also show the Python traceback of an error on stderr; the exit status stays the "
        f"same (also ${DEBUG_ENV}=1)",
    )
    # The subcommands' parsers are _Parser too (add_subparsers passes on the parser's class).
    commands = cast(
        _Subparsers, parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    )
    for register in _REGISTRARS:
        register(commands)
    _mark_leaves(parser)
    return parser


def _mark_leaves(parser: argparse.ArgumentParser) -> None:
    """Let every command's parse name its own parser, for errors about leftover arguments."""
    children = [
        child
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for child in action.choices.values()
    ]
    if not children:
        parser.set_defaults(_leaf_parser=parser)
    for child in children:
        _mark_leaves(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Every error is one line ``codemode-trio: error: …`` on stderr. The status is 2 for a usage
    error (a bad option, a missing input file or host path), 1 for a failure of the host or of
    the work itself, 130 after Ctrl-C. ``--debug`` or ``$CODEMODE_TRIO_DEBUG=1`` add the
    Python traceback above that line and never change the status.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        # A command's own check of option combinations, which exits 2 through its parser.
        check: Callable[[argparse.Namespace], None] | None = getattr(args, "check", None)
        if check is not None:
            check(args)
    except SystemExit as exc:
        # argparse's usage error (2), --help or --version (0): a status, as for any command.
        return exc.code if isinstance(exc.code, int) else 2
    handler: Handler = args.handler
    debug = args.debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        return handler(args)
    # Not `except BaseException`: SystemExit (argparse, sys.exit in a tools module) passes, and
    # trio.run never lets a Cancelled out. Groups may hold a KeyboardInterrupt.
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:
        failure = _classify(exc)
        if failure is None:
            raise  # not the user's or the host's error: a bug, shown in full
        status, message = failure
        if debug and message is not None:
            # The traceback quotes the same host- or cell-written text as the message.
            trace = "".join(traceback.format_exception(exc))
            print(terminal_safe(trace, keep_lines=True), end="", file=sys.stderr)
        if message is not None:
            _error(message)
        if status == _BROKEN_PIPE:
            _silence_stdout()
        return status


#: The exit status after stdout was closed under us (as a shell reports a SIGPIPE death).
_BROKEN_PIPE = 128 + 13


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for member in exc.exceptions for leaf in _leaves(member)]
    return [exc]


def _classify(exc: BaseException) -> tuple[int, str | None] | None:
    """The exit status and message for an error that is the user's or the host's; else None.

    The nurseries between here and the failure may have wrapped it in exception groups, or
    collected a second error (a cancellation, a closed pipe) beside it: look at every leaf.
    """
    leaves = _leaves(exc)
    if any(isinstance(leaf, SystemExit) for leaf in leaves):
        return None
    if any(isinstance(leaf, BrokenPipeError) for leaf in leaves):
        # Whoever read our stdout (`| head -1`) has gone: there is no one to tell.
        return _BROKEN_PIPE, None
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        return 130, None
    if not all(isinstance(leaf, (CodeModeError, OSError)) for leaf in leaves):
        return None  # a bug somewhere beside it: hiding the traceback would hide the bug
    errors = [leaf for leaf in leaves if isinstance(leaf, CodeModeError)]
    if errors:
        first = errors[0]
        return (2 if isinstance(first, UsageError) else 1), str(first)
    return 1, str(leaves[0])  # an OSError, e.g. a host binary that cannot be executed


def _silence_stdout() -> None:
    # Point stdout at /dev/null so the interpreter's final flush does not fail again.
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing will flush to the pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def _error(message: str) -> None:
    # One line: a host's stderr tail, quoted in the message, spans several. That tail (and a
    # cell's error text inside it) is the host's or the cell's, so it is escaped too.
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    print(f"{PROG}: error: {terminal_safe(' | '.join(lines))}", file=sys.stderr, flush=True)


def _say(text: str, *, flush: bool = False) -> None:
    # Text on stdout that a host or a client wrote some of (a stderr tail, a divergent frame):
    # escaped like a cell's output, so that it cannot drive the terminal.
    print(terminal_safe(text, keep_lines=True), flush=flush)


def _note(message: str) -> None:
    print(f"codemode-trio: {message}", file=sys.stderr)
