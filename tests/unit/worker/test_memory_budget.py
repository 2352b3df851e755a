"""A worker's memory budget: namespace indexes evicted least recently used first and loaded
again with the same answers, and a namespace that cannot be held answered at once with the
reason (``worker.memory``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import Envelope
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import ConfigError
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.ranking.footprint import index_bytes
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.store.index_loader import refresh_index
from hivemind_memory.projections.store.index_size import estimate_load_bytes
from hivemind_memory.worker import engine as engine_mod
from hivemind_memory.worker import memory
from hivemind_memory.worker.engine import QueryEngine
from tests.support.factories import created, used

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WORDS = ["redis", "stream", "lease", "batch", "replay", "agent", "budget", "note", "query",
         "index", "shard", "memory", "worker", "snapshot", "eviction", "cache", "vector", "term",
         "posting", "checkpoint"]


def _fill(c: Client, ns: str, n: int, seed: int) -> None:
    evs = []
    for i in range(n):
        k = (i * 7 + seed) % len(WORDS)
        text = " ".join(WORDS[(k + j * (seed + 1)) % len(WORDS)] for j in range(3 + i % 9))
        evs.append(created(f"{ns}{i}", ns=ns, text=f"{text} n{i}", agent="ab"[i % 2],
                           at=datetime(2026, 1 + i % 5, 1 + i % 27, tzinfo=UTC)))
    evs += [used(f"{ns}{i}", f"u-{ns}{i}-{k}", ns=ns) for i in range(0, n, 3)
            for k in range(1 + i % 6)]
    c.append(evs)


def _requests(nss: list[str]) -> list[dict[str, Any]]:
    return [{"ns": ns, "text": f"{w} {v}", "budget": 40 + 15 * i, "agent": "a" if i % 2 else ""}
            for ns in nss for i, (w, v) in enumerate(zip(WORDS, reversed(WORDS), strict=False))
            if i < 4]


def _answers(eng: QueryEngine, c: Client, reqs: list[dict[str, Any]]) -> list[bytes]:
    """The answer bytes of ``reqs`` as one job, the query id taken out (a new one each time)."""
    ids = c.submit_batch(reqs)
    [job] = c._qq.jobs
    c._qq.empty()
    envs = [msgspec.convert(e, Envelope) for e in job.args[0]]
    eng.serve(envs)
    return [c.result_json(q, 5).replace(q.encode(), b"Q") for q in ids]


@pytest.fixture
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_mod, "utcnow", lambda: NOW)


def test_eviction_and_reload_give_the_same_answers(store: Any, fixed_now: None) -> None:
    c = Client(store, settings=Settings())
    nss = ["ma", "mb", "mc"]
    for k, ns in enumerate(nss):
        _fill(c, ns, 40 + 10 * k, k)
    roomy = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    before = {ns: _answers(roomy, c, _requests([ns])) for ns in nss}
    assert len(roomy.live) == 3 and roomy.live.evictions == 0
    sizes = roomy.live.sizes()
    # room for the largest index, not for two of them: every job evicts the one before
    tight = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    tight.live.budget = max(sizes.values()) + min(sizes.values()) // 2
    for ns in [*nss, *nss]:
        assert _answers(tight, c, _requests([ns])) == before[ns]
        assert tight.live.names() == [ns]
    assert tight.live.evictions == 5
    assert tight.live.report.held <= tight.live.budget and tight.live.report.namespaces == 1
    # a job over all three holds them together (never evicts what it is answering), and
    # sheds the extra ones once answered (the most recent kept)
    assert _answers(tight, c, _requests(nss)) == [b for ns in nss for b in before[ns]]
    assert tight.live.names() == ["mc"]
    assert _answers(tight, c, _requests(["mb"])) == before["mb"]
    assert tight.live.names() == ["mb"]


def test_the_least_recently_used_goes_first(store: Any, fixed_now: None) -> None:
    c = Client(store, settings=Settings())
    for k, ns in enumerate(["la", "lb", "lc"]):
        _fill(c, ns, 30, k)
    eng = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    eng.kept.limit = 0  # indexes only (what the rules keep counts too: the test below)
    for ns in ["la", "lb"]:
        _answers(eng, c, _requests([ns]))
    sizes = eng.live.sizes()
    eng.live.budget = sum(sizes.values()) + 10_000  # two fit, with the third's room short
    _answers(eng, c, _requests(["la"]))  # la used last: lb is now the least recent
    _answers(eng, c, _requests(["lc"]))
    assert eng.live.names() == ["la", "lc"]


def test_a_snapshot_refresh_leaves_the_least_recently_used_order_to_the_queries(
        store: Any, fixed_now: None) -> None:
    """A ``refresh_snapshot`` job (queued by the projector after commits, not a query) brings
    a held index up to date without making it the most recently used: a namespace written
    often and never asked stays the first evicted."""
    c = Client(store, settings=Settings())
    for k, ns in enumerate(["ra", "rb", "rc"]):
        _fill(c, ns, 30, k)
    eng = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    eng.kept.limit = 0
    for ns in ["ra", "rb"]:
        _answers(eng, c, _requests([ns]))
    eng.live.budget = sum(eng.live.sizes().values()) + 10_000  # two fit, not three
    assert eng.refresh_snapshot("ra")["status"] == "refreshed"
    _answers(eng, c, _requests(["rc"]))
    assert eng.live.names() == ["rb", "rc"]


def test_a_namespace_larger_than_the_budget_is_refused_at_once_naming_the_sizes(
        store: Any, fixed_now: None) -> None:
    c = Client(store, settings=Settings())
    _fill(c, "big", 60, 1)
    _fill(c, "small", 5, 2)
    first = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    _answers(first, c, _requests(["big"]))  # a full load, which writes the snapshot
    snap = NamespaceIndex("big")
    refresh_index(store, snap, None)
    size = index_bytes(snap)  # what a worker measures after loading it from the snapshot
    estimate = estimate_load_bytes(store, "big")
    assert estimate is not None and estimate <= size
    # short of its size: refused once measured (the estimate fits: loaded first); short of
    # the estimate: refused before loading it
    for budget, how in ((size - 1, "measured"), (estimate, "measured"),
                        (estimate - 1, "estimated from its snapshot")):
        eng = QueryEngine(store, DEFAULT, Settings(), embedder=None)
        eng.live.budget = budget
        got = [msgspec.json.decode(b) for b in _answers(eng, c, _requests(["big", "small"]))]
        errors = [g["error"] for g in got[:4]]
        assert {e["code"] for e in errors} == {"namespace_too_large"}
        assert f"{budget / 2**20:.1f} MiB" in errors[0]["message"]
        assert "'big'" in errors[0]["message"]
        assert f"({how})" in errors[0]["message"]
        assert all("error" not in g for g in got[4:])  # the small namespace is answered
        assert eng.live.names() == ["small"]
        assert [f.ns for f in eng.live.report.failures] == ["big"]
    # exactly its size: held and answered
    eng = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    eng.live.budget = size
    got = [msgspec.json.decode(b) for b in _answers(eng, c, _requests(["big"]))]
    assert all("error" not in g for g in got) and eng.live.names() == ["big"]
    assert eng.live.report.failures == []


def test_a_load_that_runs_out_of_memory_is_answered_with_the_cause(
        store: Any, fixed_now: None, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Client(store, settings=Settings())
    _fill(c, "oom", 20, 1)
    _fill(c, "fine", 20, 2)
    real = engine_mod.refresh_index

    def starved(r: Any, idx: NamespaceIndex, embedder: Any = None, **kw: Any) -> None:
        if idx.ns == "oom":
            raise MemoryError
        real(r, idx, embedder, **kw)

    monkeypatch.setattr(engine_mod, "refresh_index", starved)
    eng = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    got = [msgspec.json.decode(b) for b in _answers(eng, c, _requests(["oom", "fine"]))]
    assert {g["error"]["code"] for g in got[:4]} == {"worker_out_of_memory"}
    assert "'oom'" in got[0]["error"]["message"]
    assert all("error" not in g for g in got[4:])
    assert eng.live.names() == ["fine"]  # nothing half-loaded is kept

    def broken(r: Any, idx: NamespaceIndex, embedder: Any = None, **kw: Any) -> None:
        raise ValueError("snapshot field ids is damaged")

    monkeypatch.setattr(engine_mod, "refresh_index", broken)
    got = [msgspec.json.decode(b) for b in _answers(eng, c, _requests(["oom"]))]
    assert {g["error"]["code"] for g in got} == {"index_load_failed"}
    assert "ValueError: snapshot field ids is damaged" in got[0]["error"]["message"]
    # once it loads, the failure is over
    monkeypatch.setattr(engine_mod, "refresh_index", real)
    got = [msgspec.json.decode(b) for b in _answers(eng, c, _requests(["oom"]))]
    assert all("error" not in g for g in got) and eng.live.report.failures == []


def test_budget_setting_flag_and_machine_default(tmp_path: Path) -> None:
    assert Settings.from_env({"HIVEMIND_MEMORY_BUDGET_MIB": "400"}).memory_budget_mib == 400
    assert Settings.from_env({}, memory_budget_mib=64).memory_budget_mib == 64
    with pytest.raises(ConfigError, match="HIVEMIND_MEMORY_BUDGET_MIB"):
        Settings.from_env({"HIVEMIND_MEMORY_BUDGET_MIB": "0"})
    eng = QueryEngine(Client(_fake(), settings=Settings()).store, DEFAULT,
                      Settings(memory_budget_mib=3), embedder=None)
    assert eng.live.budget == 3 << 20
    # the default: a quarter of the cgroup limit when it is below the machine's memory
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/memory.max").write_text("1073741824\n")
    assert memory.machine_memory_bytes(tmp_path) == 1 << 30
    assert memory.default_budget_mib(1 << 30) == 256
    (tmp_path / "sys/fs/cgroup/memory.max").write_text("max\n")
    phys = memory.machine_memory_bytes(tmp_path)
    assert phys is not None and phys != 1 << 30 and phys > 0
    assert memory.default_budget_mib(100 << 20) == memory.DEFAULT_BUDGET_FLOOR_MIB


def _fake() -> Any:
    import fakeredis

    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


def test_the_kept_word_sets_and_passages_count_in_the_budget(
        store: Any, fixed_now: None) -> None:
    """What the ranking rules keep from batch to batch (``ranker.KeptTexts``) is bounded to a
    share of the budget and counted in it: indexes that fit the budget alone, but not with
    what is kept, are evicted least recently used first, with the same answers after."""
    c = Client(store, settings=Settings())
    nss = ["ka", "kb"]
    for k, ns in enumerate(nss):
        _fill(c, ns, 40, k)
    eng = QueryEngine(store, DEFAULT, Settings(memory_budget_mib=64))  # calibrated: rules on
    assert eng.kept.limit == memory.kept_bytes(64 << 20) == 16 << 20
    assert memory.kept_bytes(1 << 40) == memory.KEPT_BYTES
    before = {ns: _answers(eng, c, _requests([ns])) for ns in nss}
    kept = eng.kept.held
    assert kept > 0 and eng.live.report.outside == kept
    sizes = eng.live.sizes()
    assert sorted(sizes) == nss
    eng.live.budget = sum(sizes.values()) + kept - 1
    assert _answers(eng, c, _requests(["kb"])) == before["kb"]
    assert eng.live.names() == ["kb"]
    assert eng.kept.held < kept  # ka's kept entries went with its index
    report = eng.live.report
    assert report.held + report.outside <= eng.live.budget
    assert _answers(eng, c, _requests(["ka"])) == before["ka"]
