"""A batch's results read back: in input order whatever order the workers publish them in,
in runs of what each round trip found, and the wait for a missing result reading the results
after it in the round trip that ends the wait (``results.wait_results``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import READ_AHEAD, Client
from hivemind_memory.projections.store import results
from tests.support.beats import silent_worker

IDS = [f"t.{i:024x}" for i in range(2 * READ_AHEAD + READ_AHEAD // 2)]


def _body(qid: str) -> bytes:
    return msgspec.json.encode({"query_id": qid, "notes": []})


def _publish(store: Any, qids: Sequence[str]) -> None:
    """What a worker's wave writes: each result and its done marker."""
    results.write_results(store, "t", {q: _body(q) for q in qids}, 60)


def test_a_wave_that_lands_while_the_reader_waits_is_read_in_the_waits_round_trip(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # the second worker's jobs (the batch's end) landed first; the first worker's wave lands
    # just after the reader found its first result missing
    c = Client(store)
    _publish(store, IDS[READ_AHEAD:])
    real = results.read_results
    reads: list[int] = []

    def landing(r: Any, ns: str, qids: Sequence[str]) -> list[bytes | None]:
        got = real(r, ns, qids)
        reads.append(len(qids))
        if len(reads) == 1:
            assert got == [None] * READ_AHEAD
            _publish(store, IDS[:READ_AHEAD])
        return got

    monkeypatch.setattr(results, "read_results", landing)
    with silent_worker(store):  # the shard is served: the reader waits
        runs = list(c.batch_result_runs(IDS, timeout=30))
    assert [b for run in runs for b in run] == [_body(q) for q in IDS]  # input order
    # the wait read the whole first wave: no run of one, no read of its own after it
    assert [len(run) for run in runs] == [READ_AHEAD, READ_AHEAD, READ_AHEAD // 2]
    assert reads == [READ_AHEAD, READ_AHEAD, READ_AHEAD // 2]


def test_results_missing_at_the_deadline_are_timeouts_in_their_places(store: Any) -> None:
    c = Client(store)
    _publish(store, IDS[:3] + IDS[4:6])  # the fourth never comes
    with silent_worker(store):
        got = [msgspec.json.decode(b) for b in c.batch_results(IDS[:6], timeout=1.5)]
    assert [g["query_id"] for g in got] == IDS[:6]
    assert ["error" in g for g in got] == [False, False, False, True, False, False]
    assert got[3]["error"]["code"] == "timeout"
    assert f"query {IDS[3]}: no result within 1.5s" in got[3]["error"]["message"]


def test_a_result_waited_for_without_a_worker_is_the_shards_error_in_its_place(
        store: Any) -> None:
    c = Client(store)
    _publish(store, IDS[:2] + IDS[3:4])
    got = [msgspec.json.decode(b) for b in c.batch_results(IDS[:4], timeout=30)]
    assert [g["query_id"] for g in got] == IDS[:4]
    assert [g.get("error", {}).get("code") for g in got] == [None, None, "shard_unavailable",
                                                              None]
