"""An ``event_id`` already in the log, sent again: the same content is an idempotent retry,
other content is refused (``EventIdConflict``, nothing appended), whether the first is still
in the unprojected tail or already folded (its keyed digest in ``event_digests``)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.events.errors import EventIdConflict, WriteRefused
from hivemind_memory.projections.store import eventdigest, keys, readmodel
from tests.support.factories import T0, created


def _client(store: Any) -> Client:
    return Client(store, settings=Settings(redis_url="redis://unused"))  # no worker


def _project(c: Client) -> None:
    while readmodel.project_batch(c.store, "t") is not None:
        pass
    assert readmodel.write_view(c.store, "t", [], []).tail == \
        c.store.get(keys.checkpoint("t")).decode()


@pytest.mark.parametrize("projected", [False, True], ids=["in-tail", "projected"])
def test_same_content_is_a_retry_other_content_a_conflict(store: Any, projected: bool) -> None:
    c = _client(store)
    first = created("n1", eid="e1", text="deploys happen on tuesday")
    assert c.append_checked([first]).appended == 1
    if projected:
        _project(c)
        assert store.hexists(keys.event_digests("t"), "e1")
    else:
        assert store.get(keys.checkpoint("t")) is None
    again = c.append_checked([dict(first)])
    assert (again.appended, again.already) == (0, 1)
    # at is not compared: a retry whose at the server filled again is still a retry
    later = c.append_checked([{**first, "at": (T0 + timedelta(minutes=5)).isoformat()}])
    assert (later.appended, later.already) == (0, 1)
    n = store.xlen(keys.stream("t"))
    for other in ({**first, "text": "deploys happen on friday"},
                  {**first, "agent": "mallory"},  # another agent reusing the id
                  {**first, "note_id": "n2"},
                  {**first, "scope": "private"}):
        with pytest.raises(EventIdConflict) as exc:
            c.append_checked([other])
        assert exc.value.event_id == "e1" and "'e1'" in str(exc.value)
        assert exc.value.status == 409 and exc.value.code == "event_id_conflict"
        assert isinstance(exc.value, WriteRefused)
    assert store.xlen(keys.stream("t")) == n == 1  # nothing appended


def test_a_conflict_refuses_the_whole_write_and_names_its_place(store: Any) -> None:
    c = _client(store)
    c.append_checked([created("n1", eid="e1", text="alpha")])
    with pytest.raises(EventIdConflict) as exc:
        c.append_checked([created("n3", eid="e3", text="fresh"),
                          created("n1", eid="e1", text="beta")])
    assert exc.value.index == 1 and exc.value.message.startswith("events[1]")
    assert store.xlen(keys.stream("t")) == 1  # the good one is not appended either


def test_one_write_reusing_an_id_with_other_content_is_refused(store: Any) -> None:
    c = _client(store)
    with pytest.raises(EventIdConflict):
        c.append_checked([created("n1", eid="e1", text="alpha"),
                          created("n1", eid="e1", text="beta")])
    assert c.append_checked([created("n1", eid="e1", text="alpha"),
                             created("n1", eid="e1", text="alpha")]).appended == 1


def test_the_digest_is_keyed_not_a_plain_hash(store: Any) -> None:
    c = _client(store)
    ev = created("n1", eid="e1", text="pin 1234")
    c.append_checked([ev])
    _project(c)
    got = store.hget(keys.event_digests("t"), "e1")
    canon = eventdigest.canonical(parse_json_event(json.dumps(ev)))
    assert b"1234" not in got
    assert got != hashlib.sha256(canon).hexdigest().encode()
    assert got == eventdigest.digest(eventdigest.store_key(store), parse_json_event(json.dumps(ev)))


def test_after_an_erasure_the_original_event_resent_is_refused(store: Any) -> None:
    c = _client(store)
    ev = created("n1", eid="e1", text="the door code is 4711")
    c.append_checked([ev])
    _project(c)
    before = store.hget(keys.event_digests("t"), "e1")
    c.erase("t", ["n1"], catch_up=lambda ns, target, timeout: _project(c))
    assert store.hget(keys.event_digests("t"), "e1") == eventdigest.ERASED != before
    n = store.xlen(keys.stream("t"))
    with pytest.raises(EventIdConflict):
        c.append_checked([ev])
    assert store.xlen(keys.stream("t")) == n


# -- hivemind ingest checks event ids like the other doors ------------------------------------
def _ingest(store: Any, tmp_path: Any, lines: list[dict[str, Any]], **kw: Any) -> Any:
    from hivemind_memory.projections.store.ingest import ingest

    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    errors: list[str] = []
    rep = ingest(store, str(path), on_error=errors.append, **kw)
    return rep, errors


@pytest.mark.parametrize("projected", [False, True], ids=["in-tail", "projected"])
@pytest.mark.parametrize("skip_invalid", [False, True], ids=["all-or-nothing", "skip-invalid"])
def test_ingest_refuses_a_resent_id_with_other_content_and_keeps_the_good(
        store: Any, tmp_path: Any, projected: bool, skip_invalid: bool) -> None:
    c = _client(store)
    c.append_checked([created("n1", eid="e1", text="deploys happen on tuesday")])
    if projected:
        _project(c)
        assert store.hexists(keys.event_digests("t"), "e1")
    rep, errors = _ingest(store, tmp_path, [
        created("n1", eid="e1", text="deploys happen on tuesday",
                at=T0 + timedelta(days=1)),  # a retry (at is not compared): passes, applied once
        created("n1", eid="e1", text="deploys happen on friday"),  # the conflict
        created("n2", eid="e2", text="fresh and good"),
        created("n3", eid="e3", text="also in the file"),
        created("n4", eid="e3", text="the same id again, other content"),  # within the file
    ], skip_invalid=skip_invalid)
    assert rep.conflicts == ["e1", "e3"] and rep.rejected == 2
    assert len(errors) == 2 and "event_id_conflict" in errors[0] and "'e1'" in errors[0]
    assert "line 2" in errors[0] and "line 5" in errors[1] and "'e3'" in errors[1]
    texts = [getattr(ev, "text", None) for _, ev, _raw
             in readmodel.decode_entries(store.xrange(keys.stream("t")), "t")]
    assert texts == ["deploys happen on tuesday", "deploys happen on tuesday",
                     "fresh and good", "also in the file"]  # nothing of the conflicts
    assert rep.appended == 3


def test_ingest_of_its_own_output_again_is_a_retry_not_a_conflict(store: Any,
                                                                  tmp_path: Any) -> None:
    lines = [created(f"n{i}", eid=f"e{i}", text=f"note {i}") for i in range(5)]
    rep, errors = _ingest(store, tmp_path, lines)
    assert (rep.appended, rep.rejected, errors) == (5, 0, [])
    _project(_client(store))
    rep, errors = _ingest(store, tmp_path, lines)
    assert (rep.appended, rep.rejected, errors, rep.conflicts) == (5, 0, [], [])


@pytest.mark.parametrize("verify", [False, True], ids=["replay", "replay-verify"])
def test_replay_files_the_digests_of_events_projected_before_they_were_kept(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        verify: bool) -> None:
    import uuid

    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.worker.cli.main import main
    from hivemind_memory.worker.ops import logs

    monkeypatch.setattr(logs, "configure", lambda **_: None)
    url = f"memory://{tmp_path / ('store-' + uuid.uuid4().hex[:8])}"
    store = connect(url)
    c = _client(store)
    c.append_checked([created("n1", eid="e1", text="the door code is 4711"),
                      created("n2", eid="e2", text="second note")])
    _project(c)
    c.append_checked([created("n3", eid="e3", text="in the tail still")])
    # a store projected before the digests were kept: none filed, an erasure's mark stays
    store.delete(keys.event_digests("t"))
    store.hset(keys.event_digests("t"), "e2", eventdigest.ERASED)
    changed = {**created("n1", eid="e1", text="the door code is 0000")}
    assert c.append_checked([changed]).already == 1  # old code: taken for a retry
    n = store.xlen(keys.stream("t"))
    code = main(["replay", "--ns", "t", *(["--verify"] if verify else []),
                 "--redis-url", url])
    capsys.readouterr()
    assert code == 0
    with pytest.raises(EventIdConflict):
        c.append_checked([changed])
    assert store.xlen(keys.stream("t")) == n  # nothing appended
    assert store.hget(keys.event_digests("t"), "e2") == eventdigest.ERASED  # kept
    assert c.append_checked([created("n1", eid="e1", text="the door code is 4711")]
                            ).already == 1  # the same content is still a retry
    assert c.append_checked([created("n3", eid="e3", text="in the tail still")]).already == 1
