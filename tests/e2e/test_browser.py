"""The plain JavaScript push client (server/static/hongbao-push.js) in a real headless Chromium
(Debian's /usr/bin/chromium driven by Playwright for Python; no browser download), on the demo
page the server serves: P-12 (token as subprotocol), delivery, resume, reset, preflight on 401, and
riding out a server that is down or does not answer (through the fault proxy, on its own thread)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hongbao.server.auth import mint
from playwright.sync_api import Page

from tests.e2e.conftest import push, wait_until
from tests.e2e.proxy import ThreadProxy
from tests.server.conftest import Server

FAST = "backoffBaseMs: 20, backoffCapMs: 100"


@pytest.fixture
def proxy(push_server: Server) -> Iterator[ThreadProxy]:
    """The fault proxy in front of the shared server, listening."""
    proxy = ThreadProxy(int(push_server.url.rsplit(":", 1)[1]))
    proxy.start()
    yield proxy
    proxy.close()


def _header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def _events(page: Page) -> list[dict[str, Any]]:
    return [
        {"offset": int(li.get_attribute("data-offset") or 0), "event": li.get_attribute("data-event")}
        for li in page.locator("#events li").all()
    ]


def test_demo_page_receives_an_event_with_the_token_as_subprotocol(push_server: Server, page: Page) -> None:
    """P-12: the page opens new WebSocket(url, ["bearer", jwt]); the 101 carries Sec-WebSocket-Protocol:
    bearer and never the token; a pushed red-packet event shows on the page; the token is in no log line."""
    uid = "browser-p12"
    token = push_server.token(uid)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    sent: list[dict[str, Any]] = []
    answered: list[dict[str, Any]] = []
    cdp.on("Network.webSocketWillSendHandshakeRequest", lambda e: sent.append(e["request"]))
    cdp.on("Network.webSocketHandshakeResponseReceived", lambda e: answered.append(e["response"]))
    page.goto(f"{push_server.url}/v1/ws/demo#token={token}")
    page.wait_for_function("document.getElementById('state').textContent === 'open'", timeout=10_000)
    push(push_server, uid, "packet_received", {"order_id": "10260129000000000017", "greeting": "恭喜发财"})
    page.wait_for_selector("#events li", timeout=10_000)
    assert _events(page) == [{"offset": 1, "event": "packet_received"}]
    assert "恭喜发财" in page.locator("#events li").first.text_content()  # type: ignore[operator]
    wait_until(lambda: len(answered) == 1)
    assert _header(sent[0]["headers"], "Sec-WebSocket-Protocol") == f"bearer, {token}"
    assert answered[0]["status"] == 101
    assert _header(answered[0]["headers"], "Sec-WebSocket-Protocol") == "bearer"
    assert not any(token in str(v) for v in answered[0]["headers"].values())
    assert token not in push_server.log() and token.split(".")[2] not in push_server.log()


def test_js_client_resumes_from_its_cursor(push_server: Server, page: Page) -> None:
    """A page client receives two events and closes; two more are pushed; a new client started with the
    first one's offset and epoch receives exactly the two it missed, in order."""
    uid = "browser-resume"
    page.goto(f"{push_server.url}/v1/ws/demo")
    page.evaluate(
        f"""token => {{
        window.got = [];
        window.first = new HongbaoPush({{token: () => token, onEvent: ev => got.push(ev.offset), {FAST}}});
        first.start();
    }}""",
        push_server.token(uid),
    )
    page.wait_for_function("first.stats.connects === 1")
    push(push_server, uid, "credited", {"n": 1})
    push(push_server, uid, "credited", {"n": 2})
    page.wait_for_function("got.length === 2")
    cursor = page.evaluate("(() => { first.close(); return [first.lastOffset, first.epoch]; })()")
    push(push_server, uid, "credited", {"n": 3})
    push(push_server, uid, "credited", {"n": 4})
    page.evaluate(
        f"""([token, offset, epoch]) => {{
        window.later = [];
        window.second = new HongbaoPush({{token: () => token, offset, epoch, {FAST},
                                          onEvent: ev => later.push([ev.offset, ev.data.n])}});
        second.start();
    }}""",
        [push_server.token(uid), *cursor],
    )
    page.wait_for_function("later.length === 2")
    assert page.evaluate("later") == [[3, 3], [4, 4]]
    assert cursor[0] == 2 and page.evaluate("[second.stats.resets, second.stats.acks]") == [0, 2]


