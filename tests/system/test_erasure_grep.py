"""The erasure grep test: after ``hivemind erase`` no byte hivemind wrote holds the erased
note's text or embedding. Every key of the store (``DUMP`` and its contents), Redis's AOF
after the documented compaction (``BGREWRITEAOF``) and an RDB (``BGSAVE``), the
``memory://PATH`` directory (fsck backups included) and an export are searched; the same
search before the erasure finds them (so the test can fail)."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import close_embedded, connect
from hivemind_memory.projections.store.logfile import BACKUP_PREFIX, LOG_NAME
from hivemind_memory.projections.store.rebuild import diff_notes, fold_log, live_snapshot
from hivemind_memory.worker import runtime
from hivemind_memory.worker.audit import archive
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.projector import ensure_projected
from tests.support import HIVEMIND, RedisProc
from tests.support.factories import T0, created, iso, used
from tests.support.keyscan import file_bytes, key_bytes

SECRET = "the vault passphrase is zebra-quartz-4471"
EMB = [0.7182818284590452, -0.3141592653589793, 0.5772156649015329]
"""Doubles whose bytes (msgpack, JSON text, little-endian float64/32) are greppable."""
TEXT_MARK = b"zebra-quartz"
"""In every version of the secret's text (created, revised, a duplicate), nowhere else."""


def _needles() -> dict[str, bytes]:
    out = {"text": TEXT_MARK}
    for i, x in enumerate(EMB):
        out[f"emb{i}:json"] = repr(x).encode()
        out[f"emb{i}:msgpack"] = b"\xcb" + struct.pack(">d", x)
        out[f"emb{i}:f64"] = struct.pack("<d", x)
        out[f"emb{i}:f32"] = struct.pack("<f", x)
    return out


def _log() -> list[dict[str, Any]]:
    return [
        created("s", text=SECRET, embedding=EMB),
        created("k", text="keep this zebra deploy note", embedding=[0.5, 0.25, 0.125]),
        used("s", "u1"),
        {"type": "note.revised", "event_id": "r1", "ns": "t", "note_id": "s", "agent": "a",
         "at": iso(T0 + timedelta(days=1)), "text": SECRET + " rotated to zebra-quartz-9",
         "embedding": EMB},
        created("s", eid="c-dup", text="again: " + SECRET),  # a dead letter with the text
    ]


def _write_and_query(r: Any, rq: Any) -> tuple[Client, runtime.Runtime]:
    """Notes, a projection, queries (result keys, audit entries, an index snapshot)."""
    s = Settings()
    rt = runtime.build(s, r, rq)
    runtime.install(rt)
    c = Client(r, rq, settings=s)
    c.append(_log())
    qids = [c.submit_query("t", "vault passphrase zebra", 500, agent="b", explain=True),
            c.submit_query("t", "vault passphrase zebra", 500, agent="b",
                           as_of=iso(T0 + timedelta(days=2)))]
    assert run_worker(rt, burst=True) == 0
    for q in qids:
        assert "s" in [n["note_id"] for n in c.result(q, timeout=10)["notes"]]
    assert r.exists(keys.index_snapshot("t"))
    return c, rt


def _export(r: Any) -> bytes:
    out = io.BytesIO()
    archive.export(r, "t", out, with_audit=True)
    return out.getvalue()


def _hits(sources: list[tuple[str, bytes]]) -> dict[str, list[str]]:
    """Needle name -> the sources holding it."""
    found: dict[str, list[str]] = {}
    for needle_name, needle in _needles().items():
        for where, data in sources:
            if needle in data:
                found.setdefault(needle_name, []).append(where)
    return found


def _info(r: redis.Redis, field: str) -> str:
    return str(r.info("persistence")[field])


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # waiting on redis-server's own background child, not on our work


def _compact_aof(r: redis.Redis, rp: RedisProc) -> None:
    """``BGREWRITEAOF`` (the documented compaction), then wait until the rewrite is done and
    the AOF directory holds only the files its manifest names (history files deleted)."""
    _wait(lambda: _info(r, "aof_rewrite_in_progress") == "0", "an earlier rewrite")
    r.bgrewriteaof()
    _wait(lambda: _info(r, "aof_rewrite_in_progress") == "0"
          and _info(r, "aof_rewrite_scheduled") == "0", "BGREWRITEAOF")
    assert _info(r, "aof_last_bgrewrite_status") == "ok"
    aof = rp.dir / "appendonlydir"

    def only_current() -> bool:
        manifest = next(aof.glob("*.manifest")).read_text()
        named = {line.split()[1] for line in manifest.splitlines() if line.strip()}
        return " type h" not in manifest and \
            {p.name for p in aof.iterdir() if not p.name.endswith(".manifest")} <= named

    _wait(only_current, "the AOF history files to be deleted")


