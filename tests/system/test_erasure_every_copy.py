"""Erasure reaches every copy, whatever wrote it: a note written the way users write (HTTP
``remember``, the SDK's ``Memory.remember``, the MCP ``remember`` tool; their near-duplicate
check is a lookup that stores nothing), revised, quoted by another agent's query,
then erased with ``DELETE .../notes/{id}``. Afterwards no version of its text or embedding
is in any key of the store (every type read, RQ's zlib-compressed job payloads opened), the
audit views (``GET .../audit``, ``audit list``, the explorer's explain of every entry),
``export --with-audit``, ``streams.log`` of a ``memory://PATH`` store, nor an RDB loaded back
into a fresh redis-server. The same search before the erasure finds them, in the audit
stream and in an RQ job among others (so the search can fail)."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hivemind_memory import Memory
from hivemind_memory.worker.audit import archive
from hivemind_memory.worker.cli.main import main as hivemind_main
from tests.support import HIVEMIND, RedisProc, wait_until
from tests.support.frontdoor import ALICE, BOB, OPS, Live, call, start_live
from tests.support.keyscan import file_bytes, key_bytes

NS = "team-a"
P = f"/v1/ns/{NS}"
SECRET = "the vault passphrase is zebra-quartz-4471"
SECRET2 = "the vault passphrase is now zebra-quartz-9902"
EMB = [0.7182818284590452, -0.3141592653589793, 0.5772156649015329]
MARK = b"zebra-quartz"
"""In both versions of the secret's text, nowhere else."""
DOORS = ["http", "sdk", "mcp"]


def _needles(with_embedding: bool) -> dict[str, bytes]:
    out = {"text": MARK}
    if with_embedding:
        for i, x in enumerate(EMB):
            out[f"emb{i}:json"] = repr(x).encode()
            out[f"emb{i}:msgpack"] = b"\xcb" + struct.pack(">d", x)
            out[f"emb{i}:f64"] = struct.pack("<d", x)
            out[f"emb{i}:f32"] = struct.pack("<f", x)
    return out


def _hits(sources: list[tuple[str, bytes]], with_embedding: bool) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, needle in _needles(with_embedding).items():
        for where, data in sources:
            if needle in data:
                found.setdefault(name, []).append(where)
    return found


def _mcp_remember(live: Live, text: str) -> str:
    async def main() -> str:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {ALICE}",
                                               "X-Hivemind-Ns": NS})
        async with http, McpClient(streamable_http_client(live.base + "/mcp", http_client=http),
                                   read_timeout_seconds=60) as client:
            got = await client.call_tool("remember", {"text": text})
            assert not got.is_error, got
            sc = got.structured_content
            out = sc["result"] if isinstance(sc, dict) else got.content[0].text  # type: ignore[union-attr]
            return str(out)

    return anyio.run(main)


def _remember(door: str, live: Live) -> str:
    """The secret written through ``door`` (with its embedding where the door takes one)."""
    if door == "http":
        st, body = call(live.base, "POST", f"{P}/remember", {"text": SECRET, "embedding": EMB},
                        token=ALICE)
        assert st == 200, body
        return str(body["note_id"])
    if door == "sdk":
        with Memory(live.base, ns=NS, token=ALICE) as m:
            return str(m.remember(SECRET, embedding=EMB))
    return _mcp_remember(live, SECRET)


def _write_the_way_users_do(door: str, live: Live) -> str:
    """A kept note, the secret (through ``door``), its revision, queries quoting it."""
    st, body = call(live.base, "POST", f"{P}/remember", {"text": "keep the deploy runbook"},
                    token=BOB)
    assert st == 200, body
    nid = _remember(door, live)
    st, body = call(live.base, "POST", f"{P}/revise",
                    {"note_id": nid, "text": SECRET2, "embedding": EMB}, token=ALICE)
    assert st == 200, body
    for text in (SECRET, SECRET2, "vault passphrase"):  # quoting each version; and a plain one
        st, body = call(live.base, "POST", f"{P}/query",
                        {"text": text, "budget": 500, "embedding": EMB}, token=BOB)
        assert st == 200, body
    return nid


def _views(live: Live) -> list[tuple[str, bytes]]:
    """What the audit views give back: ``GET .../audit`` and the explain of every entry."""
    st, audit = call(live.base, "GET", f"{P}/audit?limit=1000", token=OPS)
    assert st == 200, audit
    out = [("GET audit", json.dumps(audit).encode())]
    for entry in audit:
        qid = entry["event"]["query_id"]
        st, body = call(live.base, "GET", f"{P}/audit/{qid}/explain", token=OPS)
        assert st == 200, body
        out.append((f"explain {qid}", json.dumps(body).encode()))
    return out


def _audit_list(capsys: pytest.CaptureFixture[str], url: str) -> bytes:
    capsys.readouterr()
    assert hivemind_main(["audit", "list", "--ns", NS, "--json", "--redis-url", url]) == 0
    return capsys.readouterr().out.encode()


def _export(r: Any) -> bytes:
    out = io.BytesIO()
    archive.export(r, NS, out, with_audit=True)
    return out.getvalue()


