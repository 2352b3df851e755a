"""The pipelined projector (``readmodel.Folder``): whatever happens between two of its steps
(another projector commits, a replay writes back, the script cache is flushed, the lease is
taken, events keep arriving), it never writes a batch folded on stale reads, and the read
model ends equal to the pure fold of the log and to the generator's own counts."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from bench.data import Expected, generate
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.state import tier_of
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.lease import try_lease
from hivemind_memory.projections.store.log import append, tail
from hivemind_memory.projections.store.readmodel import (
    Folder,
    checkpoint,
    project_batch,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import fold_log, write_back
from tests.factories import created, ev, used

NS = "fold"
CFG = RankingConfig()


def _ingest(r: Any, tmp_path: Path, n: int, tag: str, seed: int) -> Expected:
    path = tmp_path / f"events-{tag}.jsonl"
    exp = generate(path, n, [NS], seed=seed, tag=tag)
    assert ingest(r, str(path), on_error=pytest.fail).appended == n
    return exp


def _assert_exact(r: Any, exps: list[Expected]) -> None:
    """Live == pure fold of the log == what the generators recorded."""
    assert checkpoint(r, NS) == tail(r, NS)
    live = read_notes(r, NS)
    rebuilt = fold_log(r, NS)
    assert live == rebuilt.projection.notes
    uses = {nid: u for e in exps for (_, nid), u in e.uses.items()}
    assert {nid: n.uses for nid, n in live.items()} == uses
    forgotten = {nid for e in exps for (_, nid) in e.forgotten}
    assert {nid for nid, n in live.items() if n.forgotten} == forgotten
    for e in exps:
        for (ns, nid) in e.uses:
            n = live[nid]
            assert tier_of(n.uses, n.kind, CFG) == e.tier((ns, nid), CFG.longterm_uses)
    dead = sum(e.dead[NS] for e in exps)
    assert r.xlen(keys.dead(NS)) == dead == len(rebuilt.projection.dead)
    assert r.scard(keys.seen(NS)) == sum(e.distinct_event_ids[NS] for e in exps)
    assert int(r.get(keys.projected(NS))) == r.xlen(keys.stream(NS))


def _drain(f: Folder) -> list[Any]:
    infos = []
    while (info := f.step()) is not None:
        infos.append(info)
    return infos


def test_folder_alone_folds_exactly(store: Any, tmp_path: Path) -> None:
    exp = _ingest(store, tmp_path, 3_000, "a", seed=21)
    infos = _drain(Folder(store, NS, 97))
    assert all(i.committed for i in infos)
    assert sum(i.count for i in infos) == 3_000
    firsts = [parse_pos(i.first) for i in infos]
    assert firsts == sorted(set(firsts))  # in stream order, none twice
    assert all(parse_pos(a.last) < parse_pos(b.first) for a, b in pairwise(infos))
    _assert_exact(store, [exp])


def test_interference_between_steps_never_writes_stale_state(store: Any,
                                                              tmp_path: Path) -> None:
    exp_a = _ingest(store, tmp_path, 2_500, "a", seed=22)
    f = Folder(store, NS, 61)
    for _ in range(3):
        info = f.step()
        assert info is not None and info.committed
    # another projector commits the batch this folder has read ahead: its next commit must
    # not apply (the read-ahead priors are stale), and the one after starts afresh
    other = project_batch(store, NS, 61)
    assert other is not None and other.committed
    before = (store.get(keys.checkpoint(NS)), store.hgetall(keys.notes(NS)))
    info = f.step()
    assert info is not None and not info.committed
    assert (store.get(keys.checkpoint(NS)), store.hgetall(keys.notes(NS))) == before
    info = f.step()
    assert info is not None and info.committed
    assert parse_pos(info.first) > parse_pos(other.last)
    # a replay writes the same state back with a new generation: a batch folded before it
    # cannot commit
    assert write_back(store, NS, fold_log(store, NS, until=checkpoint(store, NS)))
    info = f.step()
    assert info is not None and not info.committed
    # the script cache is flushed (a Redis restart): the commit loads the script again
    for _ in range(2):
        info = f.step()
        assert info is not None and info.committed
    store.script_flush()
    info = f.step()
    assert info is not None and info.committed
    # events keep arriving while the folder is mid-way and after it caught up
    exp_b = _ingest(store, tmp_path, 700, "b", seed=23)
    _drain(f)
    exp_c = _ingest(store, tmp_path, 300, "c", seed=24)
    assert f.step() is not None
    _drain(f)
    _assert_exact(store, [exp_a, exp_b, exp_c])


def test_a_folder_reads_again_the_notes_someone_else_changed(store: Any) -> None:
    append(store, [ev(created(f"n{i}", ns=NS)) for i in range(20)])
    f = Folder(store, NS, 8)
    _drain(f)  # caught up; the folder keeps the states it committed
    # another projector commits uses of those very notes, then more arrive
    append(store, [ev(used(f"n{i % 20}", f"u{i}", ns=NS)) for i in range(30)])
    other = project_batch(store, NS, 25)
    assert other is not None and other.committed and other.applied == 25
    infos = _drain(f)  # the folder must read them again, not trust what it kept
    assert [i.count for i in infos] == [5] and infos[0].committed
    live = read_notes(store, NS)
    assert {nid: n.uses for nid, n in live.items()} == {
        f"n{i}": 2 if i < 10 else 1 for i in range(20)}
    assert live == fold_log(store, NS).projection.notes


def test_a_folder_whose_lease_was_taken_cannot_commit(store: Any, tmp_path: Path) -> None:
    exp = _ingest(store, tmp_path, 1_000, "a", seed=25)
    a = try_lease(store, NS, 60_000)
    assert a is not None
    f = Folder(store, NS, 50, a.token, 60_000)
    info = f.step()
    assert info is not None and info.committed
    assert 0 < store.pttl(keys.lock(NS)) <= 60_000  # a commit renews the lease
    store.delete(keys.lock(NS))  # A's lease expires (a long pause) and B takes it
    b = try_lease(store, NS, 60_000)
    assert b is not None
    before = (store.get(keys.checkpoint(NS)), store.hgetall(keys.notes(NS)),
              store.smembers(keys.seen(NS)))
    for _ in range(3):  # fenced: whatever A read ahead, it writes nothing
        info = f.step()
        assert info is not None and not info.committed
    assert (store.get(keys.checkpoint(NS)), store.hgetall(keys.notes(NS)),
            store.smembers(keys.seen(NS))) == before
    infos = _drain(Folder(store, NS, 50, b.token, 60_000))
    assert infos and all(i.committed for i in infos)
    _assert_exact(store, [exp])
