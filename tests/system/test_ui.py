"""The browser explorer (``/ui`` of ``hivemind serve``) in a real headless Chromium, driven by
Playwright: log in with an admin token, browse namespaces, notes and a note, run a query in
the playground, open an audit entry and reproduce it, read the curves; each time what the page
shows is checked against the JSON the API gives for the same thing. Also: keyboard only, a
phone-sized window, the page's own script only (no request leaves the server).

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or ``HIVEMIND_CHROMIUM``); without
it the tests skip on a laptop and fail under ``CI=true`` (``.ci/run`` installs it). With
``HIVEMIND_UI_SCREENSHOTS=DIR`` each view is also saved as DIR/<view>.png (docs/ui/ holds the
ones the docs show)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.worker.cli.demo import ASKS
from hivemind_memory.worker.cli.demo_data import AS_OF, NS, sample_events
from tests.support import IN_CI
from tests.support.frontdoor import ALICE, OPS, Live, call, start_live

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("HIVEMIND_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = os.environ.get("HIVEMIND_UI_SCREENSHOTS")
AS_OF_TEXT = AS_OF.isoformat().replace("+00:00", "Z")


def _need_browser() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = "playwright is not installed" if sync_playwright is None else (
        None if Path(CHROMIUM).exists() else f"no Chromium at {CHROMIUM}")
    if missing:
        if IN_CI:
            pytest.fail(missing + " (CI=true: the browser tests must run; .ci/run installs it)")
        pytest.skip(missing)
    return sync_playwright


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server on the embedded store holding the demo's sample log and its five queries
    (served as of the demo's time, by the demo's agents) and one live query by ops."""
    store = f"memory://{tmp_path_factory.mktemp('ui')}/data"
    srv = start_live(store)
    client = srv.served.client
    client.append(sample_events())
    assert client.wait_projected(NS, 30)
    for agent, text, budget in ASKS:
        got = client.query(NS, text, budget, agent=agent, as_of=AS_OF)
        assert "error" not in got, got
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = _need_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, live: Live) -> Iterator[Any]:
    """A fresh tab at 1280x800, logged in as ops (admin); requests to anything but the server
    fail the test."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    outside: list[str] = []
    pg.on("request", lambda r: None if r.url.startswith(live.base) else outside.append(r.url))
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    login(pg, live, OPS)
    yield pg
    ctx.close()
    assert not outside, f"requests left the server: {outside}"
    assert not errors, f"script errors: {errors}"


def login(pg: Any, live: Live, token: str) -> None:
    pg.goto(live.base + "/ui/")
    pg.wait_for_selector("#login:not([hidden])")
    pg.fill("#token", token)
    pg.press("#token", "Enter")
    pg.wait_for_selector("[data-ns]")


def shot(pg: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=False)


def api(live: Live, path: str, body: Any = None, method: str = "GET") -> Any:
    status, got = call(live.base, method, path, body, token=OPS)
    assert status == 200, got
    return got


def test_login_refuses_a_non_admin_token_and_keeps_the_admin_one_in_the_tab(
        browser: Any, live: Live) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.goto(live.base + "/ui/")
    pg.wait_for_selector("#login:not([hidden])")
    shot(pg, "login")
    for token, words in (("wrong-token-000000000", "Unknown token"),
                         (ALICE, "no admin right")):
        pg.fill("#token", token)
        pg.click("#login-form button")
        pg.wait_for_function(f"() => document.querySelector('#login-error').textContent"
                             f".includes({words!r})")
        assert pg.evaluate("() => sessionStorage.getItem('hivemind.token')") is None
    pg.fill("#token", OPS)
    pg.click("#login-form button")
    pg.wait_for_selector("[data-ns]")
    assert pg.evaluate("() => sessionStorage.getItem('hivemind.token')") == OPS
    assert pg.evaluate("() => document.cookie") == ""
    pg.reload()  # the same tab keeps it
    pg.wait_for_selector("[data-ns]")
    pg.click("#logout")
    pg.wait_for_selector("#login:not([hidden])")
    assert pg.evaluate("() => sessionStorage.getItem('hivemind.token')") is None
    ctx.close()


def test_namespaces_and_status_show_what_the_api_gives(page: Any, live: Live) -> None:
    st = api(live, "/v1/namespaces")
    [ns] = [n for n in st["namespaces"] if n["ns"] == NS]
    card = page.locator(f"[data-ns='{NS}']")
    assert card.locator("[data-fact='events']").inner_text() == str(ns["stream_length"])
    assert card.locator("[data-fact='dead letters']").inner_text() == str(ns["dead_letters"])
    assert card.locator("[data-fact='queries served']").inner_text() == \
        str(ns["queries_served"])
    assert ns["dead_letters"] >= 1 and ns["queries_served"] >= len(ASKS)
    shot(page, "namespaces")
    page.click(f"[data-ns='{NS}'] h2 a")
    # the status view's own heading: ``text=Dead letters`` also matches the list's "dead
    # letters" fact (case-insensitively), before the view is there
    page.wait_for_selector("h2:has-text('Dead letters (')")
    dead = api(live, f"/v1/ns/{NS}/dead?limit=50")
    assert dead["dead"][0]["reason"] in page.inner_text("#view")
    assert "Workers (" in page.inner_text("#view")  # (the heartbeat-based list itself: the API's)


def test_notes_filters_and_a_note_match_the_api(page: Any, live: Live) -> None:
    notes = api(live, f"/v1/ns/{NS}/notes")
    page.goto(f"{live.base}/ui/#/ns/{NS}/notes")
    page.wait_for_selector("#notes tbody tr")
    alive = [n for n in notes if not n["forgotten"]]
    assert page.locator("#notes tbody tr").count() == len(alive)
    # filter by tier and author with the keyboard: the form submits on Enter
    page.select_option("#f-tier", "longterm")
    page.select_option("#f-author", "ops")
    page.focus("#f-q")
    page.keyboard.press("Enter")
    want = sorted(n["note_id"] for n in alive if n["tier"] == "longterm" and n["agent"] == "ops")
    assert want
    page.wait_for_function(
        f"() => document.querySelectorAll('#notes tbody tr').length == {len(want)}")
    got = sorted(page.eval_on_selector_all("#notes tbody tr", "rs => rs.map(r => r.dataset.note)"))
    assert got == want
    shot(page, "notes")
    page.goto(f"{live.base}/ui/#/ns/{NS}/notes?forgotten=only")
    page.wait_for_function("() => document.querySelector('#notes-count').textContent"
                           f".startsWith('{sum(n['forgotten'] for n in notes)} of')")
    # the most used note: its uses and its curve
    top = max(notes, key=lambda n: (n["uses"], n["note_id"]))
    page.goto(f"{live.base}/ui/#/ns/{NS}/note/{top['note_id']}")
    page.wait_for_selector("svg.chart")
    rec = api(live, f"/v1/ns/{NS}/notes/{top['note_id']}/recency")
    text = page.inner_text("#view")
    assert f"Uses over time ({top['uses']})" in text
    assert page.inner_text("[data-fact='tier now']") == rec["tier"] == top["tier"]
    assert page.locator("svg.chart line.use").count() == len(rec["uses"]) == top["uses"]
    shot(page, "note")


def test_the_playground_explains_every_candidate_beside_the_seed(page: Any,
                                                                 live: Live) -> None:
    # a budget under the passage size (48 tokens): long notes are served as passages, so
    # only a budget a passage does not fit leaves candidates over the budget (45: shown,
    # packed out and over budget all occur)
    _, text, _ = ASKS[0]
    budget = 45
    page.goto(f"{live.base}/ui/#/ns/{NS}/query")
    page.fill("#q-text", text)
    page.fill("#q-budget", str(budget))
    page.fill("#q-asof", AS_OF_TEXT)
    page.press("#q-text", "Enter")
    page.wait_for_selector("#candidates tbody tr", timeout=30_000)
    qid = page.get_attribute("a:has-text('Open its audit entry')", "href").rsplit("/", 1)[1]
    e = api(live, f"/v1/ns/{NS}/audit/{qid}/explain")
    d = e["derived"]
    result = api(live, f"/v1/ns/{NS}/query",
                 {"text": text, "budget": budget, "as_of": AS_OF_TEXT, "explain": True}, "POST")
    ours = page.eval_on_selector_all("#ours li", "ls => ls.map(l => l.dataset.note)")
    assert ours == [n["note_id"] for n in result["notes"]]  # context order, as served
    assert page.eval_on_selector_all("#seed li", "ls => ls.map(l => l.dataset.note)") == \
        d["seed"]["notes"]
    rows = page.eval_on_selector_all(
        "#candidates tbody tr", "rs => rs.map(r => [r.dataset.note, r.dataset.outcome])")
    assert rows == [[n["note_id"], n["outcome"]] for n in d["notes"]]
    outcomes = {o for _, o in rows}
    assert {"shown", "packed_out", "over_budget"} <= outcomes
    assert {"private", "forgotten"} & outcomes
    # every candidate of the result is on the page, chosen ones as shown
    chosen = {c["note_id"]: c["chosen"] for c in result["candidates"]}
    page_outcome = dict(rows)
    for nid, was in chosen.items():
        assert (page_outcome[nid] == "shown") == was
    assert page.locator("#reproduces.ok").count() == 1
    page.select_option("#outcome-filter", "left")
    assert page.locator("#candidates tbody tr[data-outcome='shown']").count() == 0
    page.select_option("#outcome-filter", "")
    shot(page, "playground")


def test_an_audit_entry_shows_what_was_served_and_reproduces(page: Any, live: Live) -> None:
    agent = ASKS[4][0]
    page.goto(f"{live.base}/ui/#/ns/{NS}/audit")
    page.wait_for_selector("table.audit tbody tr")
    audit = api(live, f"/v1/ns/{NS}/audit?limit=1000")
    theirs = [x["event"]["query_id"] for x in reversed(audit) if x["event"]["agent"] == agent]
    page.select_option("#agent-filter", agent)
    page.wait_for_function("() => location.hash.includes('agent=')")
    # the unfiltered rows stay until the filtered view replaces them: wait for that view
    rows = "[...document.querySelectorAll('table.audit tbody tr')].map(r => r.dataset.query)"
    page.wait_for_function(f"(want) => JSON.stringify({rows}) === JSON.stringify(want) || "
                           f"Date.now() > {time.time() * 1000 + 10_000:.0f}", arg=theirs)
    listed = page.evaluate(f"() => {rows}")
    assert listed == theirs  # (after 10 s the wait gives up, and this shows the difference)
    shot(page, "audit")
    qid = listed[-1]  # the demo's query (the oldest of theirs)
    page.click(f"tr[data-query='{qid}'] a")
    page.wait_for_selector("#candidates")
    served = next(x["event"] for x in audit if x["event"]["query_id"] == qid)
    ours = page.eval_on_selector_all("#ours li", "ls => ls.map(l => l.dataset.note)")
    assert ours == [nid for nid, _ in served["chosen"]]
    page.click("#reproduce")
    page.wait_for_selector("#reproduction .verdict")
    assert "Identical" in page.inner_text("#reproduction")
    rep = api(live, f"/v1/ns/{NS}/audit/reproduce", {"query_ids": [qid]}, "POST")
    assert rep["ok"] and rep["reproductions"][0]["identical"]
    shot(page, "audit-entry")
    # why not this note: another agent's private note that matched
    e = api(live, f"/v1/ns/{NS}/audit/{qid}/explain")
    private = next(n for n in e["derived"]["notes"] if n["outcome"] == "private")
    page.fill("#why-note", private["note_id"])
    page.press("#why-note", "Enter")
    page.wait_for_selector("#note-verdict")
    assert f"{private['note_id']}: private" in page.inner_text("#note-verdict")
    assert f"private to {private['author']}" in page.inner_text("#note-verdict")


def test_curves_match_the_api(page: Any, live: Live) -> None:
    c = api(live, f"/v1/ns/{NS}/curves")
    page.goto(f"{live.base}/ui/#/ns/{NS}/curves")
    page.wait_for_selector("#curve-table")
    cells = page.eval_on_selector_all(
        "#curve-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    by_age = {int(r[0]): r for r in cells}
    i = c["ages"].index(180)
    assert by_age[180][1] == f"{c['tiers']['short'][i]:.4f}"
    assert by_age[180][3] == "1.0000"
    assert c["source"] == "worker"  # the demo's queries name their config
    assert page.locator("svg.chart polyline").count() == 4
    shot(page, "curves")


def test_a_phone_sized_window_scrolls_only_down(browser: Any, live: Live) -> None:
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                              has_touch=True)
    pg = ctx.new_page()
    login(pg, live, OPS)
    qid = api(live, f"/v1/ns/{NS}/audit?limit=1")[0]["event"]["query_id"]
    for view in ("", f"ns/{NS}/notes", f"ns/{NS}/audit/{qid}", f"ns/{NS}/curves"):
        pg.goto(f"{live.base}/ui/#/{view}")
        pg.wait_for_selector("#view h1")
        width = pg.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"{view or 'namespaces'}: the page is {width}px wide"
    pg.goto(f"{live.base}/ui/#/ns/{NS}/audit/{qid}")
    pg.wait_for_selector("#candidates")
    shot(pg, "phone")
    ctx.close()


def test_keyboard_alone_reaches_every_view(browser: Any, live: Live) -> None:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.goto(live.base + "/ui/")
    pg.wait_for_selector("#login:not([hidden])")
    assert pg.evaluate("() => document.activeElement.id") == "token"
    pg.keyboard.type(OPS)
    pg.keyboard.press("Enter")
    pg.wait_for_selector("[data-ns]")

    def tab_to(text: str, key: str = "Tab") -> None:
        for _ in range(60):
            pg.keyboard.press(key)
            if pg.evaluate("() => document.activeElement.textContent.trim()") == text:
                return
        raise AssertionError(f"Tab never reached {text!r}")

    tab_to(NS)
    pg.keyboard.press("Enter")
    pg.wait_for_selector("h2:has-text('Dead letters (')")  # the status view (see above)
    for label, marker in (("Notes", "#notes"), ("Audit", "table.audit"),
                          ("Curves", "#curve-table"), ("Playground", "#q-text")):
        tab_to(label, "Shift+Tab")  # from the view's heading back up to the views
        pg.keyboard.press("Enter")
        pg.wait_for_selector(marker)
        # focus moves to the view's heading, so the next Tab starts at the top
        assert pg.evaluate("() => document.activeElement.tagName") == "H1"
    # the playground answers from the keyboard too
    pg.focus("#q-text")
    pg.keyboard.type(ASKS[2][1])
    pg.keyboard.press("Enter")
    pg.wait_for_selector("#candidates tbody tr", timeout=30_000)
    ctx.close()


def test_the_page_ships_its_own_files_only(live: Live) -> None:
    import urllib.request

    with urllib.request.urlopen(live.base + "/ui/") as resp:
        html = resp.read().decode()
        csp = resp.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "http" not in html.replace(live.base, "")  # no CDN, no external link
    with urllib.request.urlopen(live.base + "/ui/app.js") as resp:
        js = resp.read().decode()
    assert "http://" not in js.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in js
    status, _ = call(live.base, "GET", "/ui/../pyproject.toml")
    assert status == 404


def test_a_note_shows_its_metadata_and_expiry(page: Any, live: Live) -> None:
    from hivemind_memory.events.codec import parse_json_event

    ev = parse_json_event(json.dumps({
        "type": "note.created", "event_id": "ui-meta", "ns": NS, "note_id": "ui-meta",
        "agent": "ops", "at": "2026-05-01T09:00:00Z", "text": "a note with labels",
        "metadata": {"team": "infra", "prio": 2}, "expires_at": "2027-01-02T00:00:00Z"}))
    live.served.client.append([ev])
    assert live.served.client.wait_projected(NS, 30)
    page.goto(f"{live.base}/ui/#/ns/{NS}/note/ui-meta")
    page.wait_for_selector("[data-fact='metadata']")
    assert page.inner_text("[data-fact='metadata']") == 'team="infra", prio=2'
    assert page.inner_text("[data-fact='expires']") == "2027-01-02 00:00:00 UTC"


def test_a_packed_item_shows_what_it_stands_for_and_its_passage(page: Any, live: Live) -> None:
    """Two near-identical notes are packed once and the one shown names the other; a long
    note's passage (passages on for that query) shows its place: in the audit entry's packed
    list and its context, the same as the explanation's JSON (issue 35)."""
    from hivemind_memory.events.codec import parse_json_event
    from tests.unit.projections.ranking.test_passages import QUESTION

    twin = "The ui billing cron runs at 02:00 UTC on the primary replica"
    notes = [(f"ui-twin-{i}", twin + "." * i) for i in range(2)]
    live.served.client.append([parse_json_event(json.dumps({
        "type": "note.created", "event_id": nid, "ns": NS, "note_id": nid, "agent": "ops",
        "at": "2026-06-02T09:00:00Z", "text": text})) for nid, text in notes])
    assert live.served.client.wait_projected(NS, 30)
    for text, config in (("ui billing cron primary replica", {}),
                         (QUESTION, {"passage_tokens": 128})):
        res = api(live, f"/v1/ns/{NS}/query",
                  {"text": text, "budget": 500, **({"config": config} if config else {})},
                  "POST")
        e = api(live, f"/v1/ns/{NS}/audit/{res['query_id']}/explain")
        shown = [n for n in e["derived"]["notes"] if n["outcome"] == "shown"]
        page.goto(f"{live.base}/ui/#/ns/{NS}/audit/{res['query_id']}")
        page.wait_for_function(  # this entry's view (the one before may still be up)
            "(want) => JSON.stringify([...document.querySelectorAll('#ours li')]"
            ".map(l => l.dataset.note)) === JSON.stringify(want)",
            arg=[n["note_id"] for n in shown], timeout=30_000)
        for where in ("#ours li", "#context details"):
            got = page.eval_on_selector_all(where, """ls => ls.map(l => [l.dataset.note,
                [...l.querySelectorAll('.stands-for a')].map(a => a.textContent),
                [...l.querySelectorAll('.updates a')].map(a => a.textContent),
                (l.querySelector('.badge.passage') || {dataset: {}}).dataset.passage || null])""")
            assert got == [[n["note_id"], n["stands_for"], n["updates"],
                            f"{n['passage']['index']}/{n['passage']['count']}"
                            if n["passage"] else None] for n in shown]
        if not config:
            [one] = [n for n in shown if n["note_id"].startswith("ui-twin-")]
            assert len(one["stands_for"]) == 1 and one["stands_for"][0].startswith("ui-twin-")
            li = f"#ours li[data-note='{one['note_id']}']"
            assert "stands for ui-twin-" in page.inner_text(li)
        else:
            parts = [n for n in shown if n["passage"]]  # the demo's long notes, cut
            assert parts
            p = parts[0]["passage"]
            assert (f"passage {p['index'] + 1} of {p['count']}, characters {p['start']}–{p['end']}"
                    in page.inner_text(f"#ours li[data-note='{parts[0]['note_id']}']"))

