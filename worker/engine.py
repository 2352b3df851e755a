"""Answering a job's queries in phases over the whole batch: parse every request, catch each
namespace up once, refresh each index once, then rank the queries a wave at a time, each wave's
results and audit events published in one MULTI per namespace while the next wave is ranked."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Literal

import msgspec
import numpy as np
import structlog
from redis.exceptions import RedisError
from rq import Queue

from hivemind_memory.api_stub.protocol.messages import (
    Envelope,
    QueryRequest,
    QueryResult,
    QueryServed,
    digest_bytes,
    effective_config,
    embedding_digest,
    encode,
    error_json,
    ns_of,
    parse_request,
    utcnow,
)
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import WARMING_RETRY_S, CatchUpTimeout, QueryError
from hivemind_memory.events.positions import ZERO, format_pos, parse_pos
from hivemind_memory.projections.ranking.calibrated import limit_for, window_gain
from hivemind_memory.projections.ranking.columns import micros
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.dense import build_dense
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.footprint import index_bytes
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.ranking.rank_result import RankResult, TimeWindowShown
from hivemind_memory.projections.ranking.ranker import (
    BatchMemo,
    KeptTexts,
    allowed_slots,
    rank_index,
)
from hivemind_memory.projections.ranking.render import render
from hivemind_memory.projections.ranking.timewords import Span, Window, question_windows, spans_us
from hivemind_memory.projections.ranking.vectors import QueryVector, query_vector
from hivemind_memory.projections.ranking.why import Shown, Why
from hivemind_memory.projections.store import (
    audit_trail,
    erasure,
    eventdigest,
    results,
    snapshot_refresh,
)
from hivemind_memory.projections.store.index_loader import (
    NO_SNAPSHOT,
    FullLoadNeeded,
    changes_last,
    load_index,
    refresh_index,
    trim_heap,
    write_snapshot,
)
from hivemind_memory.projections.store.index_size import estimate_load_bytes
from hivemind_memory.projections.store.lease import renewing_build_lease, try_build_lease
from hivemind_memory.projections.store.probe import probe
from hivemind_memory.projections.store.readmodel import no_cycle_collection, note_count
from hivemind_memory.projections.store.rebuild import fold_log
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.memory import (
    MIB,
    IndexCache,
    default_budget_mib,
    kept_bytes,
    mib,
    too_large_message,
)
from hivemind_memory.worker.ops import metrics
from hivemind_memory.worker.projector import (
    ensure_projected,
    redaction_enqueuer,
    snapshot_nudger,
)

log = structlog.get_logger("hivemind.query")
AS_OF_CACHE = 4
"""How many ``--as-of`` folds a worker keeps (keyed by namespace, position, time)."""
WAVE = 20
"""Queries ranked before their answers are handed to Redis (``QueryEngine.serve``)."""
REFRESH_TRIES = 5
"""Extra index refreshes per batch while projection commits keep racing the refresh."""
READY_KEEP_S = 30 * WARMING_RETRY_S
"""How long an index a thread loaded waits in ``QueryEngine.ready`` for the query told
``index_warming`` to come back (30 retry hints) before it is dropped, its memory freed."""
PRIME_FLOATS = 2_000_000
"""Cosines (one float per note and query) primed at once per namespace: the query embeddings
of a whole job go in one embedder call and one matrix product while the job's queries times
the namespace's notes stay under this (16 MB); a larger namespace primes fewer queries at a
time (never fewer than a wave)."""


@dataclass(slots=True)
class Pending:
    """One query of a job on its way through the phases."""

    env: Envelope
    ns: str
    """The namespace of its result key (from the query id, so also for a bad request)."""
    digest: str
    """Digest of the config it runs (or would have run) under."""
    req: QueryRequest | None = None
    cfg: RankingConfig | None = None
    body: bytes | None = None
    """The answer, once known (a result or an error object)."""
    result: QueryResult | None = None
    started: float = 0.0
    seen: str = ""
    """Log position of the state it was ranked on (see ``QueryServed.seen``)."""
    before: bool = False
    """Answered and published by an earlier run of its job (then ``body`` is empty and
    nothing is ranked or published again)."""
    why: Why | None = None
    """What its audit entry records about the notes left out."""

    def fail(self, code: str, message: str) -> None:
        """Answer with an error object (the phases after this skip the query)."""
        self.body = error_json(self.env.query_id, code, message)


class IndexUnavailable(QueryError):
    """A namespace's index cannot be held by this worker (the code says why)."""


