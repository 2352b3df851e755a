"""The ``--as-of`` boundary, to the microsecond: an event whose ``at`` equals T is included, one a
microsecond later is not. Pinned at the fold (``fold_log(..., as_of=T)``) and end to end
through a query (client -> RQ -> worker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store.log import append
from hivemind_memory.projections.store.rebuild import fold_log
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import run_worker
from tests.support.factories import T0, created, ev, iso, used

T = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)  # not on a whole second
US = timedelta(microseconds=1)


def _log() -> list[dict[str, Any]]:
    """A note created long before T and used at T and at T + 1 us; notes created at T and at
    T + 1 us. Every text matches the query below."""
    return [
        created("base", text="boundary redis base", at=T0),
        created("at-t", text="boundary redis exactly", at=T),
        created("after-t", text="boundary redis later", at=T + US),
        used("base", "u-at", at=T),
        used("base", "u-after", at=T + US),
    ]


@pytest.mark.parametrize(
    ("as_of", "notes", "base_uses", "base_last_used"),
    [
        (T - US, {"base"}, 0, None),
        (T, {"base", "at-t"}, 1, T),
        (T + US, {"base", "at-t", "after-t"}, 2, T + US),
    ],
    ids=["T-1us", "T", "T+1us"],
)
def test_fold_includes_events_at_exactly_as_of_and_not_one_microsecond_later(
    store: Any, as_of: datetime, notes: set[str], base_uses: int,
    base_last_used: datetime | None,
) -> None:
    append(store, [ev(d) for d in _log()])
    proj = fold_log(store, "t", as_of=as_of).projection
    assert set(proj.notes) == notes
    base = proj.notes["base"]
    assert base.uses == base_uses
    assert base.last_used_at == base_last_used
    if "at-t" in notes:
        assert proj.notes["at-t"].created_at == T


def test_fold_without_as_of_sees_everything(store: Any) -> None:
    # the log itself holds every event: the cut above is the as-of rule, nothing else
    append(store, [ev(d) for d in _log()])
    proj = fold_log(store, "t").projection
    assert set(proj.notes) == {"base", "at-t", "after-t"} and proj.notes["base"].uses == 2


def test_query_as_of_includes_events_at_exactly_as_of_and_not_one_microsecond_later(
    store: Any,
) -> None:
    s = Settings()
    rt = runtime.build(s, store)
    runtime.install(rt)
    c = Client(store, settings=s)
    c.append(_log())

    def ask(as_of: datetime) -> dict[str, Any]:
        qid = c.submit_query("t", "boundary redis", 10_000, agent="x", as_of=iso(as_of))
        assert run_worker(rt, burst=True) == 0
        res = c.result(qid, timeout=5)
        assert res["as_of"] == iso(as_of), res
        return res

    at_t = ask(T)
    got = {n["note_id"]: n for n in at_t["notes"]}
    assert set(got) == {"base", "at-t"}  # created at T: in; created at T + 1 us: out
    assert got["base"]["uses"] == 1  # used at T: counted; used at T + 1 us: not
    assert got["at-t"]["age_days"] == 0.0
    later = {n["note_id"]: n for n in ask(T + US)["notes"]}
    assert set(later) == {"base", "at-t", "after-t"} and later["base"]["uses"] == 2
    earlier = {n["note_id"]: n for n in ask(T - US)["notes"]}
    assert set(earlier) == {"base"} and earlier["base"]["uses"] == 0
