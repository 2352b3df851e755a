"""Poison and bad input: whatever a rogue writer puts on a stream is dead-lettered
with a reason and never stalls its namespace; every date is range-checked before it is
converted; ids and namespaces are matched whole; ``Client.append`` validates as ``ingest``.

Reproductions: an entry with no ``d`` field and a non-UTF-8 field name, or a msgpack event
whose ``at`` overflows, made every projection job fail (``worker --burst`` exit 1, queries
``internal``, ``replay`` exit 1); an event whose ``ns`` differed from its stream's was
projected into the stream's namespace; ``"at":"9999-12-31T23:00:00-05:00"`` crashed ingest
(and lost the good lines after it under ``--skip-invalid``), batch and ``--as-of``;
``"event_id":"u9\\n"`` counted as a second use; ``Client.append`` appended
``ns="Bad NS!"``; ``replay`` dropped dead letters; ``hivemind dead`` stopped at 1,000 silently.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fakeredis
import msgspec
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.codec import encode_event, parse_json_event
from hivemind_memory.events.errors import EventError
from hivemind_memory.events.schema import NoteCreated, NoteUsed
from hivemind_memory.projections.reduce import Undecodable
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.log import FIELD, append, tail
from hivemind_memory.projections.store.readmodel import (
    checkpoint,
    decode_entry,
    project_batch,
    read_dead,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import fold_log, write_back
from tests.support import HIVEMIND, RedisProc
from tests.support.beats import wait_for_workers
from tests.support.factories import created, ev, jsonl, used

LATE = "9999-12-31T23:00:00-05:00"
EARLY = "0001-01-01T00:00:00+05:00"


def _poison() -> list[tuple[str, dict[bytes, bytes]]]:
    """(name, fields) of every entry shape a rogue writer can XADD to the stream of ``t``."""
    good = {"type": "note.used", "event_id": "px", "ns": "t", "note_id": "n1", "agent": "a",
            "at": "2026-01-02T00:00:00Z"}
    mp = msgspec.msgpack.encode
    return [
        ("no d, non-UTF-8 field name", {b"\xff\xfe": b"\x80", b"x": b"y"}),
        ("no d", {b"data": b"hello"}),
        ("not msgpack", {FIELD: b"\xc1\xc1\xc1"}),
        ("empty d", {FIELD: b""}),
        ("msgpack, not a map", {FIELD: mp([1, 2, 3])}),
        ("unknown type", {FIELD: mp({**good, "type": "note.exploded"})}),
        ("missing field", {FIELD: mp({k: v for k, v in good.items() if k != "agent"})}),
        ("unknown field", {FIELD: mp({**good, "extra": 1})}),
        ("at overflows (late)", {FIELD: mp({**good, "event_id": "p1", "at": LATE})}),
        ("at overflows (early)", {FIELD: mp({**good, "event_id": "p2", "at": EARLY})}),
        ("at without timezone", {FIELD: mp({**good, "event_id": "p3",
                                            "at": "2026-01-02T00:00:00"})}),
        ("id with a trailing newline", {FIELD: mp({**good, "event_id": "u9\n"})}),
        ("ns with a trailing newline", {FIELD: mp({**good, "event_id": "p4", "ns": "t\n"})}),
        ("another namespace's event", {FIELD: mp({**good, "event_id": "p5", "ns": "other"})}),
        ("negative tokens", {FIELD: mp({"type": "note.created", "event_id": "p6", "ns": "t",
                                        "note_id": "n9", "agent": "a",
                                        "at": "2026-01-02T00:00:00Z", "text": "x",
                                        "tokens": -4})}),
        ("non-UTF-8 text", {FIELD: b"\x87\xa4type\xacnote.created\xa8event_id\xa2p7\xa2ns\xa1t"
                                   b"\xa7note_id\xa2n8\xa5agent\xa1a\xa2at\xb42026-01-02T00:00:00Z"
                                   b"\xa4text\xa2\xff\xfe"}),
        ("huge nesting", {FIELD: b"\x91" * 5000 + b"\xc0"}),
    ]


def _seed(r: Any) -> tuple[int, int]:
    """Good events around every poison shape; returns (poison count, good count)."""
    before = [ev(created("n1", text="alpha beta"))]
    after = [ev(used("n1", f"g{i}")) for i in range(3)] + [ev(created("n2", text="alpha"))]
    append(r, before)
    shapes = _poison()
    for _name, fields in shapes:
        r.xadd(keys.stream("t"), fields)  # type: ignore[arg-type]
    append(r, after)
    return len(shapes), len(before) + len(after)


def test_every_poison_shape_is_dead_lettered_and_the_namespace_moves_on(store: Any) -> None:
    n_poison, _n_good = _seed(store)
    while project_batch(store, "t", 4) is not None:
        pass
    assert checkpoint(store, "t") == tail(store, "t")
    notes = read_notes(store, "t")
    assert set(notes) == {"n1", "n2"} and notes["n1"].uses == 3  # nothing else counted
    assert "other" not in notes and read_notes(store, "other") == {}
    dead = read_dead(store, "t")
    assert len(dead) == n_poison
    for (name, _), d in zip(_poison(), dead, strict=True):
        assert d.reason.startswith(("undecodable: ", "wrong_namespace: ")), (name, d)
    assert any("wrong_namespace" in d.reason for d in dead)
    assert any("out of range" in d.reason for d in dead)
    # the pure fold agrees, and replay keeps the dead letters (written once)
    rb = fold_log(store, "t")
    assert rb.projection.notes == notes and len(rb.projection.dead) == n_poison
    assert write_back(store, "t", rb, now_ms=1)
    assert len(read_dead(store, "t")) == n_poison


def test_replay_before_the_projector_keeps_the_dead_letters_it_finds(store: Any) -> None:
    """Reproduction: 4 dead letters recorded before replay, 0 after (replay had moved the
    checkpoint past entries whose dead letters it never wrote)."""
    evs = [created("n1"), used("ghost", "u1"), used("ghost", "u2"), created("n1", eid="c2"),
           used("n1", "u3")]
    append(store, [ev(d) for d in evs])
    project_batch(store, "t", 2)  # the live projector got as far as entry 2 (1 dead letter)
    assert len(read_dead(store, "t")) == 1
    assert write_back(store, "t", fold_log(store, "t"), now_ms=5)
    dead = read_dead(store, "t")
    assert [d.reason.split(":")[0] for d in dead] == ["note.used"] * 2 + ["note.created"]
    assert project_batch(store, "t", 10) is None  # caught up: nothing is recorded twice
    assert len(read_dead(store, "t")) == 3


# ---------------------------------------------------------------- bad inputs


BAD_EVENTS = {
    "at late": {**created("b1"), "at": LATE},
    "at early": {**created("b2"), "at": EARLY},
    "event_id newline": used("n1", "u9\n"),
    "ns newline": {**created("b3"), "ns": "priv\n"},
    "note_id newline": {**created("b4"), "note_id": "b4\n"},
    "agent newline": {**created("b5"), "agent": "a\n"},
    "negative tokens": {**created("b6"), "tokens": -1},
    "bad ns": {**created("b7"), "ns": "Bad NS!"},
}


@pytest.mark.parametrize("name", sorted(BAD_EVENTS))
def test_bad_events_are_clear_errors_everywhere(name: str) -> None:
    d = BAD_EVENTS[name]
    with pytest.raises(EventError, match=r"^line 7: invalid event"):
        parse_json_event(json.dumps(d), 7)
    r = fakeredis.FakeRedis()
    c = Client(r, settings=Settings(redis_url="memory://"))
    with pytest.raises(EventError):
        c.append([created("ok"), d])
    assert r.xlen(keys.stream("t")) == 0 and not r.exists(keys.NAMESPACES)  # nothing appended


def test_client_append_revalidates_structs() -> None:
    """Reproduction: structs built by hand skip msgspec's checks and were appended."""
    r = fakeredis.FakeRedis()
    c = Client(r, settings=Settings(redis_url="memory://"))
    at = datetime(2026, 1, 1, tzinfo=UTC)
    bad = [NoteCreated(event_id="e1", ns="Bad NS!", note_id="n", agent="a", at=at, text="x"),
           NoteCreated(event_id="e2", ns="t", note_id="n", agent="a", at=at, text="x",
                       tokens=-5),
           NoteUsed(event_id="u9\n", ns="t", note_id="n", agent="a", at=at)]
    for e in bad:
        with pytest.raises(EventError):
            c.append([e])
    assert r.keys("*") == []
    good = NoteCreated(event_id="e3", ns="t", note_id="n", agent="a", at=at, text="x")
    assert c.append([good]) == 1


