"""``Memory``: the same calls over ``serve`` (http) and over a store URL; ids, typed errors."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hivemind_memory.api_stub.sdk import Memory, new_id
from hivemind_memory.events.errors import (
    AccessDenied,
    EventError,
    HivemindError,
    QueryError,
    TooLarge,
)
from hivemind_memory.events.schema import ID_PATTERN
from tests.support import HIVEMIND
from tests.support.beats import wait_for_workers
from tests.support.frontdoor import ALICE, BOB, OTHER, Live, start_live

AS_OF = "2026-07-01T00:00:00Z"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    srv = start_live(f"memory://{tmp_path / 'served'}", max_body=256 * 1024)
    yield srv
    srv.stop()


def test_new_ids_are_unique_valid_and_time_ordered() -> None:
    import re

    ids = [new_id("ev") for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.match(ID_PATTERN, i) for i in ids)


def _agent_flow(alice: Memory, bob: Memory) -> None:
    nid = alice.remember("Deploys happen on Tuesdays after 14:00 UTC")
    secret = alice.remember("alice's staging password hint: tuesdays", scope="private")
    scratch = bob.remember("scratch: maybe deploy on wednesdays", kind="scratch",
                           note_id="scratch@@bob")
    assert scratch == "scratch@@bob"

    got = bob.recall("when do deploys happen on tuesdays", budget=500)
    assert nid in got.note_ids and secret not in got.note_ids
    assert "Deploys happen on Tuesdays" in got.context and str(got) == got.context
    assert got.used_tokens <= got.budget == 500
    # her private note first; in a namespace this small the nearest notes by meaning follow
    # (calibration.nearest)
    assert alice.recall("staging password", budget=500).note_ids[0] == secret

    assert bob.used(nid) == 1
    bob.forget("scratch@@bob")
    assert "scratch@@bob" not in bob.recall("deploy wednesdays", budget=500).note_ids

    # the context labels each note with its id and day; the notes carry date and tier
    [first] = [n for n in got.notes if n.note_id == nid]
    assert first.created_at.endswith("Z") and first.tier == "short"
    assert f"[{nid} | {first.created_at[:10]}]\nDeploys happen on Tuesdays" in got.context

    # reads by id and by id prefix: what this agent may see, its own writes included
    for i, text in (("grp.a:1@@bob", "grouped one"), ("grp.a:2@@bob", "grouped two"),
                    ("grp.ab:1@@bob", "grouped other")):
        bob.remember(text, note_id=i)
    assert [n.note_id for n in bob.notes("grp.a:")] == ["grp.a:1@@bob", "grp.a:2@@bob"]
    assert [n.note_id for n in bob.notes("grp.", limit=2)] == ["grp.a:1@@bob", "grp.a:2@@bob"]
    assert [n.note_id for n in bob.notes("grp.", after="grp.a:2@@bob")] == ["grp.ab:1@@bob"]
    note = bob.get(nid)
    assert note is not None and note.text.startswith("Deploys happen on Tuesdays")
    assert (note.agent, note.uses, note.scope, note.tier) == ("alice", 1, "shared", "short")
    assert bob.get(secret) is None and bob.get("scratch@@bob") is None  # private; forgotten
    mine = alice.get(secret)
    assert mine is not None and mine.scope == "private"
    assert [n.note_id for n in bob.read_notes(["grp.a:2@@bob", "nope", "grp.a:1@@bob"])] == [
        "grp.a:2@@bob", "grp.a:1@@bob"]
    # a recall among the notes of one id prefix only
    assert sorted(bob.recall("grouped", budget=500, id_prefix="grp.a:").note_ids) == [
        "grp.a:1@@bob", "grp.a:2@@bob"]

    # the raw calls
    res = bob.query("tuesdays", 500, as_of=AS_OF, explain=True)
    assert res["agent"] == "bob" and "candidates" in res
    assert res == bob.query("tuesdays", 500, as_of=AS_OF, explain=True)  # same as-of, same
    out = bob.batch([{"text": "tuesdays", "budget": 100}, {"text": "", "budget": 1}])
    assert "notes" in out[0] and out[1]["error"]["code"] == "invalid_request"
    n = bob.append([{"type": "note.created", "note_id": "raw-1@@bob", "text": "raw appended",
                     "at": "2026-05-01T00:00:00Z"}])
    assert n == 1

    with pytest.raises(EventError, match=r"\$\.tokens"):
        bob.remember("bad", tokens=0)
    with pytest.raises(QueryError, match="budget"):
        bob.recall("x", budget=0)
    with pytest.raises(HivemindError):
        bob.used("never-created", "not valid id!")


def test_memory_over_http(live: Live) -> None:
    alice = Memory(live.base, ns="team-a", token=ALICE)
    bob = Memory(live.base, ns="team-a", token=BOB)
    _agent_flow(alice, bob)
    # the token names the agent; claiming another one is refused
    with pytest.raises(AccessDenied, match="forbidden_agent"):
        Memory(live.base, ns="team-a", agent="alice", token=BOB).remember("pretend")
    with pytest.raises(AccessDenied, match="team-a"):
        Memory(live.base, ns="team-a", token=OTHER).recall("deploys")
    with pytest.raises(AccessDenied, match="401"):
        Memory(live.base, ns="team-a", token="wrong-wrong-wrong-wrong").recall("x")
    with pytest.raises(TooLarge):
        alice.append([{"type": "note.created", "note_id": f"n{i}@@alice", "text": "x" * 60_000}
                      for i in range(5)])


def test_memory_over_a_store_url(tmp_path: Path) -> None:
    url = f"memory://{tmp_path / 'direct'}"
    with Memory(url, ns="team-a", agent="alice") as alice:
        bob = Memory.over_client(alice._t.client, ns="team-a", agent="bob",  # type: ignore[attr-defined]
                                 on_write=alice._t.on_write)  # type: ignore[attr-defined]
        _agent_flow(alice, bob)
    with pytest.raises(AccessDenied, match="agent="):
        Memory(url, ns="team-a")


@pytest.mark.redis_server
def test_memory_over_redis(redis_server: object, tmp_path: Path) -> None:
    """Over a real Redis the SDK only writes and waits: a ``hivemind worker`` answers."""
    import os
    import subprocess

    from tests.support import HIVEMIND, RedisProc

    assert isinstance(redis_server, RedisProc)
    c = redis_server.client()
    c.flushall()
    env = {**os.environ, "HIVEMIND_REDIS_URL": redis_server.url}
    worker = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for_workers(c)
        alice = Memory(redis_server.url, ns="team-a", agent="alice")
        bob = Memory(redis_server.url, ns="team-a", agent="bob")
        _agent_flow(alice, bob)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        c.flushall()
        c.close()


def test_two_embedded_stores_in_one_process_keep_to_themselves(tmp_path: Path) -> None:
    """Each in-process worker runs its jobs with its own store (a per-thread runtime)."""
    with Memory(f"memory://{tmp_path / 'one'}", ns="n", agent="a") as one, \
            Memory(f"memory://{tmp_path / 'two'}", ns="n", agent="a") as two:
        one.remember("apples are red", note_id="apple")
        two.remember("apples are green here", note_id="green-apple")
        assert one.recall("apples", budget=100).note_ids == ["apple"]
        assert two.recall("apples", budget=100).note_ids == ["green-apple"]


def _another_process_opens(url: str) -> subprocess.CompletedProcess[str]:
    """``hivemind fsck`` on ``url`` from a process of its own: it opens the store's log, or
    is refused (exit 2) while another process holds it."""
    return subprocess.run([*HIVEMIND, "fsck", "--store", url, "--json"],
                          capture_output=True, text=True, timeout=120)


def test_closing_the_last_memory_of_a_store_path_unlocks_it(tmp_path: Path) -> None:
    """Another process may open a ``memory://PATH`` once every ``Memory`` of this process
    on it is closed (before, the directory stayed locked until this process exited); a
    ``Memory`` still open keeps it, and keeps working."""
    url = f"memory://{tmp_path / 'kept'}"
    one = Memory(url, ns="n", agent="a")
    two = Memory(url, ns="n", agent="a")
    one.remember("apples are red", note_id="apple")
    one.close()
    one.close()  # a second close lets go of nothing more
    locked = _another_process_opens(url)
    assert locked.returncode == 2 and "in use by another process" in locked.stderr, locked.stderr
    two.remember("apples are green", note_id="green")
    assert sorted(two.recall("apples", budget=100).note_ids) == ["apple", "green"]
    two.close()
    opened = _another_process_opens(url)
    assert opened.returncode == 0, opened.stderr
    assert '"ok":true' in opened.stdout, opened.stdout
    with Memory(url, ns="n", agent="a") as again:  # this process may open it again too
        assert sorted(again.recall("apples", budget=100).note_ids) == ["apple", "green"]


def test_a_memory_store_without_a_path_outlives_its_memory() -> None:
    """Plain ``memory://`` lives only in this process: closing a ``Memory`` keeps its data
    for the next one."""
    with Memory("memory://", ns="kept-in-process", agent="a") as one:
        one.remember("pears are sweet", note_id="pear")
    with Memory("memory://", ns="kept-in-process", agent="a") as two:
        assert two.recall("pears", budget=100).note_ids == ["pear"]


def test_async_memory_does_not_block_the_loop(live: Live) -> None:
    import asyncio

    from hivemind_memory.api_stub.sdk import AsyncMemory

    async def main() -> None:
        mem = AsyncMemory(live.base, ns="team-a", token=ALICE)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        nids = await asyncio.gather(*(mem.remember(f"async note {i} about kites")
                                      for i in range(5)))
        got = await mem.recall("kites", budget=1000)
        assert sorted(got.note_ids) == sorted(nids)
        assert await mem.used(nids[0]) == 1
        await mem.forget(nids[1])
        assert nids[1] not in (await mem.recall("kites", budget=1000)).note_ids
        t.cancel()
        await mem.close()
        assert ticks > 0  # the loop ran while the calls were in flight

    asyncio.run(main())


def test_memory_on_a_store_uses_the_given_settings(tmp_path: Path) -> None:
    """The in-process worker ranks with the settings' config (``hivemind mcp --config``)."""
    from hivemind_memory.api_stub.protocol.settings import Settings

    cfg = tmp_path / "strict.toml"
    cfg.write_text("min_relevance = 0.99\n")
    for config, expect in ((None, ["kites"]), (str(cfg), [])):
        url = f"memory://{tmp_path / ('strict' if config else 'plain')}"
        s = Settings.from_env({}, redis_url=url, config_path=config)
        with Memory(url, ns="n", agent="a", settings=s) as mem:
            mem.remember("kites and a lot of other words that dilute the match", note_id="kites")
            assert mem.recall("kites weather", budget=100).note_ids == expect


