"""Erasure through the front door: ``DELETE /v1/ns/{ns}/notes/{note_id}`` needs the token's
``admin`` right (403 otherwise, 404 for an unknown note) and answers what was erased once
it is redacted; ``POST .../events`` refuses a ``note.erased``; ``Memory.erase`` over HTTP
and over a store URL (the operator's, ``admin=True``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivemind_memory import Memory
from hivemind_memory.events.errors import AccessDenied, NotAllowed, UnknownNote
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import read_notes
from tests.support.frontdoor import ALICE, BOB, OPS, call, start_live

NS = "/v1/ns/team-a"
SECRET = "the staging password is plum-otter-7731"


def test_delete_erases_a_note_for_an_admin_only(tmp_path: Path) -> None:
    live = start_live(f"memory://{tmp_path / 'store'}")
    try:
        st, body = call(live.base, "POST", f"{NS}/remember", {"text": SECRET}, token=ALICE)
        assert st == 200
        nid = body["note_id"]
        st, body = call(live.base, "DELETE", f"{NS}/notes/{nid}", token=ALICE)
        assert st == 403 and "admin" in body["error"]["message"]  # even its author
        st, body = call(live.base, "DELETE", f"{NS}/notes/never-was", token=OPS)
        assert st == 404 and body["error"]["code"] == "unknown_note"
        st, body = call(live.base, "DELETE", f"{NS}/notes/bad%20id", token=OPS)
        assert st == 404 and "must match" in body["error"]["message"]
        st, body = call(live.base, "POST", f"{NS}/events",
                        [{"type": "note.erased", "note_id": nid}], token=OPS)
        assert st == 422 and "DELETE" in body["error"]["message"]
        st, body = call(live.base, "DELETE", f"{NS}/notes/{nid}", token=OPS)
        assert st == 200, body
        assert body["note_id"] == nid and body["event_id"].startswith("erase-")
        assert body["redacted_in_all"]["log_entries"] == 1  # by this call or the job first
        store = live.served.client.store
        assert read_notes(store, "team-a")[nid].erased
        log = b"".join(v for _, f in store.xrange(keys.stream("team-a")) for v in f.values())
        assert b"plum-otter" not in log
        st, again = call(live.base, "DELETE", f"{NS}/notes/{nid}", token=OPS)
        assert st == 200 and again["event_id"] is None  # erased before: redaction only
        assert again["redacted"]["log_entries"] == 0
        assert again["redacted_in_all"] == body["redacted_in_all"]
        st, body = call(live.base, "POST", f"{NS}/used", {"note_ids": [nid]}, token=BOB)
        assert st == 404 and body["error"]["code"] == "unknown_note"
    finally:
        live.stop()


@pytest.mark.parametrize("over", ["http", "store"])
def test_memory_erase(over: str, tmp_path: Path) -> None:
    url = f"memory://{tmp_path / 'store'}"
    srv = None
    if over == "http":
        srv = start_live(url)
        alice = Memory(srv.base, ns="team-a", token=ALICE)
        ops = Memory(srv.base, ns="team-a", token=OPS)
    else:
        alice = Memory(url, ns="team-a", agent="alice")
        ops = Memory.over_client(alice._t.client, ns="team-a", agent="ops",  # type: ignore[attr-defined]
                                 admin=True, on_write=alice._t.on_write)  # type: ignore[attr-defined]
    try:
        nid = alice.remember(SECRET)
        with pytest.raises(AccessDenied if over == "http" else NotAllowed):
            alice.erase(nid)
        with pytest.raises(UnknownNote):
            ops.erase("never-was")
        got = ops.erase(nid)
        # the log entry is rewritten once: by this call, or first by the redaction job the
        # projector queues when it folds the erasure (then this call finds it done);
        # redacted_in_all counts it either way (``test_erasure_contract`` runs both orders)
        assert got["note_id"] == nid and got["redacted_in_all"] == {
            "log_entries": 1, "dead_letters": 0, "audit_entries": 0, "query_embeddings": 0}
        assert got["redacted"]["log_entries"] in (0, 1)
        log_file = tmp_path / "store" / "streams.log"
        assert log_file.exists() and b"plum-otter" not in log_file.read_bytes()
        assert alice.get(nid) is None
        assert all(n.note_id != nid for n in alice.recall("staging password").notes)
    finally:
        alice.close()
        ops.close()
        if srv is not None:
            srv.stop()
