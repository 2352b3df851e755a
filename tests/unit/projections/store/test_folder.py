"""The pipelined projector (``readmodel.Folder``): whatever happens between two of its steps
(another projector commits, a replay writes back, the script cache is flushed, the lease is
taken, events keep arriving), it never writes a batch folded on stale reads, and the read
model ends equal to the pure fold of the log and to the generator's own counts."""

from __future__ import annotations

import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from bench.data import Expected, generate
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.state import tier_of
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.lease import try_lease
from hivemind_memory.projections.store.log import append, tail
from hivemind_memory.projections.store.readmodel import (
    BatchInfo,
    Folder,
    checkpoint,
    project_batch,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import fold_log, write_back
from tests.support.factories import created, ev, used

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


def _drain(f: Folder) -> list[BatchInfo]:
    infos = []
    while (info := f.step()) is not None:
        infos.append(info)
    return infos


def _exactly_once(infos: list[BatchInfo], total: int) -> None:
    """The committed batches (whoever committed them) cover the log once, in order."""
    spans = sorted((parse_pos(i.first), parse_pos(i.last), i.count)
                   for i in infos if i.committed)
    assert sum(n for _, _, n in spans) == total
    assert all(a[1] < b[0] for a, b in pairwise(spans))


@pytest.mark.slow
def test_folder_alone_folds_exactly(store: Any, tmp_path: Path) -> None:
    exp = _ingest(store, tmp_path, 3_000, "a", seed=21)
    f = Folder(store, NS, 97)
    infos = _drain(f)
    assert f.close() is None
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
    log: list[BatchInfo] = []

    def steps(n: int) -> list[bool]:
        got = [f.step() for _ in range(n)]
        assert all(i is not None for i in got)
        log.extend(i for i in got if i is not None)
        return [i.committed for i in got if i is not None]

    assert steps(3) == [True] * 3
    assert f.in_flight  # the commit of the batch after those
    # another projector folds the same next batch as the folder (which has read ahead and
    # folded further): one of them must be refused, and the folder recovers
    other = project_batch(store, NS, 61)
    assert other is not None
    log.append(other)
    outcomes = steps(5)  # (a refusal, the commit sent behind it, then afresh)
    assert (not other.committed or False in outcomes) and outcomes[-1]
    while not f.in_flight:
        steps(1)
    # a replay writes the same state back with a new generation: what the folder folded
    # before it cannot commit (the commit in flight may have run before the replay)
    while not write_back(store, NS, fold_log(store, NS, until=checkpoint(store, NS))):
        pass  # a commit of the folder landed in between: fold again
    outcomes = steps(5)
    assert False in outcomes and outcomes[-1]
    # the script cache is flushed (a Redis restart): the commit loads the script again. The
    # commit in flight is let land first (Redis may otherwise run the flush, sent later from
    # another connection, before it: then that commit is the one to load the script again)
    sent = f._sent
    deadline = time.monotonic() + 30
    while sent is not None and checkpoint(store, NS) != parse_pos(sent.prep.new_checkpoint):
        assert time.monotonic() < deadline, "the commit in flight never landed"
    store.script_flush()
    assert steps(2) == [True, True]
    # events keep arriving while the folder is mid-way and after it caught up
    exp_b = _ingest(store, tmp_path, 700, "b", seed=23)
    log += _drain(f)
    exp_c = _ingest(store, tmp_path, 300, "c", seed=24)
    log += _drain(f)
    assert f.close() is None  # nothing left in flight once caught up
    _exactly_once(log, 3_500)
    _assert_exact(store, [exp_a, exp_b, exp_c])


def test_a_folder_reads_again_the_notes_someone_else_changed(store: Any) -> None:
    append(store, [ev(created(f"n{i}", ns=NS)) for i in range(20)])
    f = Folder(store, NS, 8)
    _drain(f)  # caught up, nothing in flight; the folder keeps the states it committed
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
    log = [info]
    first = f.step()  # the commit A had in flight: run before B took the lease, or refused
    assert first is not None
    log.append(first)
    before = (store.get(keys.checkpoint(NS)), store.hgetall(keys.notes(NS)),
              store.smembers(keys.seen(NS)))
    for _ in range(3):  # fenced: whatever A read ahead or folds again, it writes nothing
        info = f.step()
        assert info is not None and not info.committed
    assert f.close() is None or True
    assert (store.get(keys.checkpoint(NS)), store.hgetall(keys.notes(NS)),
            store.smembers(keys.seen(NS))) == before
    g = Folder(store, NS, 50, b.token, 60_000)
    log += _drain(g)
    g.close()
    _exactly_once(log, 1_000)
    _assert_exact(store, [exp])


def test_a_catch_up_folder_sends_nothing_past_its_target(store: Any, tmp_path: Path) -> None:
    _ingest(store, tmp_path, 1_000, "a", seed=27)
    target = parse_pos(store.xrange(keys.stream(NS), count=300)[-1][0])  # in the 4th batch
    f = Folder(store, NS, 97, until=target)
    infos: list[BatchInfo] = []
    while not infos or parse_pos(infos[-1].last) < target:
        info = f.step()
        assert info is not None and info.committed
        infos.append(info)
    assert not f.in_flight and f.close() is None  # no batch folded past the target
    assert checkpoint(store, NS) == parse_pos(infos[-1].last)
    assert sum(i.count for i in infos) == 4 * 97