def _run(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HIVEMIND, *args], input=stdin, capture_output=True, text=True,
                          env={**os.environ, "HIVEMIND_REDIS_URL": url}, timeout=120,
                          check=False)


@pytest.mark.redis_server
def test_cli_bad_dates_and_ids_never_trace_back(server: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # 5,000 notes of one shape ("note gN about redis"): no note's calibrated probability
    # clears the default floor (0.001), so the answers below would be empty by design; this
    # test is about bad input, so the processes it starts rank without the floor
    cfg = tmp_path / "no-floor.toml"
    cfg.write_text("[calibration]\nfloor = 0.0\n")
    monkeypatch.setenv("HIVEMIND_CONFIG", str(cfg))
    rows = [created(f"g{i}", eid=f"g{i}") for i in range(5000)]
    rows[2000] = {**rows[2000], "at": LATE}
    rows[2001] = {**rows[2001], "event_id": "u9\n"}
    f = tmp_path / "e.jsonl"
    f.write_text(jsonl(rows))
    out = _run(server, "ingest", str(f))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "line 2001" in out.stderr and "line 2002" in out.stderr and "nothing appended" in \
        out.stderr
    out = _run(server, "ingest", "--skip-invalid", str(f))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "appended 4998 event(s)" in out.stderr and "rejected 2" in out.stderr
    # a batch with a bad as_of: that line is an error, every other line is answered
    b = tmp_path / "q.jsonl"
    b.write_text('{"ns":"t","text":"redis","budget":50}\n'
                 f'{{"ns":"t","text":"redis","budget":50,"as_of":"{LATE}"}}\n'
                 '{"ns":"t\\n","text":"redis","budget":50}\n'
                 '{"ns":"t","text":"redis","budget":50,"agent":"a\\n"}\n'
                 f'{{"ns":"t","text":"redis","budget":50,"as_of":"{EARLY}"}}\n'
                 '{"ns":"t","text":"note","budget":50,"as_of":"2026-06-01T00:00:00+02:00"}\n')
    w = _run(server, "worker", "--burst")
    assert w.returncode == 0, w.stderr[-2000:]
    worker = subprocess.Popen([*HIVEMIND, "worker"], env={**os.environ,
                              "HIVEMIND_REDIS_URL": server},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_workers(redis.Redis.from_url(server))  # before: shard_unavailable at once
        out = _run(server, "batch", str(b))
        q1 = _run(server, "query", "redis", "--ns", "t", "--budget", "9", "--as-of", LATE)
        q2 = _run(server, "query", "redis", "--ns", "t\n", "--budget", "9")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(lines) == 6
    assert [("error" in x) for x in lines] == [False, True, True, True, True, False], lines
    assert "as_of" in lines[1]["error"]["message"] and "out of range" in \
        lines[1]["error"]["message"]
    assert lines[0]["notes"] and lines[5]["notes"]
    # a flag's value is checked by the one time parser of every command: a usage error (2)
    assert q1.returncode == 2 and "Traceback" not in q1.stderr, q1.stderr[-2000:]
    assert "out of range" in q1.stderr and q1.stderr.startswith("hivemind: argument --as-of")
    assert q2.returncode == 1 and "Traceback" not in q2.stderr, q2.stderr[-2000:]
    assert "invalid_request" in q2.stdout, q2.stdout
    rp = _run(server, "replay", "--ns", "t", "--as-of", EARLY)
    assert rp.returncode == 2 and "out of range" in rp.stderr and "Traceback" not in rp.stderr
    rp = _run(server, "notes", "--ns", "t\n")
    assert rp.returncode == 2 and "must match" in rp.stderr


@pytest.mark.redis_server
def test_cli_poison_then_worker_query_replay_and_dead(redis_server: RedisProc,
                                                      server: str) -> None:
    r = redis_server.client()
    n_poison, _ = _seed(r)
    w = _run(server, "worker", "--burst")
    assert w.returncode == 0, w.stderr[-2000:]
    assert checkpoint(r, "t") == tail(r, "t")
    worker = subprocess.Popen([*HIVEMIND, "worker"], env={**os.environ,
                              "HIVEMIND_REDIS_URL": server},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_workers(redis.Redis.from_url(server))  # before: shard_unavailable at once
        q = _run(server, "query", "alpha", "--ns", "t", "--budget", "100", "--json")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert q.returncode == 0, q.stdout + q.stderr
    assert {n["note_id"] for n in json.loads(q.stdout)["notes"]} == {"n1", "n2"}
    rp = _run(server, "replay", "--ns", "t")
    assert rp.returncode == 0 and f"{n_poison} dead letter(s)" in rp.stdout, rp.stderr
    assert _run(server, "replay", "--ns", "t", "--verify").returncode == 0
    d = _run(server, "dead", "--ns", "t", "--json", "--limit", "5")
    assert d.returncode == 0 and len(d.stdout.splitlines()) == 5
    assert f"5 of {n_poison} dead letter(s)" in d.stderr and "truncated" in d.stderr
    d = _run(server, "dead", "--ns", "t")
    assert d.stdout.splitlines()[-1] == f"dead: {n_poison} of {n_poison} dead letter(s) of t"
    r.close()


@pytest.mark.redis_server
def test_dead_says_the_total_past_1000(server: str, redis_server: RedisProc) -> None:
    r = redis_server.client()
    append(r, [ev(used("ghost", f"u{i}")) for i in range(1200)])
    while project_batch(r, "t", 2000) is not None:
        pass
    d = _run(server, "dead", "--ns", "t")
    assert d.returncode == 0
    assert len(d.stdout.splitlines()) == 1001  # 1000 shown + the summary
    assert "1000 of 1200 dead letter(s) of t (truncated: 200 more; use --limit 1200)" in d.stdout
    r.close()


# ---------------------------------------------------------------- fuzz (Hypothesis)

_bytes = st.binary(max_size=40)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
                    st.text(max_size=20),
                    st.binary(max_size=10),
                    st.sampled_from([LATE, EARLY, "2026-01-02T00:00:00Z", "t", "t\n",
                                     "note.created", "note.used", "note.forgotten"]))
_event_like = st.fixed_dictionaries(
    {}, optional={k: _scalar for k in ("type", "event_id", "ns", "note_id", "agent", "at",
                                       "text", "tokens", "scope", "kind", "embedding")})
_entry = st.one_of(
    st.dictionaries(_bytes, _bytes, min_size=1, max_size=3),
    _event_like.map(lambda d: {FIELD: msgspec.msgpack.encode(d)}),
    st.builds(lambda n, u: {FIELD: encode_event(ev(used(n, u)))},
              st.sampled_from(["n1", "n2"]), st.sampled_from(["f1", "f2", "f3"])),
)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(_entry, max_size=12), batch=st.integers(1, 5))
def test_fuzz_raw_stream_entries_never_stall_a_namespace(entries: list[dict[bytes, bytes]],
                                                         batch: int) -> None:
    r = fakeredis.FakeRedis()
    append(r, [ev(created("n1"))])
    for fields in entries:
        r.xadd(keys.stream("t"), fields)  # type: ignore[arg-type]
    append(r, [ev(created("n3"))])
    while project_batch(r, "t", batch) is not None:
        pass
    assert checkpoint(r, "t") == tail(r, "t")
    notes = read_notes(r, "t")
    assert {"n1", "n3"} <= set(notes)
    rb = fold_log(r, "t")
    assert rb.projection.notes == notes
    assert rb.events == len(entries) + 2
    # every entry this version cannot read is a dead letter, once; so is every other reject
    dead_ids = [d.entry_id for d in rb.projection.dead]
    assert len(dead_ids) == len(set(dead_ids))
    unreadable = {eid.decode() for eid, f in r.xrange(keys.stream("t"))
                  if isinstance(decode_entry(f, "t")[0], Undecodable)}
    assert unreadable <= set(dead_ids)
    assert [d.entry for d in read_dead(r, "t")] == dead_ids


_line = st.one_of(
    st.text(max_size=60),
    st.binary(max_size=60),
    _event_like.map(lambda d: json.dumps(d, default=str)),
    st.builds(lambda d, at: json.dumps({**d, "at": at}),
              st.sampled_from([created("x"), used("x", "u")]),
              st.one_of(st.sampled_from([LATE, EARLY]), st.datetimes(
                  timezones=st.timezones()).map(lambda t: t.isoformat()))),
)


@settings(max_examples=300, deadline=None)
@given(line=_line)
def test_fuzz_ingest_lines_give_an_event_in_utc_or_an_event_error(line: str | bytes) -> None:
    try:
        got = parse_json_event(line, 3)
    except EventError as exc:
        assert str(exc).startswith("line 3: ")
        return
    assert got.at.tzinfo is UTC
    assert got.at.utcoffset() is not None
    assert isinstance(encode_event(got), bytes)
    # what ingest accepts, the projector reads back unchanged
    from hivemind_memory.events.codec import decode_event

    assert decode_event(encode_event(got)) == got


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.one_of(_line, st.builds(lambda i: json.dumps(created(f"ok{i}")),
                                                 st.integers(0, 50))), max_size=15))
def test_fuzz_ingest_files_append_every_good_line_and_count_every_bad_one(
        tmp_path_factory: pytest.TempPathFactory, lines: list[str | bytes]) -> None:
    data = b"".join((x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass"))
                    + b"\n" for x in lines)
    path = tmp_path_factory.mktemp("fuzz") / "e.jsonl"
    path.write_bytes(data)
    nonblank = [x for x in data.split(b"\n") if x.strip()]
    good = 0
    for x in nonblank:
        try:
            parse_json_event(x)
            good += 1
        except EventError:
            pass
    r = fakeredis.FakeRedis()
    errors: list[str] = []
    rep = ingest(r, str(path), skip_invalid=True, on_error=errors.append)
    assert rep.appended == good and rep.rejected == len(nonblank) - good == len(errors)
    assert sum(r.xlen(keys.stream(ns)) for ns in rep.namespaces) == good
    assert all(e.startswith("line ") for e in errors)