@pytest.mark.parametrize("door", DOORS)
def test_erasure_leaves_no_copy_in_a_memory_path_store(
        door: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "store"
    url = f"memory://{d}"
    live = start_live(url)
    emb = door != "mcp"  # the MCP tool takes no embedding
    try:
        nid = _write_the_way_users_do(door, live)
        r = live.served.client.store

        def sources() -> list[tuple[str, bytes]]:
            return [*key_bytes(r), *file_bytes(d), *_views(live),
                    ("audit list", _audit_list(capsys, url)), ("export", _export(r))]

        before = _hits(sources(), emb)
        audit_key = f"hm:{{{NS}}}:audit"
        assert audit_key in before["text"] and "GET audit" in before["text"]
        assert "audit list" in before["text"] and "export" in before["text"]
        assert any(w.startswith("rq:job:") for w in before["text"])  # a quoting query's job
        assert str(d / "streams.log") in before["text"]
        if emb:
            assert f"hm:{{{NS}}}:qembeddings" in before["emb0:json"]

        st, body = call(live.base, "DELETE", f"{P}/notes/{nid}", token=OPS)
        assert st == 200, body
        # the two quoting queries (this call's counts may be 0: the redaction job the
        # projector queues may have run first; the scan below finds no job holding them)
        assert body["redacted_in_all"]["audit_entries"] >= 2
        assert _hits(sources(), emb) == {}

        # the audit entries keep their shape and ids: only the text went, marked
        st, audit = call(live.base, "GET", f"{P}/audit?limit=1000", token=OPS)
        quoted = [e for e in audit if e["event"].get("redacted")]
        assert {e["event"]["redacted"] for e in quoted} == {nid}
        assert all(e["event"]["text"] == "" and e["event"]["query_id"] for e in quoted)
        assert len(quoted) == body["redacted_in_all"]["audit_entries"]
        # an erasure run again finds nothing left to change
        st, again = call(live.base, "DELETE", f"{P}/notes/{nid}", token=OPS)
        assert st == 200 and again["event_id"] is None
        assert {k: v for k, v in again["redacted"].items() if v and k != "snapshot_keys"} == {}
        assert again["redacted_in_all"] == body["redacted_in_all"]
        # every answer is identical or erased: exit 0
        st, rep = call(live.base, "POST", f"{P}/audit/reproduce", {"all": True}, token=OPS)
        assert st == 200 and rep["ok"] and rep["different"] == 0, rep
        assert rep["erased"] >= len(quoted)
    finally:
        live.stop()


def _info(r: redis.Redis, field: str) -> str:
    return str(r.info("persistence")[field])


def _compact_and_save(r: redis.Redis, rp: RedisProc) -> None:
    """The documented ``BGREWRITEAOF`` then ``BGSAVE``, each waited for."""
    wait_until(lambda: _info(r, "aof_rewrite_in_progress") == "0", "an earlier rewrite", 30)
    r.bgrewriteaof()
    wait_until(lambda: _info(r, "aof_rewrite_in_progress") == "0"
               and _info(r, "aof_rewrite_scheduled") == "0", "BGREWRITEAOF", 30)
    before = int(_info(r, "rdb_saves"))
    r.bgsave()
    wait_until(lambda: _info(r, "rdb_bgsave_in_progress") == "0"
               and int(_info(r, "rdb_saves")) > before, "BGSAVE", 30)
    assert _info(r, "rdb_last_bgsave_status") == "ok"


def _rdb_keys(rp: RedisProc, tmp_path: Path) -> list[tuple[str, bytes]]:
    """Every key of ``rp``'s RDB, as a fresh redis-server loads it."""
    d = Path(tempfile.mkdtemp(prefix="loaded-", dir=tmp_path))
    shutil.copy(rp.dir / "dump.rdb", d / "dump.rdb")
    fresh = RedisProc(0, d, appendonly=False)
    fresh.start()
    try:
        c = fresh.client()
        assert c.dbsize() > 0  # it loaded the RDB
        out = [(f"rdb {w}", b) for w, b in key_bytes(c)]
        c.close()
        return out
    finally:
        fresh.stop()


@pytest.mark.redis_server
@pytest.mark.parametrize("door", DOORS)
def test_erasure_leaves_no_copy_on_a_redis_server_nor_in_its_rdb(
        door: str, redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = redis_factory(appendonly=True)
    r = rp.client()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")},
           "HIVEMIND_REDIS_URL": rp.url}
    worker = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    live = start_live(rp.url)
    emb = door != "mcp"
    try:
        wait_until(lambda: live.served.client.workers_alive(), "the worker's heartbeat", 60)
        nid = _write_the_way_users_do(door, live)
        _compact_and_save(r, rp)
        before = _hits([*key_bytes(r), *_rdb_keys(rp, tmp_path)], emb)
        assert f"rdb hm:{{{NS}}}:audit" in before["text"]
        assert any(w.startswith("rdb rq:job:") for w in before["text"])

        st, body = call(live.base, "DELETE", f"{P}/notes/{nid}", token=OPS)
        assert st == 200, body
        _compact_and_save(r, rp)
        after = [*key_bytes(r), *_rdb_keys(rp, tmp_path), *_views(live),
                 ("export", _export(r))]
        assert _hits(after, emb) == {}
    finally:
        live.stop()
        worker.terminate()
        worker.wait(timeout=30)
        r.close()