def test_js_client_resets_on_a_lost_epoch(push_server: Server, page: Page) -> None:
    """A page client resuming from an epoch the server no longer has gets onReset once, then the
    events that are held, under the server's epoch."""
    uid = "browser-reset"
    push(push_server, uid, "refunded", {"n": 1})
    page.goto(f"{push_server.url}/v1/ws/demo")
    page.evaluate(
        f"""token => {{
        window.resets = 0; window.got = [];
        window.c = new HongbaoPush({{token: () => token, offset: 5, epoch: "gone", {FAST},
                                     onReset: () => {{ resets += 1; }},
                                     onEvent: ev => got.push([ev.offset, ev.epoch])}});
        c.start();
    }}""",
        push_server.token(uid),
    )
    page.wait_for_function("got.length === 1")
    resets, got, epoch = page.evaluate("[resets, got, c.epoch]")
    assert resets == 1 and epoch not in (None, "gone") and got == [[1, epoch]]


def test_js_client_preflights_and_stops_on_401(push_server: Server, page: Page) -> None:
    """A refused token: the browser only sees failed connects (1006), so after preflightAfter of them the
    client asks GET /v1/ws/preflight, learns 401, and stops after maxAuthFailures; backoff stays in bounds."""
    page.goto(f"{push_server.url}/v1/ws/demo")
    result = page.evaluate(f"""() => new Promise(resolve => {{
        const retries = [];
        const c = new HongbaoPush({{token: () => "not-a-jwt", preflightAfter: 2, maxAuthFailures: 2, {FAST},
            onRetry: (n, delay) => retries.push([n, delay]),
            onStopped: reason => resolve({{reason, stats: c.stats, retries}})}});
        c.start();
    }})""")
    assert result["reason"] == "unauthorized"
    assert result["stats"]["preflights"] == 2 and result["stats"]["connects"] == 0
    assert [n for n, _ in result["retries"]] == [0, 1]
    assert all(0 <= d <= min(100, 20 * 2**n) for n, d in result["retries"])


def test_js_client_waits_out_a_503(make_server: Callable[..., Server], page: Page) -> None:
    """Over the admission rate (0.5 new connections/s, burst 1) the browser sees only a failed
    connect; the preflight's 503 + Retry-After (whole seconds, at least 1) sets the wait, then the
    client gets in."""
    server = make_server(extra_config="ws_rate_per_s = 0.5\nws_burst = 1\n")
    page.goto(f"{server.url}/v1/ws/demo")
    result = page.evaluate(
        f"""([first, second]) => new Promise(resolve => {{
        const retries = [];
        const late = new HongbaoPush({{token: () => second, preflightAfter: 1, {FAST},
            onRetry: (n, delay, reason) => retries.push([n, delay, reason]),
            onState: state => {{ if (state === "open") resolve({{retries, stats: late.stats}}); }}}});
        new HongbaoPush({{token: () => first, onState: state => {{ if (state === "open") late.start(); }}}}).start();
    }})""",
        [server.token("busy-1"), server.token("busy-2")],
    )
    assert result["stats"]["connects"] == 1 and result["stats"]["preflights"] >= 1
    assert result["retries"][0][1] >= 1000 and result["retries"][0][2] == "connect failed"


def test_js_client_stops_when_replaced(push_server: Server, page: Page) -> None:
    """Two page clients of one user: the newer takes over, the older is closed 4001 and stops with
    onStopped("replaced") instead of fighting back; the newer stays open."""
    page.goto(f"{push_server.url}/v1/ws/demo")
    reason = page.evaluate(
        f"""token => new Promise(resolve => {{
        const older = new HongbaoPush({{token: () => token, {FAST}, onStopped: resolve,
            onState: state => {{ if (state === "open" && !window.newer) {{
                window.newer = new HongbaoPush({{token: () => token, {FAST}}});
                newer.start();
            }} }}}});
        older.start();
    }})""",
        push_server.token("browser-twice"),
    )
    assert reason == "replaced"
    page.wait_for_function("newer.stats.connects === 1")
    page.wait_for_timeout(300)
    assert page.evaluate("[newer.stats.connects, newer._conn !== null]") == [1, True]


