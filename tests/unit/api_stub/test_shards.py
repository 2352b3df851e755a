"""Shards on the client side: a stable hash sends a namespace's queries to one shard's queue,
and a query whose shard no live worker serves is answered ``shard_unavailable`` at once (and
stays queued, so a worker that comes for the shard answers it)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.settings import MAX_SHARDS, Settings
from hivemind_memory.events.errors import ConfigError
from hivemind_memory.worker.ops.heartbeat import Heartbeat
from tests.support.beats import ns_in
from tests.support.factories import created

# -- the hash and the names --------------------------------------------------------------------

def test_the_shard_of_a_namespace_is_the_same_in_every_process() -> None:
    names = ["team-a", "u-42", "project_x", "a"]
    here = [jobs.shard_of(n, 7) for n in names]
    code = ("import sys; from hivemind_memory.api_stub.protocol.jobs import shard_of; "
            f"print([shard_of(n, 7) for n in {names!r}])")
    for seed in ("0", "1", "random"):  # str hash() differs with the seed; the shard may not
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={"PYTHONHASHSEED": seed})
        assert out.stdout.strip() == str(here)
    # CRC-32, written down: a change of the hash would move every namespace's index
    assert [jobs.shard_of(n, 1024) for n in ("team-a", "a")] == [0xA9A9D57D % 1024,
                                                                 0xE8B7BE43 % 1024]


def test_namespaces_spread_over_the_shards() -> None:
    got = Counter(jobs.shard_of(f"user-{i}", 4) for i in range(4000))
    assert sorted(got) == [0, 1, 2, 3]
    assert all(850 <= n <= 1150 for n in got.values()), got


def test_one_shard_keeps_the_old_queue_and_several_name_their_count() -> None:
    assert jobs.query_queue_name(0, 1) == jobs.QUERY_QUEUE == "hivemind-query"
    assert jobs.query_queue_name(2, 3) == "hivemind-query-2-of-3"
    assert jobs.query_queue_name(2, 4) != jobs.query_queue_name(2, 3)
    for bad in (-1, 3):
        with pytest.raises(ValueError, match=r"not within 0\.\.2"):
            jobs.query_queue_name(bad, 3)


@pytest.mark.parametrize(("spec", "want"), [
    ("all", (0, 1, 2, 3)), ("0", (0,)), ("3", (3,)), ("0-3", (0, 1, 2, 3)), ("1-1", (1,)),
    ("2,0", (0, 2)), ("0,2-3", (0, 2, 3)), (" 1 , 1 ", (1,)),
])
def test_a_worker_is_given_its_shards(spec: str, want: tuple[int, ...]) -> None:
    assert jobs.parse_shards(spec, 4) == want


@pytest.mark.parametrize(("spec", "why"), [
    ("4", "'4' is not within 0..3"), ("-1", "not a shard number"), ("3-4", "not within 0..3"),
    ("2-1", "not within 0..3"), ("x", "'x' is not a shard number"), ("", "not a shard number"),
    ("0,,1", "not a shard number"),
])
def test_a_shard_spec_outside_the_shards_is_refused_with_its_reason(spec: str, why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)):
        jobs.parse_shards(spec, 4)


@pytest.mark.parametrize(("raw", "ok"), [("1", True), (str(MAX_SHARDS), True), ("0", False),
                                         (str(MAX_SHARDS + 1), False), ("two", False)])
def test_the_shard_count_is_a_setting_with_bounds(raw: str, ok: bool) -> None:
    if ok:
        assert Settings.from_env({"HIVEMIND_SHARDS": raw}).shards == int(raw)
    else:
        with pytest.raises(ConfigError, match="HIVEMIND_SHARDS"):
            Settings.from_env({"HIVEMIND_SHARDS": raw})
    assert Settings.from_env({}).shards == 1


# -- the client -------------------------------------------------------------------------------

@pytest.fixture
def beats(store: Any) -> Iterator[list[Heartbeat]]:
    started: list[Heartbeat] = []
    yield started
    for hb in started:
        hb.stop()


def _serve(store: Any, beats: list[Heartbeat], name: str, shards: tuple[int, ...],
           count: int) -> Heartbeat:
    """A worker's heartbeat for ``shards`` (what ``hivemind worker --shards`` announces)."""
    hb = Heartbeat(store, name, "worker",
                   [jobs.query_queue_name(k, count) for k in shards] + [jobs.PROJECT_QUEUE],
                   shards=shards, shard_count=count).start()
    beats.append(hb)
    return hb