def _bgsave(r: redis.Redis) -> None:
    # counted by ``rdb_saves``: LASTSAVE has a resolution of one second, so a save in the
    # second the server started (or saved before) would never be seen to finish
    before = int(_info(r, "rdb_saves"))
    r.bgsave()
    _wait(lambda: _info(r, "rdb_bgsave_in_progress") == "0"
          and int(_info(r, "rdb_saves")) > before, "BGSAVE")
    assert _info(r, "rdb_last_bgsave_status") == "ok"


@pytest.mark.redis_server
def test_no_byte_on_a_redis_server_holds_an_erased_note(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = redis_factory(appendonly=True)
    r = rp.client()
    # strings stored as written in the AOF and RDB, so a grep can see them at all
    r.config_set("aof-use-rdb-preamble", "no")
    r.config_set("rdbcompression", "no")
    c, rt = _write_and_query(r, r)
    _compact_aof(r, rp)
    sources = [*key_bytes(r), *file_bytes(rp.dir), ("export", _export(r))]
    found = _hits(sources)
    assert set(found) >= {"text", "emb0:json", "emb0:msgpack"}  # the search can fail
    assert any("appendonlydir" in w for w in found["text"])
    assert any(w == "export" for w in found["emb0:json"])

    env = {**os.environ, "HIVEMIND_REDIS_URL": rp.url}
    got = subprocess.run([*HIVEMIND, "erase", "--ns", "t", "s", "--json"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["erased"] == ["s"] and out["redacted"]["log_entries"] == 3
    assert out["redacted"]["dead_letters"] == 1 and out["redacted"]["results"] == 2
    assert out["redacted_in_all"] == {"log_entries": 3, "dead_letters": 1, "audit_entries": 0,
                                      "query_embeddings": 0}
    # a query after the erasure (the worker refreshes its index; the note is gone)
    after = c.submit_query("t", "vault passphrase zebra", 500, agent="b")
    assert run_worker(rt, burst=True) == 0
    assert "s" not in [n["note_id"] for n in c.result(after, timeout=10)["notes"]]
    _compact_aof(r, rp)
    _bgsave(r)
    assert (rp.dir / "dump.rdb").exists()
    sources = [*key_bytes(r), *file_bytes(rp.dir), ("export", _export(r))]
    assert _hits(sources) == {}
    cp, live = live_snapshot(r, "t")
    assert diff_notes(live, fold_log(r, "t", until=cp).projection.notes) == []
    verify = subprocess.run([*HIVEMIND, "replay", "--ns", "t", "--verify"], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    reproduce = subprocess.run([*HIVEMIND, "audit", "reproduce", "--ns", "t", "--all"],
                               env=env, capture_output=True, text=True, timeout=120,
                               check=False)
    assert reproduce.returncode == 0, reproduce.stdout + reproduce.stderr
    lines = reproduce.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["erased", "erased", "identical"]
    assert "2 erased" in reproduce.stderr and "0 different" in reproduce.stderr
    r.close()


def test_no_byte_of_a_memory_path_store_holds_an_erased_note(tmp_path: Path) -> None:
    d = tmp_path / "store"
    url = f"memory://{d}"
    r = connect(url)
    try:
        c, _ = _write_and_query(r, r)
        # a backup an earlier `fsck --repair` kept beside the log holds the text too
        shutil.copy(d / LOG_NAME, d / f"{BACKUP_PREFIX}1")
        sources = [*key_bytes(r), *file_bytes(d), ("export", _export(r))]
        found = _hits(sources)
        assert set(found) >= {"text", "emb0:json", "emb0:msgpack"}
        assert {str(d / LOG_NAME), str(d / f"{BACKUP_PREFIX}1")} <= set(found["text"])

        def catch_up(ns: str, target: Any, timeout_s: float) -> None:
            ensure_projected(r, ns, target, Settings(), timeout_s)

        got = c.erase("t", ["s"], catch_up=catch_up)
        assert got.redaction.log_records == 6  # 3 records, in the log and in the backup
        sources = [*key_bytes(r), *file_bytes(d), ("export", _export(r))]
        assert _hits(sources) == {}
    finally:
        close_embedded(url)
    # the rewritten file is the store: it opens, replays, and equals the live state
    r = connect(url)
    try:
        rt = runtime.build(Settings(), r, r)
        runtime.install(rt)
        assert run_worker(rt, burst=True) == 0
        cp, live = live_snapshot(r, "t")
        assert live["s"].erased and live["s"].text == "" and live["k"].text.startswith("keep")
        assert diff_notes(live, fold_log(r, "t", until=cp).projection.notes) == []
    finally:
        close_embedded(url)
