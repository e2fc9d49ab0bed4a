"""The scenario suite: each checks one rule of the spec against host 0.171.0's behaviour.

Scenarios are written to be deterministic on a conforming host: every frame the host sends is
waited for by an :class:`Expect` before the next step that could race with it, timers are
short, and where the specification leaves an order open the frames are compared as a set.
"""

from __future__ import annotations

import json
from typing import Final

from .scenario import Scenario
from .steps import (
    CloseInput,
    Expect,
    Send,
    Step,
    cancel,
    delegate_error,
    delegate_result,
    execute,
    frame,
    hello,
    notification_delivered,
    open_session,
    raw_frame,
    request,
    shutdown,
    terminate,
    tool,
    wait,
    yield_request,
)

__all__ = ["SCENARIOS", "scenario_named"]

# A script that never finishes by itself, but sleeps rather than spins.
_FOREVER: Final = "await new Promise(() => {});"
_MAX: Final = 64 * 1024 * 1024
_HELLO: Final = hello(optional=[])


def _session(*steps: Step) -> tuple[Step, ...]:
    """Handshake asking for no capability, open session ``s1`` (request id 1), then ``steps``.

    No capability, so that the ready frame is the same on every version and a scenario's
    difference is its own; 0.171 gates none of the fields the scenarios send (SPEC §4.4)
    except the delegate cap, which this leaves at 1024.
    """
    return _greeted(open_session(1), Expect(1), *steps)


def _greeted(*steps: Step) -> tuple[Step, ...]:
    """Handshake asking for no capability, then ``steps``."""
    return (_HELLO, Expect(1), *steps)


def _padded_hello() -> bytes:
    body = json.dumps(json.loads(_HELLO.payload()[4:])).encode()
    return raw_frame(body + b" " * (_MAX - len(body)))


def _deep_result(depth: int) -> Send:
    nested = "[" * depth + "]" * depth
    text = (
        '{"type":"delegate/response","id":1,"result":{"status":"ok","value":'
        '{"type":"tool/result","result":' + nested + "}}}"
    )
    return Send(raw_frame(text.encode()))


def _budgeted_execute(request_id: int, source: str, tokens: int) -> Send:
    """``session/execute`` with ``max_output_tokens`` and no ``yield_time_ms`` field."""
    inner = dict(tool_call_id="c", enabled_tools=[], source=source, max_output_tokens=tokens)
    return request(request_id, {"method": "session/execute", "sessionId": "s1", "request": inner})


_ECHO: Final = [tool("echo")]

