"""Admission to a WebSocket listener: the sans-IO decision over a request head, case by case."""

from __future__ import annotations

import hmac
import re

import attrs
import h11
import pytest

import codemode_trio as cm
from codemode_trio.host.admission import (
    Accept,
    AdmissionPolicy,
    Respond,
    admit,
    check_options,
    listening_url,
    new_token,
)
from codemode_trio.transport.wsframes import upgrade_refusal

TOKEN = new_token()
PORT = 7070
POLICY = AdmissionPolicy("127.0.0.1", PORT, TOKEN)
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
UPGRADE = [
    ("Upgrade", "websocket"),
    ("Connection", "Upgrade"),
    ("Sec-WebSocket-Key", KEY),
    ("Sec-WebSocket-Version", "13"),
]
# What Chrome sends when a page at evil.example opens `new WebSocket("ws://127.0.0.1:7070/")`.
BROWSER = [
    ("Host", f"127.0.0.1:{PORT}"),
    ("Connection", "Upgrade"),
    ("Pragma", "no-cache"),
    ("Cache-Control", "no-cache"),
    ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36"),
    ("Upgrade", "websocket"),
    ("Origin", "https://evil.example"),
    ("Sec-WebSocket-Version", "13"),
    ("Accept-Encoding", "gzip, deflate, br, zstd"),
    ("Accept-Language", "en-US,en;q=0.9"),
    ("Sec-WebSocket-Key", KEY),
    ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits"),
]


def request(
    target: str = f"/?token={TOKEN}",
    headers: list[tuple[str, str]] | None = None,
    *,
    method: str = "GET",
    host: str | None = f"127.0.0.1:{PORT}",
) -> h11.Request:
    fields = list(UPGRADE if headers is None else headers)
    if host is not None:
        fields.insert(0, ("Host", host))
    return h11.Request(
        method=method, target=target, headers=fields, http_version="1.1" if host else "1.0"
    )