def test_each_namespaces_queries_go_to_its_shards_queue_in_input_order(store: Any) -> None:
    c = Client(store, settings=Settings(shards=3, query_chunk=2))
    nss = [ns_in(0, 3), ns_in(1, 3), ns_in(0, 3, 1), ns_in(2, 3)]
    reqs = [{"ns": nss[i % 4], "text": f"w{i}", "budget": 10} for i in range(12)]
    ids = c.submit_batch(reqs)
    for shard in range(3):
        q = c.shard_queue(shard)
        assert q.name == f"hivemind-query-{shard}-of-3"
        queued = [e for j in q.get_jobs() for e in j.args[0]]
        assert {e["request"]["ns"] for e in queued} == {n for n in nss
                                                        if jobs.shard_of(n, 3) == shard}
        assert [e["query_id"] for e in queued] == [
            i for i, r in zip(ids, reqs, strict=True) if jobs.shard_of(r["ns"], 3) == shard]
        assert all(len(j.args[0]) <= 2 for j in q.get_jobs())
    assert len(jobs.queue(store, jobs.QUERY_QUEUE, Settings())) == 0  # the one-shard queue


def test_a_query_whose_shard_has_no_worker_gets_the_error_at_once_and_stays_queued(
        store: Any, beats: list[Heartbeat]) -> None:
    c = Client(store, settings=Settings(shards=2))
    c.append([created("n1", ns=ns_in(0, 2)), created("n2", ns=ns_in(1, 2))])
    _serve(store, beats, "w0", (0,), 2)
    dead = c.submit_query(ns_in(1, 2), "redis", 50)
    res = c.result(dead, timeout=30)  # a client timeout would be QueryTimeout after 30 s
    assert res["query_id"] == dead
    assert res["error"]["code"] == "shard_unavailable"
    msg = res["error"]["message"]
    assert f"shard 1 of 2 (namespace {ns_in(1, 2)!r}, queue hivemind-query-1-of-2)" in msg
    assert "hivemind worker --shards 1" in msg
    assert [e["query_id"] for j in c.shard_queue(1).get_jobs() for e in j.args[0]] == [dead]
    assert c.unserved_shards() == [1]
    # a served shard's query is queued for its worker and waited for as before
    live = c.submit_query(ns_in(0, 2), "redis", 50)
    assert c.shard_problem(ns_in(0, 2)) is None
    assert [e["query_id"] for j in c.shard_queue(0).get_jobs() for e in j.args[0]] == [live]


def test_one_shard_with_no_worker_at_all_says_so_instead_of_a_timeout(store: Any) -> None:
    c = Client(store)
    qid = c.submit_query("t", "redis", 50)
    [body] = c.batch_results([qid], timeout=30)
    err = msgspec.json.decode(body)["error"]
    assert err["code"] == "shard_unavailable"
    assert "no worker is running for namespace 't' (start `hivemind worker`)" in err["message"]


def test_a_worker_of_another_shard_count_serves_no_shard_of_this_client(
        store: Any, beats: list[Heartbeat]) -> None:
    """A worker started with HIVEMIND_SHARDS=3 listens on other queues than a client with 2:
    the client's queries get the error, never a queue nobody reads."""
    _serve(store, beats, "w-all-of-3", (0, 1, 2), 3)
    c = Client(store, settings=Settings(shards=2))
    assert c.unserved_shards() == [0, 1]
    assert c.shard_problem(ns_in(0, 2)) is not None
    assert Client(store, settings=Settings(shards=3)).unserved_shards() == []


def test_the_client_reads_the_heartbeats_again_after_a_second(
        store: Any, beats: list[Heartbeat]) -> None:
    c = Client(store, settings=Settings(shards=2))
    assert c.unserved_shards() == [0, 1]
    hb = _serve(store, beats, "w1", (1,), 2)
    assert c.unserved_shards() == [0, 1]  # the reading of a moment ago
    c._served = None  # (as after SHARD_CHECK_S)
    assert c.unserved_shards() == [0]
    hb.stop()  # a clean stop deletes the record at once
    c._served = None
    assert c.unserved_shards() == [0, 1]
