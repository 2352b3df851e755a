"""A worker's namespace indexes under a memory budget: the least recently used are evicted
(and loaded again from their snapshot when next asked), and the namespaces that cannot be
held are remembered with the reason, for status, readiness and metrics.

The budget counts what ``projections.ranking.footprint.index_bytes`` measures of each index
(arrays, texts, vectors, the caches an index keeps). An index is measured after every load,
again after the first batch of queries on it (which builds its query caches), then whenever it
has grown by ``REMEASURE_GROWTH``; in between its figure is the last measurement scaled by its
slot count. The budget also counts what the worker keeps for the ranking rules outside the
indexes (``ranker.KeptTexts``: the notes' word sets and passages, bounded by ``kept_bytes``
to ``KEPT_SHARE`` of the budget), passed as ``outside``. The process's own memory
(interpreter, libraries, the embedder's model, one batch's working memory and one load's
transient copies) is not in the budget: RSS stays within budget + that base.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hivemind_memory.projections.ranking.footprint import index_bytes
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.ranking.ranker import KEPT_BYTES
from hivemind_memory.worker.ops.heartbeat import IndexMemory, LoadFailure

MIB = 1 << 20
DEFAULT_BUDGET_FRACTION = 0.25
"""Without ``--memory-budget`` / ``HIVEMIND_MEMORY_BUDGET_MIB``, a worker's budget is this share
of the memory it may use: the cgroup limit of its container when there is one, else the
machine's physical memory."""
DEFAULT_BUDGET_FLOOR_MIB = 64
"""The derived default is never below this."""
REMEASURE_GROWTH = 0.125
"""An index is walked again once its slots grew by this share since its last measurement."""
FAILURES_KEPT = 16
"""Namespaces whose last load failure a worker remembers (the most recent ones)."""
REPORTED = 20
"""The largest held indexes a worker's heartbeat names."""
KEPT_SHARE = 0.25
"""The share of a worker's memory budget its ``ranker.KeptTexts`` (the word sets and passages
the ranking rules keep from batch to batch) may take, at most ``KEPT_BYTES`` (96 MiB as
``entry_bytes`` counts them, the arrays' bytes: budgets from 384 MiB up keep the whole
working set of a dense batch over 10k notes); it counts in the budget."""


def kept_bytes(budget: int) -> int:
    """The bytes a worker's ``KeptTexts`` may hold under a budget of ``budget`` bytes."""
    return max(0, min(KEPT_BYTES, int(budget * KEPT_SHARE)))


@dataclass(slots=True)
class _Measured:
    bytes: int
    slots: int
    before_queries: bool = True
    """Walked before any query ran on it (its query caches, e.g. the english stems, were not
    built yet): ``publish`` walks it again once."""


def machine_memory_bytes(root: Path = Path("/")) -> int | None:
    """The memory this process may use: its cgroup's limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``) when set, else the physical memory; None when neither is
    known."""
    phys: int | None = None
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        phys = None
    for f in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = (root / f).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and (phys is None or int(raw) < phys):
            return int(raw)  # "max" or a v1 "unlimited" (a huge number) leave phys
    return phys