@attrs.frozen
class Head:
    """A request head from another parser than h11."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    http_version: bytes


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode("latin-1")) for k, v in headers]


def refused(admission: Accept | Respond) -> Respond:
    assert isinstance(admission, Respond), admission
    # Nothing a refusal says may hand out the token.
    assert TOKEN.encode() not in admission.body
    assert all(TOKEN not in value for _, value in admission.headers)
    assert TOKEN not in admission.reason
    return admission


def test_the_printed_url_carries_the_token_and_admits_a_client_that_uses_it() -> None:
    url = listening_url("ws", "127.0.0.1", PORT, TOKEN)
    assert url == f"ws://127.0.0.1:{PORT}/?token={TOKEN}"
    assert listening_url("wss", "::1", PORT, None) == f"wss://[::1]:{PORT}"
    assert admit(request(), POLICY) == Accept("/", bulk=False, key=KEY)


def test_tokens_are_fresh_url_safe_and_at_least_128_bits() -> None:
    tokens = {new_token() for _ in range(64)}
    assert len(tokens) == 64
    for token in tokens:
        assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", token)  # 43 base64 characters: 256 bits


@pytest.mark.parametrize(
    "target",
    ["/", "/?token=", "/?token=wrong", f"/?tok={TOKEN}", f"/?token={TOKEN[:-1]}", f"/{TOKEN}"],
)
def test_a_missing_or_wrong_token_gets_401(target: str) -> None:
    answer = refused(admit(request(target), POLICY))
    assert answer.status == 401
    assert ("WWW-Authenticate", 'Bearer realm="codemode-trio"') in answer.headers


def test_the_token_may_come_as_a_bearer_header_but_every_one_presented_must_match() -> None:
    bearer = [*UPGRADE, ("Authorization", f"Bearer {TOKEN}")]
    assert isinstance(admit(request("/", bearer), POLICY), Accept)
    wrong = [*UPGRADE, ("Authorization", "Bearer nope")]
    assert refused(admit(request("/", wrong), POLICY)).status == 401
    assert refused(admit(request(f"/?token={TOKEN}", wrong), POLICY)).status == 401
    assert refused(admit(request(f"/?token={TOKEN}&token=x"), POLICY)).status == 401


def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert refused(admit(request("/?token=guess"), POLICY)).status == 401
    assert seen == [(b"guess", TOKEN.encode())]


def test_a_bulk_lane_request_needs_the_token_too() -> None:
    bulk = "/bulk/9352fbe6-4ec3-4b67-8d59-f18f4502c252"
    assert admit(request(f"{bulk}?token={TOKEN}"), POLICY) == Accept(bulk, bulk=True, key=KEY)
    assert refused(admit(request(bulk), POLICY)).status == 401
    # Only a last segment under /bulk/ is a bulk lane; the token is dropped from the path.
    assert admit(request(f"/base/bulk/t?token={TOKEN}"), POLICY) == Accept(
        "/base/bulk/t", bulk=True, key=KEY
    )
    assert admit(request(f"/bulk/?token={TOKEN}"), POLICY) == Accept("/bulk/", bulk=False, key=KEY)


def test_no_token_admits_without_one() -> None:
    open_policy = AdmissionPolicy("127.0.0.1", PORT, None)
    assert admit(request("/"), open_policy) == Accept("/", bulk=False, key=KEY)


def test_a_browser_page_gets_403_even_with_the_token() -> None:
    answer = refused(admit(request(f"/?token={TOKEN}", BROWSER, host=None), POLICY))
    assert answer.status == 403
    assert answer.headers == ()
    for origin in ("null", "", "http://127.0.0.1:7070", "http://localhost:7070"):
        headers = [*UPGRADE, ("Origin", origin)]
        assert refused(admit(request(headers=headers), POLICY)).status == 403


def test_an_allowed_origin_is_admitted_exactly_as_a_browser_sends_it() -> None:
    policy = AdmissionPolicy("127.0.0.1", PORT, TOKEN, allowed_origins=["https://app.example"])
    browser = [(k, "https://app.example" if k == "Origin" else v) for k, v in BROWSER]
    assert admit(request(headers=browser, host=None), policy) == Accept("/", bulk=False, key=KEY)
    for near in ("https://APP.example", "https://app.example:443", "http://app.example"):
        headers = [*UPGRADE, ("Origin", near)]
        assert refused(admit(request(headers=headers), policy)).status == 403
    # Two Origin headers, one of them not allowed: refused.
    two = [*UPGRADE, ("Origin", "https://app.example"), ("Origin", "https://evil.example")]
    assert refused(admit(request(headers=two), policy)).status == 403
    # An allowed page still needs the token.
    assert refused(admit(request("/", browser, host=None), policy)).status == 401


@pytest.mark.parametrize(
    ("bound", "host", "admitted"),
    [
        ("127.0.0.1", f"127.0.0.1:{PORT}", True),
        ("127.0.0.1", f"LOCALHOST:{PORT}", True),
        ("127.0.0.1", f"127.0.0.1:{PORT + 1}", False),
        ("127.0.0.1", "127.0.0.1", False),  # no port means 80
        ("127.0.0.1", f"127.0.0.2:{PORT}", False),
        ("127.0.0.1", f"rebind.evil.example:{PORT}", False),
        ("127.0.0.1", f"localhost.:{PORT}", False),
        ("127.0.0.1", f"127.0.0.1:{PORT}:1", False),
        ("::1", f"[::1]:{PORT}", True),
        ("::1", f"::1:{PORT}", False),
        ("::1", f"localhost:{PORT}", True),
        ("0.0.0.0", f"10.1.2.3:{PORT}", True),  # any of our addresses; an IP cannot be rebound
        ("0.0.0.0", f"localhost:{PORT}", True),
        ("0.0.0.0", f"myhost.lan:{PORT}", False),
        ("::", f"[fe80::1]:{PORT}", True),
        ("10.1.2.3", f"10.1.2.3:{PORT}", True),
        ("10.1.2.3", f"localhost:{PORT}", False),
        ("10.1.2.3", f"10.1.2.4:{PORT}", False),
    ],
)
def test_the_host_header_must_name_the_listener(bound: str, host: str, admitted: bool) -> None:
    answer = admit(request(host=host), AdmissionPolicy(bound, PORT, TOKEN))
    if admitted:
        assert isinstance(answer, Accept)
    else:
        assert refused(answer).status == 421


def test_a_host_without_a_port_means_the_default_one_and_allowed_names_take_any_port() -> None:
    assert isinstance(
        admit(request(host="127.0.0.1"), AdmissionPolicy("127.0.0.1", 80, None)), Accept
    )
    secure = AdmissionPolicy("127.0.0.1", 443, None, secure=True)
    assert isinstance(admit(request(host="localhost"), secure), Accept)
    named = AdmissionPolicy("127.0.0.1", PORT, TOKEN, allowed_hosts=["Box.Example", "[fd00::1]"])
    for host in ("box.example", "box.example:443", f"BOX.example:{PORT}", "[fd00::1]:9"):
        assert isinstance(admit(request(host=host), named), Accept), host
    assert refused(admit(request(host="other.example"), named)).status == 421
    # HTTP/1.0 without Host is no browser: the token decides.
    assert isinstance(admit(request(host=None), POLICY), Accept)
    # Two Host headers are one too many (h11 refuses them itself; another parser may not).
    two = [(b"host", b"127.0.0.1:7070"), (b"host", b"evil.example")]
    head = Head(b"GET", f"/?token={TOKEN}".encode(), [*two, *_encoded(UPGRADE)], b"1.1")
    assert refused(admit(head, POLICY)).status == 421


def test_readyz_answers_as_host_0150_without_a_token() -> None:
    for method in ("GET", "HEAD"):
        for target in ("/readyz", "/readyz?x=1"):
            assert admit(request(target, [], method=method), POLICY) == Respond(200)
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        answer = admit(request("/readyz", [], method=method), POLICY)
        assert answer == Respond(405, (("Allow", "GET,HEAD"),))
    # An Origin is refused first, and 0.150 keeps the Allow of the 405 it would have sent.
    origin = [("Origin", "https://evil.example")]
    assert refused(admit(request("/readyz", origin), POLICY)).headers == ()
    post = refused(admit(request("/readyz", origin, method="POST"), POLICY))
    assert post.status == 403 and post.headers == (("Allow", "GET,HEAD"),)
    # Only the exact path is the probe.
    assert refused(admit(request("/readyz/", []), POLICY)).status == 401
    assert refused(admit(request("/readyz", [], host="evil.example:7070"), POLICY)).status == 421


def test_an_admitted_request_must_still_be_a_websocket_upgrade() -> None:
    assert refused(admit(request(headers=[]), POLICY)).status == 400
    post = refused(admit(request(method="POST"), POLICY))
    assert (post.status, post.body) == (405, b"Request method must be `GET`")
    old = [(k, "8" if k == "Sec-WebSocket-Version" else v) for k, v in UPGRADE]
    answer = refused(admit(request(headers=old), POLICY))
    assert answer.status == 426 and ("Sec-WebSocket-Version", "13") in answer.headers
    assert refused(admit(request("http://127.0.0.1:7070/"), POLICY)).status == 400


@pytest.mark.parametrize(
    ("change", "status"),
    [
        (("Connection", "keep-alive"), 400),
        (("Upgrade", "h2c"), 400),
        (("Sec-WebSocket-Key", ""), 400),
        (("Sec-WebSocket-Key", "c2hvcnQ="), 400),  # 5 bytes, not 16
        (("Sec-WebSocket-Key", "\xe9" * 24), 400),  # not ASCII: must not crash the listener
        (("Connection", "keep-alive, Upgrade"), None),
        (("Upgrade", "WebSocket"), None),
    ],
)
def test_upgrade_refusal_checks_each_upgrade_header(
    change: tuple[str, str], status: int | None
) -> None:
    name, value = change
    headers = [(k.encode(), (value if k == name else v).encode("latin-1")) for k, v in UPGRADE]
    refusal = upgrade_refusal(b"GET", headers)
    assert (refusal[0] if refusal else None) == status


def test_options_that_do_not_add_up_are_usage_errors() -> None:
    with pytest.raises(cm.UsageError, match="--allow-remote needs the token"):
        check_options("ws", loopback=False, allow_remote=True, no_token=True)
    with pytest.raises(cm.UsageError, match="--allow-remote needs the token"):
        check_options("wss", loopback=True, allow_remote=True, no_token=True)
    with pytest.raises(cm.UsageError, match="only allowed on a loopback address"):
        check_options("ws", loopback=False, allow_remote=False, no_token=True)
    with pytest.raises(cm.UsageError, match="--no-token belongs to a ws:// or wss:// listener"):
        check_options("tcp", loopback=True, allow_remote=False, no_token=True)
    with pytest.raises(cm.UsageError, match="--allow-origin belongs to"):
        check_options(
            "stdio", loopback=False, allow_remote=False, no_token=False, allow_origins=["x"]
        )
    with pytest.raises(cm.UsageError, match="expected a host name, without a port"):
        check_options("ws", loopback=True, allow_remote=False, no_token=False, allow_hosts=["a:1"])
    with pytest.raises(cm.UsageError, match="expected one origin"):
        check_options("ws", loopback=True, allow_remote=False, no_token=False, allow_origins=[""])
    check_options("ws", loopback=True, allow_remote=False, no_token=True)
    check_options("ws", loopback=False, allow_remote=True, no_token=False, allow_hosts=["[::1]"])