class QueryEngine:
    """Per-process query state: the live indexes and a small cache of as-of folds."""

    def __init__(self, r: Store, cfg: RankingConfig, settings: Settings,
                 embedder: Embedder | Literal["config"] | None = "config",
                 project_queue: Queue | None = None) -> None:
        self.r = r
        self.project_queue = project_queue
        """Where a catch-up that folded a ``note.erased`` queues its redaction (None: not
        queued; a projection job or the erasing client does it)."""
        self.cfg = cfg
        self.settings = settings
        self.embedder = embedder_for(cfg.embedder) if embedder == "config" else embedder
        """Embeds the notes as indexes load and the queries of calibrated relevance."""
        self.embedder_digest = "" if self.embedder is None else self.embedder.digest()
        budget = settings.memory_budget_mib or default_budget_mib()
        self.kept = KeptTexts(kept_bytes(budget * MIB))
        """The notes' word sets and passages the ranking rules derive from their texts, kept
        from batch to batch (``ranker.KeptTexts``: tables held weakly, bounded to a share of
        the memory budget and counted in it)."""
        self.live = IndexCache(budget * MIB, outside=lambda: self.kept.held + sum(
            self.ready_bytes.copy().values()))
        """The namespaces' live indexes, least recently used evicted past the memory budget
        (``worker.memory``) less what ``kept`` and ``ready`` hold."""
        self.as_of: OrderedDict[tuple[str, str, datetime], NamespaceIndex] = OrderedDict()
        self.fences: dict[str, bytes | None] = {}
        """Per namespace: the erasure fence as this engine last read it. When it moves, an
        erasure ran: the as-of folds kept of the namespace are dropped (they may hold the
        log before its rewrite), and answers published meanwhile are checked."""
        self.erased_filed: dict[str, tuple[int, dict[str, str]]] = {}
        """Per namespace: how many erased texts were filed, and their digests -> note."""
        self.secret: bytes | None = None
        """The store's digest secret (``eventdigest.store_key``), read on first need."""
        self.recorded: dict[str, tuple[set[str], set[str]]] = {}
        self.emb_filed: dict[str, dict[str, int]] = {}
        """Per namespace: filed embedding digest -> ms of its latest filing known here."""
        """Per namespace: config and embedding digests already filed (read once)."""
        self.base_digest = cfg.digest()
        """``cfg.digest()`` (the config is immutable; a query without overrides runs it)."""
        self.warm_builds: dict[str, threading.Thread] = {}
        """Per namespace: the thread building its index and snapshot (``_warming``), or
        reading its snapshot (``_loaded``)."""
        self.ready: dict[str, NamespaceIndex] = {}
        """Per namespace: an index a thread of ``warm_builds`` loaded, for the next query to
        take (then held within the budget like any other)."""
        self.ready_at: dict[str, float] = {}
        """When each index in ``ready`` was left there (``clock``)."""
        self.clock: Callable[[], float] = time.monotonic
        """The clock ``ready``'s entries age by (a test sets another)."""
        self.ready_bytes: dict[str, int] = {}
        """The bytes of each index in ``ready`` (measured by its thread): held by the worker
        until a query takes it, so they count in the budget (``live.outside``)."""
        self.unread: set[str] = set()
        """Namespaces whose snapshot a thread could not go on from (the next query takes the
        usual path: a full load, inline or in a thread)."""
        self.dense_builds: dict[str, threading.Thread] = {}
        """Per namespace: the thread building its index's dense candidate stage."""

    def serve(self, envelopes: Sequence[Envelope]) -> dict[str, int]:
        """Answer a job's queries and publish the answers; every query gets a result or an
        error object, one broken query never takes the batch down. Answers go out a wave at
        a time (``WAVE``), one wave in flight while the next is ranked."""
        with no_cycle_collection(), results.Publisher(self.r) as pub:  # structs by the 1,000
            todo = self.answer(envelopes, lambda wave: self._publish(wave, pub))
        self._evict(self.live.settle())
        self.live.publish()
        ok = sum(q.result is not None for q in todo)
        before = sum(q.before for q in todo)
        return {"ok": ok, "failed": len(todo) - ok - before, "already": before}

    def answer(self, envelopes: Sequence[Envelope],
               publish: Callable[[list[Pending]], None] | None = None) -> list[Pending]:
        """The phases before publishing: parse all, catch up and refresh once per namespace,
        rank each (``publish``, if given, is handed each wave of ``WAVE`` queries once they
        have their answers). Every returned query has its ``body``."""
        todo = [self._parse(env) for env in envelopes]
        current = self._catch_up(todo)
        live = self._refresh(todo, current)
        for idx in live.values():
            self._start_dense(idx)
        now = utcnow()  # the clock, read once for the batch, after catching up
        memo = BatchMemo(self.kept)  # the indexes do not change until the next refresh
        primed: dict[str, int] = {}  # per namespace: queries of ``todo`` primed so far
        for start in range(0, len(todo), WAVE):
            wave = todo[start:start + WAVE]
            self._prime(todo, start, live, memo, primed)
            for q in wave:
                if q.body is None:
                    self._rank(q, live, now, memo)
            if publish is not None:
                publish(wave)
        return todo

    def _prime(self, todo: list[Pending], start: int, live: dict[str, NamespaceIndex],
               memo: BatchMemo, primed: dict[str, int]) -> None:
        """The query embeddings of the live calibrated queries from ``todo[start]`` on: for
        each namespace with a query of this wave not primed yet, one embedder call and one
        matrix product for the wave's queries and as many of the next as ``PRIME_FLOATS``
        allows (the whole job at 10k notes; priming a namespace again replaces what it had).
        ``primed``: how far each namespace got."""
        if self.embedder is None:
            return
        def calibrated(q: Pending) -> str | None:  # its text, if it is primed at all
            if q.body is None and q.req is not None and q.cfg is not None and \
                    q.req.as_of is None and q.cfg.relevance == "calibrated" and q.ns in live:
                return q.req.text
            return None

        stop = min(start + WAVE, len(todo))
        texts: dict[str, list[str]] = {}
        wave = [(i, todo[i], calibrated(todo[i])) for i in range(start, stop)]
        need = {q.ns for i, q, text in wave if text is not None and primed.get(q.ns, 0) <= i}
        for _, q, text in wave:  # the wave's own queries of those namespaces
            if text is not None and q.ns in need:
                texts.setdefault(q.ns, []).append(text)
                primed[q.ns] = stop
        full = {ns for ns in need if len(texts[ns]) * len(live[ns].cols) >= PRIME_FLOATS}
        for i in range(stop, len(todo)):  # then as many of the next as fit
            if len(full) == len(need):
                break
            q = todo[i]
            text = calibrated(q)
            if text is not None and q.ns in need and q.ns not in full:
                group = texts[q.ns]
                group.append(text)
                primed[q.ns] = i + 1
                if len(group) * len(live[q.ns].cols) >= PRIME_FLOATS:
                    full.add(q.ns)
        for ns, group in texts.items():
            if live[ns].dense_ready(self.cfg):
                memo.prime_vectors(live[ns], group, self.embedder)
            else:
                memo.prime_cosines(live[ns], group, self.embedder)

    def _start_dense(self, idx: NamespaceIndex) -> None:
        """Build the dense candidate stage of a large namespace's index in a thread, off the
        queries' path (they score every note until it is attached); once per table."""
        cfg, got, cols = self.cfg, idx.derived, idx.cols
        if cfg.relevance != "calibrated" or got is None or idx.ns in self.dense_builds or \
                idx.indexed() < cfg.candidates.scan_max_notes or idx.dense_ready(cfg):
            return
        n = len(cols)
        ints = got.mat[:n].astype(np.int8)
        has = got.done(n) & (got.norm[:n] > 0) & cols.live[:n]
        digest, settings = got.digest, cfg.candidates

        def build() -> None:
            try:
                t = time.process_time()
                attached = idx.attach_dense(build_dense(ints, has, settings, digest), cols)
                log.info("dense_index_built", ns=idx.ns, notes=int(has.sum()),
                         attached=attached, cpu_s=round(time.process_time() - t, 2))
            except Exception:  # a failed build leaves the namespace scanned, as before
                log.exception("dense_index_failed", ns=idx.ns)
            finally:
                self.dense_builds.pop(idx.ns, None)

        th = self.dense_builds[idx.ns] = threading.Thread(target=build, daemon=True,
                                                           name=f"dense-{idx.ns}")
        th.start()

    def wait_dense(self, ns: str, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for the dense build of ``ns`` to end; True when none
        is running any more."""
        th = self.dense_builds.get(ns)
        if th is not None:
            th.join(timeout)
        return ns not in self.dense_builds

    def _parse(self, env: Envelope) -> Pending:
        q = Pending(env, ns="", digest=self.base_digest, started=time.perf_counter())
        try:
            q.ns = ns_of(env.query_id)
            q.req = parse_request(env.request)
            q.cfg = effective_config(self.cfg, q.req.config)
            q.digest = self.base_digest if q.cfg is self.cfg else q.cfg.digest()
            if q.req.ns != q.ns:
                raise QueryError("invalid_request", f"query id {env.query_id!r} does not "
                                 f"belong to namespace {q.req.ns!r}")
        except QueryError as exc:
            q.fail(exc.code, exc.message)
        return q

    def _catch_up(self, todo: list[Pending]) -> set[str]:
        """Project each namespace once, up to the newest position its live queries saw.

        One round trip per namespace first (``probe``). Queries that already have a result
        are left out (``Pending.before``): a job that runs again (its worker died, or a wave's
        MULTI failed after earlier waves went out) does not answer twice what it published,
        audit event included (a wave's results and audit events go in one MULTI). When the
        checkpoint is already past the live queries nothing is projected, and when the live
        index has folded in the newest changes entry too, the namespace is returned (its index
        is current: no refresh needed)."""
        pending: dict[str, list[Pending]] = {}
        for q in todo:
            if q.body is None:
                pending.setdefault(q.ns, []).append(q)
        current: set[str] = set()
        for ns, group in sorted(pending.items()):
            got = probe(self.r, ns, [q.env.query_id for q in group])
            self._fence_seen(ns, got.fence)
            live: list[Pending] = []
            for q, done in zip(group, got.answered, strict=True):
                if done:
                    q.before, q.body = True, b""
                elif q.req is not None and q.req.as_of is None:
                    live.append(q)
            if not live:
                continue
            target = max(parse_pos(q.env.position) for q in live)
            if got.checkpoint >= target:
                idx = self.live.get(ns)
                if idx is not None and idx.changes_seen == got.last_change:
                    current.add(ns)
                continue
            try:
                pq = self.project_queue
                ensure_projected(self.r, ns, target, self.settings,
                                 on_erased=None if pq is None else redaction_enqueuer(pq, ns),
                                 on_committed=None if pq is None
                                 else snapshot_nudger(self.r, pq, ns))
            except CatchUpTimeout as exc:
                for q in live:
                    q.fail("catch_up_timeout", str(exc))
        return current

    def _refresh(self, todo: list[Pending], current: set[str]) -> dict[str, NamespaceIndex]:
        """Refresh the live index of each namespace that has a live query left, once (not
        those ``current`` names: nothing changed since their index last caught up), within
        the memory budget: least recently used indexes are evicted to make room (never one
        this batch uses), and a namespace that cannot be held has its live queries answered
        at once with the reason (``namespace_too_large``, ``worker_out_of_memory``,
        ``index_load_failed``)."""
        self._drop_stale_ready()
        out: dict[str, NamespaceIndex] = {}
        failed: dict[str, tuple[str, str]] = {}
        for q in todo:
            if q.body is None and q.req is not None and q.req.as_of is None \
                    and q.ns not in out and q.ns not in failed:
                if q.ns in current and q.ns in self.live:
                    out[q.ns] = self.live[q.ns]
                    continue
                try:
                    out[q.ns] = self._hold(q.ns, out)
                except IndexUnavailable as exc:
                    failed[q.ns] = (exc.code, exc.message)
        for q in todo:
            if q.body is None and q.req is not None and q.req.as_of is None and q.ns in failed:
                q.fail(*failed[q.ns])
        self._evict(self.live.make_room(0, keep=out))  # what a job of many namespaces held
        return out

    def _hold(self, ns: str, using: dict[str, NamespaceIndex]) -> NamespaceIndex:
        """``ns``'s live index, loaded or refreshed, measured and within the budget (room
        made by evicting the least recently used of those not in ``using``); raises
        ``IndexUnavailable`` when it cannot be."""
        cache = self.live
        idx = cache.get(ns)
        if idx is None:
            need = estimate_load_bytes(self.r, ns)  # None: no snapshot, a full build (below)
            if need is not None and need > cache.budget:
                self._take_ready(ns)
                raise self._unavailable(ns, "namespace_too_large", too_large_message(
                    ns, need, cache.budget, measured=False))
            loaded = self._loaded(ns, need)
            self._evict(cache.make_room(need or 0, keep=using))
            idx = cache[ns] = loaded if loaded is not None else NamespaceIndex(ns)
        full, part = idx.full_loads, idx.incremental_notes
        try:
            self._refresh_live(ns, idx)
            for _ in range(REFRESH_TRIES):
                # a batch committed between reading the changes and the notes leaves
                # some notes newer than the checkpoint: refresh until nothing moved, so
                # the index is exactly the log up to its checkpoint (audit replay)
                if idx.changes_seen is None or changes_last(self.r, ns) == idx.changes_seen:
                    break
                self._refresh_live(ns, idx)
        except IndexUnavailable:  # its full build went to a thread: nothing held meanwhile
            cache.pop(ns)
            del idx
            trim_heap()
            raise
        except MemoryError:
            cache.pop(ns)
            del idx
            trim_heap()
            raise self._unavailable(ns, "worker_out_of_memory", (
                f"this worker ran out of memory loading namespace {ns!r} (holding "
                f"{len(cache)} other namespaces, {mib(cache.held_bytes())} of its "
                f"{mib(cache.budget)} budget): give it a smaller --memory-budget, more "
                "memory, or fewer namespaces")) from None
        except RedisError:
            cache.pop(ns)
            raise
        except Exception as exc:  # a load that fails for another cause says which
            cache.pop(ns)
            log.exception("index_load_failed", ns=ns)
            raise self._unavailable(ns, "index_load_failed", (
                f"this worker could not load namespace {ns!r}: {type(exc).__name__}: "
                f"{exc}")) from None
        if idx.full_loads != full or idx.incremental_notes != part:
            metrics.observe_index_load(ns, full=idx.full_loads != full)
        size = cache.measure(ns)
        if size > cache.budget:
            cache.pop(ns)
            trim_heap()
            raise self._unavailable(ns, "namespace_too_large", too_large_message(
                ns, size, cache.budget, measured=True))
        cache.loaded(ns)
        return idx

    def _loaded(self, ns: str, need: int | None) -> NamespaceIndex | None:
        """The index a thread loaded for ``ns`` (then taken), or None for the query job to
        load inline: a namespace without a snapshot (the full-load gate decides, ``_warming``)
        or one with fewer than ``snapshot_inline_max_notes`` notes. A larger one's snapshot is
        read by a thread (``_read``) and its queries get ``index_warming`` at once meanwhile,
        so the first query after a worker restart never waits seconds for the read."""
        if ns in self.warm_builds:
            raise _warming_error(ns)
        got = self._take_ready(ns)  # a thread leaves it there before it leaves warm_builds
        if got is not None:
            return got
        if need is None or ns in self.unread or \
                note_count(self.r, ns) < self.settings.snapshot_inline_max_notes:
            return None
        th = threading.Thread(target=self._read, args=(ns,), daemon=True, name=f"read-{ns}")
        self.warm_builds[ns] = th
        th.start()
        log.info("snapshot_read_started", ns=ns)
        raise _warming_error(ns)

    def _keep_ready(self, ns: str, idx: NamespaceIndex) -> None:
        """Leave ``idx``, loaded by a thread, for ``ns``'s next query, counted in the budget."""
        self.ready_bytes[ns] = index_bytes(idx)
        self.ready_at[ns] = self.clock()
        self.ready[ns] = idx

    def _take_ready(self, ns: str) -> NamespaceIndex | None:
        """The index a thread left for ``ns`` (no longer counted outside the cache)."""
        got = self.ready.pop(ns, None)
        self.ready_bytes.pop(ns, None)
        self.ready_at.pop(ns, None)
        return got

    def _drop_stale_ready(self) -> None:
        """Drop the indexes left in ``ready`` longer than ``READY_KEEP_S`` ago: the queries
        told ``index_warming`` never came back for them, and each held memory the budget
        counts (a later query of the namespace reads its snapshot again)."""
        now = self.clock()
        for ns, at in list(self.ready_at.items()):
            if now - at > READY_KEEP_S:
                self._take_ready(ns)
                log.info("ready_index_dropped", ns=ns, waited_s=round(now - at, 1))

    def _read(self, ns: str) -> None:
        """``_loaded``'s thread: the snapshot read and brought up to date incrementally (never
        a full load: that is the build's, under its lease), left in ``ready``."""
        t = time.process_time()
        try:
            idx = NamespaceIndex(ns)
            refresh_index(self.r, idx, self.embedder, allow_full=False)
            self._keep_ready(ns, idx)
            self.unread.discard(ns)
            log.info("snapshot_read", ns=ns, notes=idx.indexed(),
                     cpu_s=round(time.process_time() - t, 2))
        except FullLoadNeeded as exc:  # the next query goes the full-load way
            self.unread.add(ns)
            log.info("snapshot_unusable", ns=ns, why=exc.why)
        except Exception:  # likewise, with the cause in the log
            self.unread.add(ns)
            log.exception("snapshot_read_failed", ns=ns)
        finally:
            self.warm_builds.pop(ns, None)

    def _refresh_live(self, ns: str, idx: NamespaceIndex) -> None:
        """``refresh_index`` for a query job: incremental (from the index, or from a newer
        snapshot), and a full load inline only for a namespace small enough
        (``warm_inline_max_notes``); a larger one is built in a thread while its queries get
        ``index_warming`` (``_warming``)."""
        def inline(why: str) -> bool:  # or raises index_warming, the build in a thread
            log.info("index_full_load_needed", ns=ns, why=why)
            self._warming(ns)
            return True

        refresh_index(self.r, idx, self.embedder, allow_full=inline)

    def _warming(self, ns: str) -> None:
        """Raise ``index_warming`` for a namespace without a snapshot that is too large to
        build inside a query job (``warm_inline_max_notes``), having started its build in a
        thread of this worker unless another worker holds the build lease; the build writes
        the snapshot, which the next query loads. Smaller namespaces return (built inline)."""
        th = self.warm_builds.get(ns)
        if th is None:
            notes = note_count(self.r, ns)
            if notes < self.settings.warm_inline_max_notes:
                return
            token = os.urandom(8).hex()
            if try_build_lease(self.r, ns, token):
                th = threading.Thread(target=self._build, args=(ns, token), daemon=True,
                                      name=f"warm-{ns}")
                self.warm_builds[ns] = th
                th.start()
                log.info("index_build_started", ns=ns, notes=notes)
        raise _warming_error(ns)

    def _build(self, ns: str, token: str) -> None:
        """A full load of ``ns`` that writes its snapshot (``_warming``'s thread), its lease
        renewed while it runs; the index is left in ``ready`` for the next query to take
        (measured against the memory budget then, like a snapshot read)."""
        t = time.process_time()
        lease = renewing_build_lease(self.r, ns, token)
        try:
            idx = NamespaceIndex(ns)
            load_index(self.r, idx, embedder=self.embedder)
            log.info("index_built", ns=ns, notes=idx.indexed(),
                     cpu_s=round(time.process_time() - t, 2))
            self._keep_ready(ns, idx)
            self.unread.discard(ns)
        except Exception:  # the next query starts another build
            log.exception("index_build_failed", ns=ns)
        finally:
            lease.stop()
            self.warm_builds.pop(ns, None)

    def refresh_snapshot(self, ns: str) -> dict[str, Any]:
        """Bring ``ns``'s stored index snapshot up to the read model, off every query's path
        (the ``refresh_snapshot`` job ``projector.snapshot_nudger`` queues): from this
        worker's live index when it holds one, else the stored snapshot read and refreshed
        incrementally. A full build only when there is no usable snapshot and the namespace
        is large enough that a query would wait for one (``warm_inline_max_notes``), or the
        changes stream was trimmed past it. Under the build lease (renewed while it runs):
        a namespace being built elsewhere is left to that build."""
        snapshot_refresh.clear_queued(self.r, ns)  # commits from now on may queue the next
        token = os.urandom(8).hex()
        if not try_build_lease(self.r, ns, token):
            return {"ns": ns, "status": "busy"}
        lease = renewing_build_lease(self.r, ns, token)
        t = time.process_time()
        try:
            snapshot_refresh.reset_count(self.r, ns)
            live = self.live.peek(ns)  # a refresh is not a use: LRU order is the queries'
            idx = live if live is not None else NamespaceIndex(ns)
            status = "refreshed"
            try:
                refresh_index(self.r, idx, self.embedder, allow_full=False)
            except FullLoadNeeded as exc:
                if exc.why == NO_SNAPSHOT and \
                        note_count(self.r, ns) < self.settings.warm_inline_max_notes:
                    return {"ns": ns, "status": "small"}  # a query builds it inline
                load_index(self.r, idx, embedder=self.embedder)  # writes the snapshot
                status = "built"
            else:
                write_snapshot(self.r, idx)
            log.info("snapshot_refreshed", ns=ns, status=status, notes=idx.indexed(),
                     changes_seen=format_pos(idx.changes_seen or ZERO),
                     cpu_s=round(time.process_time() - t, 2))
            return {"ns": ns, "status": status, "notes": idx.indexed()}
        finally:
            lease.stop()
            if ns not in self.live:
                trim_heap()

    def wait_warm(self, ns: str, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for this worker's build of ``ns`` to end; True when
        none is running any more."""
        th = self.warm_builds.get(ns)
        if th is not None:
            th.join(timeout)
        return ns not in self.warm_builds

    def _evict(self, evicted: list[str]) -> None:
        if evicted:
            log.info("indexes_evicted", namespaces=evicted, budget=self.live.budget)
            metrics.observe_evictions(len(evicted))
            trim_heap()

    def _unavailable(self, ns: str, code: str, message: str) -> IndexUnavailable:
        self.live.failed(ns, code, message)
        metrics.observe_load_failure(ns, code)
        log.warning("index_unavailable", ns=ns, code=code, message=message)
        return IndexUnavailable(code, message)

    def _as_of_index(self, req: QueryRequest, position: str) -> NamespaceIndex:
        """The index of the log prefix up to ``position``, events with ``at`` <= as_of."""
        assert req.as_of is not None
        key = (req.ns, position, req.as_of)
        hit = self.as_of.get(key)
        if hit is not None:
            self.as_of.move_to_end(key)
            return hit
        rb = fold_log(self.r, req.ns, until=parse_pos(position), as_of=req.as_of)
        idx = build_index(req.ns, rb.projection.notes, self.embedder)
        self.as_of[key] = idx
        while len(self.as_of) > AS_OF_CACHE:
            self.as_of.popitem(last=False)
        return idx

    def _rank(self, q: Pending, live: dict[str, NamespaceIndex], now: datetime,
              memo: BatchMemo | None = None) -> None:
        assert q.req is not None and q.cfg is not None
        try:
            if q.req.as_of is None:
                idx, at = live[q.ns], now
                q.seen = format_pos(idx.checkpoint)
            else:
                idx, at = self._as_of_index(q.req, q.env.position), q.req.as_of
                q.seen = format_pos(parse_pos(q.env.position))
            ranked = run_rank(idx, q.req, q.cfg, at, memo, self.settings.audit_left_out,
                              self.embedder)
            q.result = to_result(q.env.query_id, q.req, at, ranked, empty=not len(idx.cols))
            q.why = ranked.why
            q.body = encode(q.result)
        except QueryError as exc:
            q.fail(exc.code, exc.message)
        except Exception as exc:  # one broken query must not take the batch down
            log.exception("query_failed", query_id=q.env.query_id)
            q.fail("internal", f"{type(exc).__name__}: {exc}")

    def _recorded(self, ns: str) -> tuple[set[str], set[str]]:
        """The namespace's filed config and embedding digests (read on first use; two
        workers may both file a new one, which readers take as one)."""
        got = self.recorded.get(ns)
        if got is None:
            got = self.recorded[ns] = audit_trail.recorded(self.r, ns)
        return got

    def _publish(self, todo: list[Pending], pub: results.Publisher) -> None:
        """Every result, done marker and audit event of a wave: one MULTI per namespace (one
        slot), sent by ``pub``; logged and counted once Redis has applied it."""
        ttl = self.settings.result_ttl_seconds
        by_ns: dict[str, list[Pending]] = {}
        for q in todo:
            if not q.before:
                by_ns.setdefault(q.ns or results.INVALID_NS, []).append(q)
        served_at = utcnow()
        now_ms = int(served_at.timestamp() * 1000)
        min_id = self.settings.audit_min_id(now_ms)
        emb_min_id = self.settings.embedding_min_id(now_ms)
        stale = None if min_id is None else int(min_id.split("-")[0])
        base = self.base_digest
        for ns, group in sorted(by_ns.items()):
            p = pub.pipeline()
            configs: dict[str, RankingConfig] = {}
            embeddings: dict[str, list[float]] = {}
            for q in group:
                assert q.body is not None
                results.stage_result(p, ns, q.env.query_id, q.body, ttl)
                if q.result is None or q.req is None or q.cfg is None:
                    continue
                configs[q.digest] = q.cfg
                configs[base] = self.cfg
                emb = ""
                if q.req.embedding is not None:
                    emb = embedding_digest(q.req.embedding)
                    embeddings[emb] = q.req.embedding
                results.stage_audit(p, ns, encode(served(
                    q.result, q.env.position, q.digest, req=q.req, body=q.body, seen=q.seen,
                    base_digest=base, embedding=emb, served_at=served_at, why=q.why,
                    embedder=self.embedder_digest if q.cfg.relevance == "calibrated" else "")),
                    min_id)
            new_cfg: dict[str, RankingConfig] = {}
            new_emb: dict[str, list[float]] = {}
            if configs:
                have_cfg, have_emb = self._recorded(ns)
                new_cfg = {d: c for d, c in sorted(configs.items()) if d not in have_cfg}
                filed = self.emb_filed.get(ns)
                if filed is None and stale is not None and embeddings:
                    filed = self.emb_filed[ns] = audit_trail.embedding_filings(self.r, ns)
                new_emb = {d: e for d, e in sorted(embeddings.items()) if d not in have_emb
                           or (stale is not None and filed is not None
                               and filed.get(d, 0) < stale)}
                for digest, cfg in new_cfg.items():
                    audit_trail.stage_config(p, ns, digest, encode(cfg))
                for digest, vec in new_emb.items():
                    audit_trail.stage_embedding(p, ns, digest, encode(vec), emb_min_id)
                    if filed is not None:
                        filed[digest] = now_ms
            if ns != results.INVALID_NS:
                erasure.stage_fence_read(p, ns)  # read with the writes, atomically
            pub.send(p, partial(self._published, ns, group, new_cfg, new_emb),
                     None if ns == results.INVALID_NS else partial(self._after_erasure, ns,
                                                                   group))

    def _fence_seen(self, ns: str, fence: bytes | None) -> bool:
        """Note the namespace's erasure fence as read now; True when it moved since (its
        kept as-of folds are dropped then)."""
        if ns in self.fences and self.fences[ns] == fence:
            return False
        known = ns in self.fences
        self.fences[ns] = fence
        for key in [k for k in self.as_of if k[0] == ns]:
            del self.as_of[key]
        return known or fence is not None

    def _redact_quotes(self, ns: str, group: list[Pending], filings: int) -> None:
        """A query whose text is a version of an erased note (one that ran while the note was
        erased, or one sent after) published that text (audit entry, result, embedding): the
        keyed digests the erasures filed (``keys.erased_texts``, ``filings`` of them as of
        the wave's write, read again when that count moves) find it, and the redaction runs
        again for those notes, so the first erasure suffices."""
        if not filings:
            return
        known = self.erased_filed.get(ns)
        if known is None or known[0] != filings:
            known = self.erased_filed[ns] = (filings, erasure.filed_texts(self.r, ns))
        if self.secret is None:
            self.secret = eventdigest.store_key(self.r)
        quoted = erasure.quoted_in(known[1], self.secret, [
            q.req.text for q in group if q.req is not None and q.req.text])
        if quoted:
            erased, _ = erasure.erased_notes(self.r, ns, quoted)
            if erased:
                log.info("quotes_redacted", ns=ns, notes=erased)
                erasure.redact(self.r, ns, erased)

    def _after_erasure(self, ns: str, group: list[Pending], replies: list[Any]) -> None:
        """A wave's MULTI went through; its last reply is the erasure fence as of that
        write. If an erasure ran while the wave was ranked, an answer may show content it
        erased after sweeping the result keys: those answers become ``erased`` errors."""
        fence = replies[-1] if replies else None
        filings = int(replies[-2]) if len(replies) > 1 else 0
        self._redact_quotes(ns, group, filings)
        if not self._fence_seen(ns, None if fence is None else bytes(fence)):
            return
        shown = sorted({n.note_id for q in group if q.result is not None
                        for n in q.result.notes})
        if not shown:
            return
        erased, _ = erasure.erased_notes(self.r, ns, shown)
        if erased:
            log.info("answers_redacted", ns=ns, notes=erased)
            erasure.redact_results(self.r, ns, erased)

    def _published(self, ns: str, group: list[Pending], new_cfg: dict[str, RankingConfig],
                   new_emb: dict[str, list[float]]) -> None:
        """After a namespace's MULTI went through: the digests it filed are known from now
        on, and each query is logged and counted."""
        if new_cfg or new_emb:
            have_cfg, have_emb = self._recorded(ns)
            have_cfg.update(new_cfg)
            have_emb.update(new_emb)
        ok_n = 0
        durations: list[float] = []
        for q in group:
            seconds = time.perf_counter() - q.started
            ok_n += q.result is not None
            durations.append(round(seconds * 1000, 2))
            metrics.LATENCY.observe(seconds)
        # one line per namespace and wave (a line per query cost ~75 us, 4-5 % of a query)
        log.info("queries_served", ns=ns, query_ids=[q.env.query_id for q in group],
                 notes=[len(q.result.notes) if q.result else 0 for q in group],
                 duration_ms=durations, failed=len(group) - ok_n)
        for ok, n in ((True, ok_n), (False, len(group) - ok_n)):
            if n:
                metrics.observe_queries(ns, ok, n)


def _warming_error(ns: str) -> IndexUnavailable:
    return IndexUnavailable("index_warming", (
        f"namespace {ns!r}'s index is being loaded (a first load, a worker restart, a new "
        f"embedder, or a changes stream trimmed past its snapshot); retry in "
        f"{WARMING_RETRY_S} s"))


def run_rank(idx: NamespaceIndex, req: QueryRequest, cfg: RankingConfig,
             now: datetime, memo: BatchMemo | None = None, why_limit: int = 0,
             embedder: Embedder | None = None) -> RankResult:
    """Relevance over the index, then the pure ranking pipeline (``memo``: what the queries
    of one batch share: recency, the query words' BM25 parts, the query embeddings and
    cosines, the returned notes' texts; ``why_limit``: how many left-out notes the result's
    ``why`` records). ``embedder``: the index's, for the query's vector under calibrated
    relevance (unless ``memo`` has its cosines already)."""
    cosine = None
    query: QueryVector | None = None
    if cfg.relevance == "calibrated" and embedder is not None and idx.derived is not None:
        if req.embedding is None and idx.dense_ready(cfg):  # candidates, not every note
            query = None if memo is None else memo.vector(idx, req.text)
            if query is None:
                query = query_vector(embedder.embed([req.text])[0])
        else:
            cosine = None if memo is None else memo.cosines(idx, req.text)
            if cosine is None:
                got = idx.query_cosines(embedder.embed([req.text]))
                cosine = None if got is None else got[:, 0]
    allowed = allowed_slots(idx.cols, req.conditions(), micros(now), cfg)
    cal = cfg.calibration
    wins = (question_windows(req.text, now, cal) if cfg.relevance == "calibrated"
            and (cal.time_window_weight > 0 or req.explain) else [])
    spans = spans_us(wins)
    slots, rel = idx.relevance_slots(req.text, req.embedding, cfg, req.agent,
                                     None if memo is None else memo.terms(idx.cols),
                                     cosine, limit_for(cfg, req.budget), query,
                                     allowed, spans if cal.time_window_weight > 0 else ())
    res = rank_index(idx, slots, rel, agent=req.agent, now=now, budget=req.budget, cfg=cfg,
                     explain=req.explain, memo=memo, why_limit=why_limit,
                     rendered=req.context, id_prefix=req.id_prefix, allowed=allowed,
                     query=req.text)
    if req.explain and wins:
        res = msgspec.structs.replace(res, time_windows=shown_windows(idx, req.agent, wins,
                                                                      spans, res, cfg))
    return res


def shown_windows(idx: NamespaceIndex, agent: str, wins: list[Window], spans: list[Span],
                  res: RankResult, cfg: RankingConfig) -> list[TimeWindowShown]:
    """What ``explain`` shows of the time windows ``wins`` a question named: each window,
    the most logit a note written in it gained (``calibrated.window_gain``: on the named
    days; 0 with the signal off or no note in it; a question naming two times shows each
    its own) and the candidates of ``res`` written in it (each note once, in ``res``'s
    order: a long note's passages are candidates of their own)."""
    n = int(idx.cols.visible(agent).sum())
    inside, fit = idx.in_windows(agent, spans)
    gain = window_gain(fit, n, cfg.calibration)
    t = idx.cols.created_us[inside]
    out = []
    for w, s in zip(wins, spans, strict=True):
        mine = gain[(t >= s.start) & (t < s.end)]
        top = round(float(mine.max()), 6) if len(mine) else 0.0
        out.append(TimeWindowShown(w.named.words, w.start, w.end, top,
                                   list(dict.fromkeys(c.note_id for c in res.candidates
                                                      if w.start <= c.created_at < w.end))))
    return out


def to_result(query_id: str, req: QueryRequest, now: datetime, res: RankResult,
              empty: bool = False) -> QueryResult:
    """The contract's result object. ``empty``: the state it was ranked on has no note at
    all (the answer then carries a ``hint``: a mistyped namespace looks like this)."""
    return QueryResult(query_id=query_id, ns=req.ns, agent=req.agent, text=req.text,
                       as_of=now, budget=req.budget, used=res.used, method=res.method,
                       notes=res.notes, upper_bound=res.upper_bound,
                       candidates=list(res.candidates) if req.explain else None,
                       context=render(((n.note_id, n.created_at, n.text) for n in res.notes),
                                      [n.passage for n in res.notes])
                       if req.context else None,
                       hint=no_notes_hint(req) if empty else None,
                       nothing_relevant=res.nothing_relevant,
                       unknown_words=res.unknown_words or None,
                       time_windows=res.time_windows if req.explain and res.time_windows
                       else None)


def no_notes_hint(req: QueryRequest) -> str:
    """The ``hint`` of an answer from a namespace without a single note."""
    if req.as_of is not None:
        return (f"namespace {req.ns!r} had no notes as of {req.as_of.isoformat()} "
                "(check the namespace's name and the time)")
    return (f"namespace {req.ns!r} has no notes: no note was ever written to it (check the "
            "namespace's name)")


def served(res: QueryResult, position: str, config_digest: str, *, req: QueryRequest,
           body: bytes, seen: str, base_digest: str, embedding: str,
           served_at: datetime, why: Why | None = None, embedder: str = "") -> QueryServed:
    """The audit event of a served query: what it was shown and all it takes to re-run it
    (``worker.audit.reproduce``), and why (``why``: the left-out notes; the shown notes' signals
    are added here)."""
    return QueryServed(query_id=res.query_id, agent=res.agent, text=res.text, as_of=res.as_of,
                       budget=res.budget, position=position, config_digest=config_digest,
                       method=res.method, chosen=[(n.note_id, n.score) for n in res.notes],
                       served_at=served_at, requested_as_of=req.as_of, seen=seen,
                       base_digest=base_digest, overrides=req.config, explain=req.explain,
                       embedding_digest=embedding, used=res.used, upper_bound=res.upper_bound,
                       result_digest=digest_bytes(body), context=req.context,
                       id_prefix=req.id_prefix, why=with_shown(why, res),
                       embedder_digest=embedder, filter=req.filter)


def with_shown(why: Why | None, res: QueryResult) -> Why | None:
    """``why`` with the signals of the notes ``res`` shows, in context order."""
    if why is None:
        return None
    return msgspec.structs.replace(
        why, shown=[Shown(n.relevance, n.recency, n.cost) for n in res.notes])
