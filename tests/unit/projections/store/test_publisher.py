"""``results.Publisher``: MULTI blocks with one in flight, each settled (and its callback run)
only once Redis applied it; a failed block raises, and nothing after it is acknowledged."""

from __future__ import annotations

from typing import Any

import pytest

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store import results


def test_blocks_apply_in_order_and_callbacks_run_after_the_reply(store: Any) -> None:
    done: list[str] = []
    with results.Publisher(store) as pub:
        for k in range(3):
            p = pub.pipeline()
            results.stage_result(p, "a", f"a.q{k}", f"body {k}".encode(), 60)
            results.stage_audit(p, "a", f"event {k}".encode())
            pub.send(p, lambda k=k: done.append(f"q{k}"))
            # the block just sent is in flight: its callback has not run yet
            assert done == [f"q{j}" for j in range(k)]
    assert done == ["q0", "q1", "q2"]
    assert [results.read_result(store, "a", f"a.q{k}") for k in range(3)] == \
        [b"body 0", b"body 1", b"body 2"]
    assert [e[1][results.AUDIT_FIELD] for e in store.xrange("hm:{a}:audit")] == \
        [b"event 0", b"event 1", b"event 2"]
    assert results.wait_done(store, "a", "a.q2", 0.1)


def test_a_failed_block_raises_and_runs_no_callback(store: Any) -> None:
    store.set("hm:{a}:audit", b"not a stream")  # XADD onto it fails inside the MULTI
    done: list[str] = []
    pub = results.Publisher(store)
    p = pub.pipeline()
    results.stage_result(p, "a", "a.q0", b"body", 60)
    results.stage_audit(p, "a", b"event")
    pub.send(p, lambda: done.append("q0"))
    with pytest.raises(StoreError, match="WRONGTYPE"):
        pub.close()
    assert done == []
    # the connection went back to the pool: the store still answers
    assert store.get("hm:{a}:audit") == b"not a stream"


def test_an_empty_block_settles_at_once(store: Any) -> None:
    done: list[int] = []
    with results.Publisher(store) as pub:
        pub.send(pub.pipeline(), lambda: done.append(1))
        assert done == [1]