def default_budget_mib(total: int | None = None) -> int:
    """``DEFAULT_BUDGET_FRACTION`` of ``total`` (default: ``machine_memory_bytes()``), at least
    ``DEFAULT_BUDGET_FLOOR_MIB``."""
    total = machine_memory_bytes() if total is None else total
    if total is None:
        return 1024
    return max(DEFAULT_BUDGET_FLOOR_MIB, int(total * DEFAULT_BUDGET_FRACTION) // MIB)


class IndexCache:
    """Namespace -> ``NamespaceIndex``, least recently used first, within ``budget`` bytes."""

    def __init__(self, budget: int, outside: Callable[[], int] = lambda: 0) -> None:
        self.budget = budget
        self.outside = outside
        """The bytes the worker holds outside the indexes that count in the budget too (its
        ``KeptTexts``): the indexes get what they leave."""
        self._held: OrderedDict[str, NamespaceIndex] = OrderedDict()
        self._size: dict[str, _Measured] = {}
        self.evictions = 0
        self.failures: OrderedDict[str, LoadFailure] = OrderedDict()
        """The last load failure of each namespace (cleared when it loads)."""
        self.report = IndexMemory(budget=budget, held=0, namespaces=0)
        """What the heartbeat says (``publish``: written by the thread that answers queries,
        read by the heartbeat's; replaced whole, never changed in place)."""

    # -- the mapping the engine reads --------------------------------------------------
    def __contains__(self, ns: object) -> bool:
        return ns in self._held

    def __len__(self) -> int:
        return len(self._held)

    def __getitem__(self, ns: str) -> NamespaceIndex:
        idx = self._held[ns]
        self._held.move_to_end(ns)
        return idx

    def get(self, ns: str) -> NamespaceIndex | None:
        """The index of ``ns`` if held (it becomes the most recently used)."""
        idx = self._held.get(ns)
        if idx is not None:
            self._held.move_to_end(ns)
        return idx

    def peek(self, ns: str) -> NamespaceIndex | None:
        """The index of ``ns`` if held, left where it stands in the least-recently-used
        order (work that is not a query, such as a snapshot refresh)."""
        return self._held.get(ns)

    def __setitem__(self, ns: str, idx: NamespaceIndex) -> None:
        self._held[ns] = idx
        self._held.move_to_end(ns)
        self._size.pop(ns, None)

    def pop(self, ns: str) -> NamespaceIndex | None:
        """Drop ``ns``'s index (None if not held)."""
        self._size.pop(ns, None)
        return self._held.pop(ns, None)

    def names(self) -> list[str]:
        """Held namespaces, least recently used first."""
        return list(self._held)

    # -- sizes ---------------------------------------------------------------------------
    def measure(self, ns: str) -> int:
        """The bytes of ``ns``'s index (walked, or scaled from its last walk)."""
        idx = self._held[ns]
        slots = len(idx.cols)
        m = self._size.get(ns)
        if m is None or slots > m.slots * (1 + REMEASURE_GROWTH) or slots < m.slots:
            m = self._size[ns] = _Measured(index_bytes(idx), slots)
            return m.bytes
        return m.bytes if slots == m.slots else m.bytes * slots // max(1, m.slots)

    def sizes(self) -> dict[str, int]:
        """Bytes of every held index (as last measured; unmeasured ones measured now)."""
        return {ns: self.measure(ns) for ns in self._held}

    def held_bytes(self) -> int:
        """The bytes of all held indexes."""
        return sum(self.sizes().values())

    def make_room(self, need: int, keep: Iterable[str] = ()) -> list[str]:
        """Evict the least recently used indexes (never those in ``keep``) until the held
        ones plus ``need`` bytes plus ``outside`` fit the budget, or nothing is left to
        evict; returns the evicted namespaces."""
        pinned = set(keep)
        sizes = self.sizes()
        held = sum(sizes.values()) + self.outside()
        out: list[str] = []
        for ns in list(self._held):
            if held + need <= self.budget:
                break
            if ns in pinned:
                continue
            held -= sizes[ns]
            self.pop(ns)
            out.append(ns)
        self.evictions += len(out)
        return out

    # -- failures ------------------------------------------------------------------------
    def failed(self, ns: str, code: str, message: str) -> LoadFailure:
        """Remember that ``ns`` could not be held, and why."""
        f = LoadFailure(ns, code, message, time.time())
        self.failures.pop(ns, None)
        self.failures[ns] = f
        while len(self.failures) > FAILURES_KEPT:
            self.failures.popitem(last=False)
        return f

    def loaded(self, ns: str) -> None:
        """``ns`` is held again: its last failure is over."""
        self.failures.pop(ns, None)

    def settle(self) -> list[str]:
        """After a batch of queries: walk again the indexes measured only before their first
        queries (their query caches are built now), and evict the least recently used (never
        the most recent) until the rest fit; returns the evicted namespaces."""
        for ns, m in list(self._size.items()):
            if m.before_queries:
                idx = self._held[ns]
                self._size[ns] = _Measured(index_bytes(idx), len(idx.cols), False)
        return self.make_room(0, keep=list(self._held)[-1:])

    def publish(self) -> IndexMemory:
        """Refresh ``report`` (what the heartbeat says)."""
        sizes = self.sizes()
        top = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:REPORTED]
        self.report = IndexMemory(budget=self.budget, held=sum(sizes.values()),
                                  namespaces=len(sizes), largest=dict(top),
                                  evictions=self.evictions,
                                  failures=list(self.failures.values()),
                                  outside=self.outside())
        return self.report


def reported(cache: dict[str, Any]) -> IndexMemory | None:
    """The memory report of a runtime's query engine (``Runtime.cache``; None before its
    first query job)."""
    engine = cache.get("query_engine")
    live = getattr(engine, "live", None)
    return live.report if isinstance(live, IndexCache) else None


def too_large_message(ns: str, size: int, budget: int, measured: bool) -> str:
    """The sentence of a ``namespace_too_large`` error."""
    how = "measured" if measured else "estimated from its snapshot"
    return (f"namespace {ns!r} needs {mib(size)} of index memory ({how}), more than this "
            f"worker's memory budget of {mib(budget)}: raise --memory-budget / "
            "HIVEMIND_MEMORY_BUDGET_MIB, or serve it from a worker with a larger budget")


def mib(n: int) -> str:
    """``n`` bytes as MiB with one decimal."""
    return f"{n / MIB:.1f} MiB"