SCENARIOS: Final[tuple[Scenario, ...]] = (
    # §2 Framing
    Scenario(
        "frame-split-into-bytes",
        "§2",
        "a hello written one byte at a time is one frame",
        (Send(_HELLO.payload(), chunk=1), Expect(1)),
    ),
    Scenario(
        "frames-share-one-write",
        "§2",
        "several frames in one write are read in order",
        (
            Send(
                _HELLO.payload()
                + open_session(1).payload()
                + execute(2, "text('one write')").payload()
            ),
            Expect(5),
        ),
    ),
    Scenario(
        "frame-of-exactly-64-mib",
        "§2",
        "a payload of exactly 67108864 bytes is accepted",
        (Send(_padded_hello), Expect(1)),
    ),
    Scenario(
        "frame-length-over-64-mib",
        "§2",
        "a header announcing 67108865 bytes is fatal at once, exit 1",
        _greeted(Send((_MAX + 1).to_bytes(4, "little")), Expect(1)),
    ),
    Scenario(
        "frame-big-endian-header",
        "§2",
        "a big-endian length is read as a huge little-endian one: fatal",
        _greeted(Send((95).to_bytes(4, "big") + b"{}" * 2), Expect(1)),
    ),
    Scenario(
        "frame-zero-length",
        "§2",
        "an empty payload is fatal",
        _greeted(Send(raw_frame(b"")), Expect(1)),
    ),
    Scenario(
        "frame-trailing-characters",
        "§2",
        "trailing non-whitespace after the JSON value is fatal",
        _greeted(Send(raw_frame(b'{"type":"operation/cancel","id":1} x')), Expect(1)),
    ),
    Scenario(
        "frame-whitespace-around-json",
        "§2",
        "leading and trailing whitespace around the JSON value is fine",
        _greeted(
            Send(
                raw_frame(
                    b'  \n{"type":"operation/request","id":1,"request":'
                    b'{"method":"session/open","sessionId":"s1"}}\n '
                )
            ),
            Expect(1),
        ),
    ),
    Scenario(
        "frame-invalid-utf8",
        "§2",
        "invalid UTF-8 in a payload is fatal",
        _greeted(
            Send(
                raw_frame(
                    b'{"type":"operation/request","id":1,"request":'
                    b'{"method":"session/open","sessionId":"\xff\xfe"}}'
                )
            ),
            Expect(1),
        ),
    ),
    Scenario(
        "frame-duplicate-key",
        "§2",
        "a duplicate object key is fatal",
        _greeted(Send(raw_frame(b'{"type":"operation/cancel","id":1,"id":2}')), Expect(1)),
    ),
    Scenario(
        "frame-float-for-integer",
        "§2",
        "1.0 where an integer is expected is fatal",
        _greeted(Send(raw_frame(b'{"type":"operation/cancel","id":1.0}')), Expect(1)),
    ),
    Scenario(
        "eof-inside-header",
        "§2",
        "EOF inside a frame header is fatal (early eof), exit 1",
        _greeted(Send(b"\x10\x00"), CloseInput()),
    ),
    Scenario(
        "eof-inside-payload",
        "§2",
        "EOF inside a payload is fatal (early eof), exit 1",
        _greeted(Send(b'\x40\x00\x00\x00{"type"'), CloseInput()),
    ),
    Scenario(
        "nesting-within-limit",
        "§2",
        "a tool result nested 120 deep reaches the cell",
        _session(
            execute(
                2, "const r = await tools.echo({}); text(JSON.stringify(r).length)", tools=_ECHO
            ),
            Expect(2),
            _deep_result(120),
            Expect(2),
        ),
    ),
    Scenario(
        "nesting-over-limit",
        "§2",
        "a frame nested deeper than 128 is fatal",
        _session(
            execute(2, "await tools.echo({})", tools=_ECHO), Expect(2), _deep_result(130), Expect(1)
        ),
    ),
    # §3 JSON conventions
    Scenario(
        "unknown-field-is-fatal",
        "§3",
        "an unknown key in a request is fatal, exit 1",
        _greeted(request(1, {"method": "session/open", "sessionId": "s1", "zzz": 1}), Expect(1)),
    ),
    Scenario(
        "missing-field-is-fatal",
        "§3",
        "a missing required key is fatal",
        _greeted(request(1, {"method": "session/open"}), Expect(1)),
    ),
    Scenario(
        "unknown-message-type",
        "§5.1",
        "an unknown message type is fatal",
        _greeted(Send(frame({"type": "operation/zzz", "id": 1})), Expect(1)),
    ),
    Scenario(
        "unknown-method",
        "§6",
        "an unknown request method is fatal",
        _greeted(request(1, {"method": "session/zzz", "sessionId": "s1"}), Expect(1)),
    ),
    # §4 Handshake
    Scenario(
        "hello-every-capability",
        "§4.1",
        "ready lists the offered capabilities, sorted; unknown optional ones are ignored",
        (
            hello(
                optional=[
                    "yield-observation",
                    "x-foo",
                    "bounded-output-v1",
                    "delegate-capacity-4096",
                    "tool-catalog-revision-v1",
                    "session-cell-execution-resource-limits",
                    " yield-observation",
                ]
            ),
            Expect(1),
        ),
    ),
    Scenario(
        "hello-no-capabilities",
        "§4.2",
        "a client asking for no capability gets []",
        (hello(optional=[]), Expect(1)),
    ),
    Scenario(
        "hello-required-capability-offered",
        "§4.2",
        "a required capability the host has is granted",
        (hello(required=["yield-observation"], optional=[]), Expect(1)),
    ),
    Scenario(
        "reject-first-message-not-hello",
        "§4.2",
        "a request before hello is rejected with invalidHello, then exit 0",
        (open_session(1), Expect(1)),
    ),
    Scenario(
        "reject-no-compatible-version",
        "§4.2",
        "version check comes before capabilities: noCompatibleVersion",
        (hello(versions=[2], required=["a-unknown"]), Expect(1)),
    ),
    Scenario(
        "reject-missing-required-capability",
        "§4.2",
        "the smallest missing required capability is reported",
        (hello(required=["z-unknown", "a-unknown"], optional=[]), Expect(1)),
    ),
    Scenario(
        "hello-empty-versions",
        "§4.1",
        "an empty supportedVersions is fatal during the handshake",
        (hello(versions=[]), Expect(1)),
    ),
    Scenario(
        "hello-capability-required-and-optional",
        "§4.1",
        "a capability in both lists is fatal",
        (hello(required=["yield-observation"], optional=["yield-observation"]), Expect(1)),
    ),
    Scenario(
        "second-hello", "§4.2", "a second hello after ready is fatal", _greeted(hello(), Expect(1))
    ),
    Scenario(
        "eof-before-hello", "§4.2", "EOF before any hello: exit 0 with no output", (CloseInput(),)
    ),
    # §6.1 and §6.5 Sessions
    Scenario(
        "session-open-with-limits",
        "§6.1",
        "session/open with limits and server truncation answers session/ready",
        _greeted(
            open_session(
                1,
                cellExecutionLimits={"maxYieldTimeMs": 250, "maxHeapSizeBytes": None},
                outputTruncation="server",
            ),
            Expect(1),
        ),
    ),
    Scenario(
        "session-open-duplicate",
        "§6.1",
        "opening an open session id is an error; the connection survives",
        _session(open_session(2), Expect(1), open_session(3, "s2"), Expect(1)),
    ),
    Scenario(
        "session-id-reused-after-shutdown",
        "§6.1",
        "a shut-down session id cannot be reopened (was reused)",
        _session(shutdown(2), Expect(1), open_session(3), Expect(1)),
    ),
    Scenario(
        "session-blank-id",
        "§6.1",
        "a blank session id is fatal",
        _greeted(open_session(1, " "), Expect(1)),
    ),
    Scenario(
        "session-unknown-id",
        "§14.1",
        "execute, wait, terminate and shutdown on an unknown session are errors",
        _session(
            execute(2, "text(1)", session="nope"),
            Expect(1),
            wait(3, "1", session="nope"),
            Expect(1),
            terminate(4, "1", session="nope"),
            Expect(1),
            shutdown(5, "nope"),
            Expect(1),
        ),
    ),
    Scenario(
        "session-shutdown-twice",
        "§6.5",
        "a second shutdown of a session is an unknown session",
        _session(shutdown(2), Expect(1), shutdown(3), Expect(1)),
    ),
    Scenario(
        "session-shutdown-closes-cells",
        "§6.5",
        "shutdown cancels pending calls, closes every cell, ends pending observations",
        _session(
            execute(2, "yield_control(); await tools.echo({});", tools=_ECHO),
            Expect(3, unordered=True),
            execute(3, _FOREVER, yield_time_ms=60000),
            Expect(1),
            shutdown(4),
            Expect(5, unordered=True),
        ),
    ),
    Scenario(
        "store-is-per-session",
        "§16.1",
        "store/load persist across cells of one session, not to another session",
        _session(
            execute(2, "store('k', {v: 1})"),
            Expect(3),
            execute(3, "text(JSON.stringify(load('k')))"),
            Expect(3),
            open_session(4, "s2"),
            Expect(1),
            execute(5, "text(String(load('k')))", session="s2"),
            Expect(3),
        ),
    ),
    # §6.2 and §7 Execute
    Scenario(
        "execute-result",
        "§6.2",
        "started with cell 1, then a Result initial response, then cell/closed",
        _session(execute(2, "text('hi')"), Expect(3)),
    ),
    Scenario(
        "cell-ids-per-session",
        "§6.2.1",
        "cell ids count from 1 in each session and never repeat",
        _session(
            execute(2, "text(1)"),
            Expect(3),
            execute(3, "text(2)"),
            Expect(3),
            open_session(4, "s2"),
            Expect(1),
            execute(5, "text(3)", session="s2"),
            Expect(3),
        ),
    ),
    Scenario(
        "execute-throws",
        "§7",
        "an uncaught error keeps earlier output and sets error_text",
        _session(execute(2, "text('early'); throw new Error('boom')"), Expect(3)),
    ),
    Scenario(
        "execute-throws-string",
        "§7",
        "a thrown string becomes error_text verbatim",
        _session(execute(2, "throw 'a string'"), Expect(3)),
    ),
    Scenario(
        "execute-syntax-error",
        "§7",
        "a syntax error is a Result with the SyntaxError text",
        _session(execute(2, "return 1"), Expect(3)),
    ),
    Scenario(
        "execute-empty-source",
        "§6.2",
        "an empty source gives an empty Result",
        _session(execute(2, "", call_id=""), Expect(3)),
    ),
    Scenario(
        "execute-with-cell-id-is-fatal",
        "§6.2",
        "session/execute takes no cellId",
        _session(
            request(
                2,
                {
                    "method": "session/execute",
                    "sessionId": "s1",
                    "cellId": "1",
                    "request": {"tool_call_id": "c", "enabled_tools": [], "source": ""},
                },
            ),
            Expect(1),
        ),
    ),
    Scenario(
        "execute-negative-max-output-tokens",
        "§6.2",
        "a negative max_output_tokens is an operation error with no initial response",
        _session(
            _budgeted_execute(2, "", -1),
            Expect(1),
            execute(3, "text('next')"),
            Expect(3),
        ),
    ),
    Scenario(
        "text-values",
        "§8.2",
        "text() passes strings and JSON-stringifies the rest, one item per call",
        _session(
            execute(
                2,
                "text(42); text({a: 1}); text(null); text([1, 2]); "
                "text(undefined); text(''); text('a', 'b')",
            ),
            Expect(3),
        ),
    ),
    Scenario(
        "exit-keeps-output",
        "§12",
        "exit() ends the cell successfully with the output so far",
        _session(execute(2, "text('before'); exit(); text('after')"), Expect(3)),
    ),
    Scenario(
        "unicode-round-trip",
        "§3",
        "non-ASCII text, session ids and tool input survive unchanged",
        _greeted(
            open_session(1, "séance-🦀"),
            Expect(1),
            execute(
                2,
                "const r = await tools.echo({s: 'κόσμε \\u0000 🦀 עברית'}); text(r.s + ' ✓')",
                session="séance-🦀",
                tools=_ECHO,
            ),
            Expect(2),
            delegate_result(1, {"s": "κόσμε \u0000 🦀 עברית"}),
            Expect(2),
        ),
    ),
    # §6.3 and §9 Waits and yields
    Scenario(
        "yield-control-then-wait",
        "§6.3",
        "yield_control() yields at once; a wait returns only the newer output",
        _session(
            execute(
                2,
                "text('a'); yield_control(); await new Promise(r => setTimeout(r, 50)); text('b')",
            ),
            Expect(2),
            wait(3, "1"),
            Expect(2),
        ),
    ),
    Scenario(
        "yield-deadline",
        "§6.2",
        "a deadline passing in a tool call: delegate/request, then Yielded with the output so far",
        _session(
            # Blocked in a tool call when the deadline passes: the output is certainly there.
            execute(2, "text('x'); await tools.echo({})", tools=_ECHO, yield_time_ms=1000),
            Expect(3),
            terminate(3, "1"),
            Expect(3),
        ),
    ),
    Scenario(
        "max-yield-time-caps-deadline",
        "§6.1",
        "maxYieldTimeMs caps the execute's yield deadline",
        _greeted(
            open_session(1, cellExecutionLimits={"maxYieldTimeMs": 1000}),
            Expect(1),
            execute(2, "text('x'); await tools.echo({})", tools=_ECHO, yield_time_ms=60000),
            Expect(3),
            terminate(3, "1"),
            Expect(3),
        ),
    ),
    Scenario(
        "wait-before-initial-response",
        "§12",
        "a wait before the initial response fails: the cell already has an observer",
        _session(
            Send(
                execute(2, "await new Promise(r => setTimeout(r, 300)); text('done')").payload()
                + wait(3, "1").payload()
            ),
            Expect(2),
            Expect(2),
        ),
    ),
    Scenario(
        "wait-missing-cell",
        "§6.3",
        "a wait on an unknown cell is MissingCell, not an error",
        _session(wait(2, "9"), Expect(1), wait(3, ""), Expect(1)),
    ),
    Scenario(
        "wait-on-closed-cell",
        "§6.3",
        "a wait on a cell that closed, or of another session, is MissingCell",
        _session(
            execute(2, "text(1)"),
            Expect(3),
            wait(3, "1"),
            Expect(1),
            open_session(4, "s2"),
            Expect(1),
            execute(5, "yield_control(); " + _FOREVER, session="s2"),
            Expect(2),
            execute(6, "yield_control(); " + _FOREVER, session="s2"),
            Expect(2),
            wait(7, "1"),
            Expect(1),
            wait(8, "2"),
            Expect(1),
        ),
    ),
    Scenario(
        "operation-yield-on-wait",
        "§9.2",
        "operation/yield makes an in-flight wait return Yielded now",
        _session(
            execute(2, "text('x'); yield_control(); " + _FOREVER),
            Expect(2),
            Send(wait(3, "1", 60000).payload() + yield_request(3).payload()),
            Expect(1),
            terminate(4, "1"),
            Expect(2),
        ),
    ),
    Scenario(
        "operation-yield-on-execute",
        "§9.2",
        "operation/yield makes a pending initial response arrive as Yielded",
        _session(
            execute(2, _FOREVER, yield_time_ms=60000),
            Expect(1),
            yield_request(2),
            Expect(1),
            terminate(3, "1"),
            Expect(2),
        ),
    ),
    Scenario(
        "operation-cancel-on-wait",
        "§9.1",
        "operation/cancel ends a wait with an error; the output stays for the next wait",
        _session(
            execute(
                2,
                "yield_control(); await tools.echo({}); text('kept'); await tools.echo({})",
                tools=_ECHO,
            ),
            Expect(3),
            wait(3, "1", 60000),
            # The second call shows 'kept' was written while the wait was in flight.
            delegate_result(1, None),
            Expect(1),
            cancel(3),
            Expect(1),
            wait(4, "1", 0),
            Expect(1),
            terminate(5, "1"),
            Expect(3),
        ),
    ),
    Scenario(
        "operation-cancel-after-yield",
        "§9.1",
        "a cancel of a wait that already yielded is ignored",
        _session(
            execute(2, "yield_control(); " + _FOREVER),
            Expect(2),
            Send(wait(3, "1", 60000).payload() + yield_request(3).payload()),
            Expect(1),
            cancel(3),
            terminate(4, "1"),
            Expect(2),
        ),
    ),
    Scenario(
        "control-unknown-ids-ignored",
        "§9.1",
        "cancel, yield and delegate responses for unknown ids are ignored",
        _session(
            cancel(77),
            yield_request(78),
            delegate_result(79, None),
            cancel(-1),
            open_session(2, "s2"),
            Expect(1),
        ),
    ),
    Scenario(
        "request-id-reused",
        "§11",
        "reusing a request id is fatal",
        _session(open_session(1, "s2"), Expect(1)),
    ),
    # §6.4 Terminate
    Scenario(
        "terminate-running-cell",
        "§12",
        "terminating a busy cell: terminate response, initial response Terminated, cell/closed",
        _session(execute(2, "while (true) {}", yield_time_ms=60000), terminate(3, "1"), Expect(4)),
    ),
    Scenario(
        "terminate-finished-cell",
        "§6.4",
        "terminating a finished, unobserved cell returns its Result",
        _session(
            execute(2, "yield_control(); await new Promise(r => setTimeout(r, 20)); text('r')"),
            Expect(2),
            # A second cell that outlives the first, so that the first has finished when the
            # terminate arrives.
            execute(3, "await new Promise(r => setTimeout(r, 150))"),
            Expect(3),
            terminate(4, "1"),
            Expect(2),
        ),
    ),
    Scenario(
        "terminate-missing-cell",
        "§6.4",
        "terminating an unknown cell is MissingCell",
        _session(terminate(2, "5"), Expect(1)),
    ),
    Scenario(
        "terminate-cancels-delegate",
        "§10.2",
        "terminate cancels the cell's pending tool call before answering",
        _session(
            execute(2, "await tools.echo({n: 1})", tools=_ECHO, yield_time_ms=60000),
            Expect(2),
            terminate(3, "1"),
            Expect(4),
            delegate_result(1, "late"),
            open_session(4, "s2"),
            Expect(1),
        ),
    ),
    Scenario(
        "terminate-during-wait",
        "§12",
        "terminate while a wait is in flight: terminate response, wait response, cell/closed",
        _session(
            execute(
                2,
                "yield_control(); await new Promise(r => setTimeout(r, 50)); await tools.echo({})",
                tools=_ECHO,
            ),
            Expect(2),
            # The tool call shows the wait has long been in flight when the terminate comes.
            wait(3, "1", 60000),
            Expect(1),
            terminate(4, "1"),
            Expect(4),
        ),
    ),
    # §10 Delegates
    Scenario(
        "tool-invoke-round-trip",
        "§10.1",
        "a tool call is a tool/invoke delegate; its result reaches JS unchanged",
        _session(
            execute(2, "const r = await tools.echo({a: 1}); text(JSON.stringify(r))", tools=_ECHO),
            Expect(2),
            delegate_result(1, {"echo": {"a": 1}, "list": [1, "two", None, True]}),
            Expect(2),
        ),
    ),
    Scenario(
        "tool-error-arm",
        "§10.3",
        "an error answer rejects with the message string itself",
        _session(
            execute(
                2,
                "try { await tools.echo({}) } catch (e) { "
                "text(typeof e + ' ' + (e instanceof Error)) }; await tools.echo({})",
                tools=_ECHO,
            ),
            Expect(2),
            delegate_error(1, "tool exploded"),
            Expect(1),
            delegate_error(2, "tool exploded"),
            Expect(2),
        ),
    ),
    Scenario(
        "tool-input-serialisation",
        "§10.1",
        "tool input follows JSON.stringify; tool_name is echoed unchanged",
        _session(
            execute(
                2,
                "await tools.my_tool_x(); "
                "await tools.my_tool_x({f: () => 1, u: undefined, n: NaN, d: new Date(0)}, 2)",
                tools=[tool("my-tool.x", tool_name="mcp__x__tool")],
            ),
            Expect(2),
            delegate_result(1, None),
            Expect(1),
            delegate_result(2, None),
            Expect(2),
        ),
    ),
    Scenario(
        "parallel-tool-calls",
        "§10.1",
        "calls from one cell are numbered tool-1, tool-2; answers may come in any order",
        _session(
            execute(
                2,
                "const [a, b] = await Promise.all([tools.echo({i: 1}), tools.echo({i: 2})]);"
                " text(a + b)",
                tools=_ECHO,
            ),
            Expect(3),
            delegate_result(2, "B"),
            delegate_result(1, "A"),
            Expect(2),
        ),
    ),
    Scenario(
        "delegate-ids-shared-by-sessions",
        "§10.1",
        "delegate ids count from 1 across all sessions of the connection",
        _session(
            open_session(2, "s2"),
            Expect(1),
            execute(3, "await tools.echo({}); text('one')", tools=_ECHO),
            Expect(2),
            execute(4, "await tools.echo({}); text('two')", session="s2", tools=_ECHO),
            Expect(2),
            delegate_result(1, 1),
            Expect(2),
            delegate_result(2, 2),
            Expect(2),
        ),
    ),
    Scenario(
        "tool-not-enabled",
        "§14.2",
        "calling a tool that is not enabled is a TypeError in the cell",
        _session(execute(2, "await tools.missing({})", tools=_ECHO), Expect(3)),
    ),
    Scenario(
        "dynamic-import-refused",
        "§14.2",
        "a dynamic import() is refused in the cell with the reference text",
        _session(execute(2, "try { await import('x') } catch (e) { text(String(e)) }"), Expect(3)),
    ),
    Scenario(
        "wrong-delegate-answer-kind",
        "§10.3",
        "notification/delivered answering a tool call is an invalid tool result in JS",
        _session(
            execute(2, "await tools.echo({})", tools=_ECHO),
            Expect(2),
            notification_delivered(1),
            Expect(2),
        ),
    ),
    Scenario(
        "unawaited-call-cancelled-at-end",
        "§10.2",
        "a call still pending when the script ends gets delegate/cancel",
        _session(execute(2, "tools.echo({}); text('end')", tools=_ECHO), Expect(5)),
    ),
    Scenario(
        "notification-round-trip",
        "§10.1",
        "notify() sends notification/send with the execute's call id; the ack releases the result",
        _session(
            execute(2, "notify('hello there'); notify(42); text('after')", call_id="call-N"),
            Expect(3),
            notification_delivered(1),
            notification_delivered(2),
            Expect(2),
        ),
    ),
    Scenario(
        "notify-empty-text",
        "§10.1",
        "notify('') throws in the cell and sends nothing",
        _session(execute(2, "notify('')"), Expect(3)),
    ),
    # §6.2.2 Catalog revisions
    Scenario(
        "catalog-revisions",
        "§6.2.2",
        "a revision is registered with tools, reused with [], and 0 is invalid",
        _session(
            execute(2, "", catalog_revision=5),
            Expect(1),
            execute(
                3, "text(ALL_TOOLS.map(t => t.name).join())", tools=[tool("a")], catalog_revision=5
            ),
            Expect(3),
            execute(4, "text(ALL_TOOLS.map(t => t.name).join())", catalog_revision=5),
            Expect(3),
            execute(5, "", tools=[tool("b")], catalog_revision=5),
            Expect(1),
            execute(6, "", catalog_revision=0),
            Expect(1),
        ),
    ),
    # §8.5 and §13 Limits
    Scenario(
        "bounded-output",
        "§8.5",
        "server truncation merges text into one item with the reference banner",
        _greeted(
            open_session(1, outputTruncation="server"),
            Expect(1),
            _budgeted_execute(2, "text('x'.repeat(1000)); text('tail')", 10),
            Expect(3),
        ),
    ),
    Scenario(
        "client-output-untruncated",
        "§8.5",
        "in client mode 100000 characters come back whole",
        _session(execute(2, "text('y'.repeat(100000))"), Expect(3)),
    ),
    Scenario(
        "pending-delegate-cap",
        "§13.1",
        "without delegate-capacity-4096 the 1025th pending call fails in JS",
        _session(
            execute(
                2,
                "const errors = []; for (let i = 0; i < 1025; i++) {"
                " tools.echo({i}).catch(e => errors.push(String(e)));"
                " if (i % 100 === 99) await new Promise(r => setTimeout(r, 80)); }"
                " await new Promise(r => setTimeout(r, 50)); text(errors.join());"
                " yield_control(); " + _FOREVER,
                tools=_ECHO,
                yield_time_ms=60000,
            ),
            Expect(1),
            Expect(1024),
            Expect(1),
            shutdown(3),
            Expect(1026, unordered=True),
        ),
    ),
    # §1 EOF
    Scenario(
        "eof-with-running-cell",
        "§1",
        "EOF at a frame boundary with a cell and a call pending: exit 0, nothing more sent",
        _session(
            execute(2, "await tools.echo({}); " + _FOREVER, tools=_ECHO), Expect(2), CloseInput()
        ),
    ),
)


def scenario_named(name: str) -> Scenario:
    """The scenario called ``name`` (raises KeyError)."""
    return {scenario.name: scenario for scenario in SCENARIOS}[name]