def _within_full_jitter(retries: list[list[Any]]) -> bool:
    return [r[0] for r in retries] == list(range(len(retries))) and all(
        0 <= r[1] <= min(100, 20 * 2 ** r[0]) for r in retries
    )


def test_js_client_rides_out_a_server_that_is_down(push_server: Server, proxy: ThreadProxy, page: Page) -> None:
    """The server is unreachable before the first connect (every link reset, the preflights too):
    the client retries with full-jitter backoff and connects by itself once links go through; the
    same again after its connection is dropped (the topics it had confirmed are cleared meanwhile),
    and a pushed event arrives."""
    uid = "browser-down"
    page.goto(f"{proxy.url}/v1/ws/demo")
    proxy.refuse(True)
    proxy.drop()  # the page's keep-alive link too
    page.evaluate(
        f"""token => {{
        window.retries = []; window.got = []; window.states = [];
        window.c = new HongbaoPush({{token: () => token, preflightAfter: 2, topics: ["down-news"], {FAST},
            onRetry: (n, delay, reason) => retries.push([n, delay, reason]),
            onState: state => states.push(state), onEvent: ev => got.push(ev.offset)}});
        c.start();
    }}""",
        push_server.token(uid),
    )
    wait_until(lambda: page.evaluate("retries.length") >= 5)
    assert page.evaluate("[c.stats.connects, c.stats.preflights >= 3, c.subscribed.size]") == [0, True, 0]
    assert {r[2] for r in page.evaluate("retries")} == {"connect failed"}
    proxy.refuse(False)
    page.wait_for_function("c.stats.connects === 1 && c.subscribed.has('down-news')", timeout=10_000)
    first_outage = page.evaluate("retries")  # every retry before the first connect, whatever its reason
    proxy.refuse(True)
    proxy.drop()
    page.wait_for_function("states[states.length - 1] === 'retrying' && c.subscribed.size === 0", timeout=10_000)
    proxy.refuse(False)
    page.wait_for_function("c.stats.connects === 2", timeout=10_000)
    push(push_server, uid, "credited", {"n": 1})
    page.wait_for_function("got.length === 1", timeout=10_000)
    assert len(first_outage) >= 5 and _within_full_jitter(first_outage)


def test_js_client_gives_up_a_handshake_that_gets_no_answer(
    push_server: Server, proxy: ThreadProxy, page: Page
) -> None:
    """Links are accepted but nothing comes back (a server that hangs): each connect is given up after
    openTimeoutMs and retried with backoff like a failed one, the preflight is bounded the same way;
    once the link carries bytes again the client connects by itself."""
    page.goto(f"{proxy.url}/v1/ws/demo")
    proxy.freeze()
    proxy.drop()
    page.evaluate(
        f"""token => {{
        window.retries = [];
        window.c = new HongbaoPush({{token: () => token, openTimeoutMs: 300, preflightAfter: 2, {FAST},
            onRetry: (n, delay, reason) => retries.push([n, delay, reason])}});
        c.start();
    }}""",
        push_server.token("browser-hung"),
    )
    wait_until(lambda: page.evaluate("retries.length") >= 4)
    assert page.evaluate("[c.stats.connects, c.stats.preflights >= 2]") == [0, True]
    proxy.drop()  # the unanswered links, so that none delivers a stale handshake later
    proxy.thaw()
    page.wait_for_function("c.stats.connects === 1", timeout=10_000)
    retries = page.evaluate("retries")
    assert {r[2] for r in retries} == {"connect failed"} and _within_full_jitter(retries[:4])


def test_demo_page_says_the_token_is_refused(push_server: Server, page: Page) -> None:
    """The demo page opened with a token signed with another key: its handshakes fail, the preflights
    after them answer 401, the client stops, and the page says the token is refused and what to do."""
    token = mint("a-key-that-is-not-the-servers-own-key", "browser-badkey")
    page.goto(f"{push_server.url}/v1/ws/demo#token={token}")
    page.wait_for_function("document.getElementById('state').textContent === 'stopped'", timeout=20_000)
    assert page.locator("#detail").text_content() == (
        "authentication failed: the server refuses this token (401); mint a fresh one "
        "(hongbao token --user ID) and open this page again with #token=<jwt>"
    )
    assert page.evaluate("[hongbaoPush.stats.connects, hongbaoPush.stats.preflights]") == [0, 3]
