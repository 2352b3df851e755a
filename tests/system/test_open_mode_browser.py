"""Open mode against a real browser (Debian's headless Chromium, driven by Playwright): a page
on another origin that posts a form or a ``no-cors`` fetch to ``serve`` without tokens writes
and forgets nothing, and a page reaching the server under a foreign name (DNS rebinding:
``--host-resolver-rules`` maps ``rebind.test`` to 127.0.0.1) reads nothing."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hivemind_memory.projections.store import keys
from tests.support.frontdoor import Live, call, created, start_live
from tests.system.test_ui import CHROMIUM, _need_browser

pytestmark = pytest.mark.slow

NS = "n"


@pytest.fixture
def open_srv(tmp_path: Path) -> Iterator[Live]:
    srv = start_live(f"memory://{tmp_path / 'open'}", tokens=None)
    try:
        assert call(srv.base, "POST", f"/v1/ns/{NS}/events", [
            created("v1", "victim", "the door code is 4711", agent="owner")])[0] == 200
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_playwright = _need_browser()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--host-resolver-rules=MAP rebind.test 127.0.0.1"])
        yield b
        b.close()


def _attack_page(base: str) -> str:
    plant = ('[{"type":"note.created","event_id":"form1","note_id":"form1",'
             '"agent":"mallory","text":"planted by a form')
    fetch_body = json.dumps([{"type": "note.created", "event_id": "fetch1",
                              "note_id": "fetch1", "agent": "mallory",
                              "text": "planted by fetch"}])
    forget_body = json.dumps({"note_id": "victim", "agent": "owner"})
    return f"""<!doctype html><iframe name="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink"
      action="{base}/v1/ns/{NS}/events"><input name='{plant}' value='"}}]'></form>
<script>
window.attack = async () => {{
  const sunk = new Promise(r => document.querySelector('iframe').onload = r);
  document.getElementById('f').submit();
  await sunk;
  const sent = [];
  for (const [path, body] of [["events", {json.dumps(fetch_body)}],
                              ["forget", {json.dumps(forget_body)}]]) {{
    try {{
      await fetch("{base}/v1/ns/{NS}/" + path, {{method: "POST", mode: "no-cors", body}});
      sent.push(path);
    }} catch (e) {{ sent.push(path + ": " + e); }}
  }}
  return sent;
}};
</script>"""


@contextlib.contextmanager
def _page_server(html: str) -> Iterator[str]:
    """Another origin on this machine (another port): a plain HTTP server of one page."""
    body = html.encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_foreign_page_writes_and_forgets_nothing(browser: Any, open_srv: Live) -> None:
    ctx = browser.new_context()
    pg = ctx.new_page()
    with _page_server(_attack_page(open_srv.base)) as url:
        pg.goto(url)
        assert len(pg.evaluate("() => window.attack()")) == 2
    ctx.close()
    store = open_srv.served.client.store
    assert store.xlen(keys.stream(NS)) == 1  # the victim's note, nothing else
    st, res = call(open_srv.base, "POST", f"/v1/ns/{NS}/query",
                   {"text": "door code", "budget": 50, "agent": "owner"})
    assert st == 200 and [n["note_id"] for n in res["notes"]] == ["victim"]


def test_a_rebound_name_reads_nothing(browser: Any, open_srv: Live) -> None:
    port = urlsplit(open_srv.base).port
    ctx = browser.new_context()
    pg = ctx.new_page()
    resp = pg.goto(f"http://rebind.test:{port}/v1/namespaces")
    assert resp is not None and resp.status == 421
    assert "door code" not in pg.content() and "victim" not in pg.content()
    got = pg.evaluate(f"""async () => {{
        const r = await fetch("/v1/ns/{NS}/query", {{method: "POST",
            headers: {{"Content-Type": "application/json"}},
            body: JSON.stringify({{text: "door code", budget: 50, agent: "owner"}})}});
        return [r.status, await r.text()];
    }}""")
    assert got[0] == 421 and "4711" not in got[1]
    ctx.close()


def test_the_explorer_shows_superseded_erased_and_forgotten_notes_as_such(
        browser: Any, open_srv: Live) -> None:
    """Open mode's explorer (no token to type): each note in no answer carries its state."""
    b = open_srv.base
    for nid in ("live1", "old1", "gone1", "forg1"):
        assert call(b, "POST", f"/v1/ns/{NS}/events",
                    [created(f"e-{nid}", nid, f"note {nid} about deploys", agent="a")])[0] == 200
    assert call(b, "POST", f"/v1/ns/{NS}/remember", {"text": "deploys, newer", "agent": "a",
                                                     "note_id": "new1",
                                                     "supersedes": ["old1"]})[0] == 200
    assert call(b, "POST", f"/v1/ns/{NS}/forget", {"note_id": "forg1", "agent": "a"})[0] == 200
    assert call(b, "DELETE", f"/v1/ns/{NS}/notes/gone1")[0] == 200
    st, rows = call(b, "GET", f"/v1/ns/{NS}/notes")
    assert st == 200
    by_id = {r["note_id"]: r for r in rows}
    assert by_id["gone1"]["erased"] and by_id["gone1"]["text"] == ""
    assert by_id["old1"]["superseded_by"] == "new1" and not by_id["live1"]["erased"]
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.goto(f"{b}/ui/#/ns/{NS}/notes?forgotten=with")
    pg.wait_for_selector("#notes tbody tr[data-note='gone1']")
    states = pg.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
        '#notes tbody tr')].map((tr) => [tr.dataset.note, [tr.dataset.state,
        (tr.querySelector('.badge') || {}).textContent || '']]))""")
    assert states == {"live1": ["live", ""], "new1": ["live", ""], "victim": ["live", ""],
                      "old1": ["superseded", "superseded by new1"],
                      "gone1": ["erased", "erased"], "forg1": ["forgotten", "forgotten"]}, states
    pg.goto(f"{b}/ui/#/ns/{NS}/note/old1")
    pg.wait_for_function("() => (document.querySelector('#view h1') || {}).textContent"
                         "?.includes('superseded by new1')")
    ctx.close()