def test_the_package_root_is_the_public_face_and_wires_the_embedded_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``from hivemind_memory import Memory`` is the SDK's class; the SDK itself never
    imports the worker: without the root's injection, ``memory://`` says what is missing.
    The root imports the worker only when a ``memory://`` Memory starts one (a client-only
    process, ``hivemind batch`` say, never loads it)."""
    import subprocess
    import sys

    import hivemind_memory
    from hivemind_memory.api_stub import sdk
    from hivemind_memory.events.errors import StoreError

    assert hivemind_memory.Memory is sdk.Memory
    assert hivemind_memory.AsyncMemory is sdk.AsyncMemory
    assert sdk._embedded_worker is hivemind_memory._start_embedded
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, hivemind_memory.api_stub.client; "
         "print(sorted(m for m in sys.modules if m.startswith('hivemind_memory.worker') "
         "or m in ('numpy', 'fakeredis')))"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
    with Memory("memory://", ns="root-face", agent="a") as mem:  # the worker, started lazily
        mem.remember("root face", note_id="r1")
        assert mem.recall("root face", budget=50).note_ids == ["r1"]
    monkeypatch.setattr(sdk, "_embedded_worker", None)
    with pytest.raises(StoreError, match="import Memory from hivemind_memory"):
        sdk.Memory("memory://", ns="root-face", agent="a")


def test_reads_over_a_server_without_tokens_are_the_named_agents(tmp_path: Path) -> None:
    """Without tokens (loopback, one trusted user) the SDK names its agent in reads too: its
    private notes are its own, another agent's are not found."""
    srv = start_live(f"memory://{tmp_path / 'open'}", tokens=None)
    try:
        al = Memory(srv.base, ns="n", agent="al")
        nid = al.remember("al's private note", scope="private")
        assert [n.note_id for n in al.read_notes([nid])] == [nid]
        assert [n.note_id for n in al.notes("n-")] == [nid]
        assert Memory(srv.base, ns="n", agent="bo").get(nid) is None
    finally:
        srv.stop()
