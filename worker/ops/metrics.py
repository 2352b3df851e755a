"""Prometheus metrics (the official ``prometheus-client``) of a worker or of ``serve``.

Two kinds, on one registry:

* read from Redis at each scrape (``StoreCollector``), so every process reports the same
  figures whoever did the work: events appended and projected per namespace, projection lag
  in entries and seconds, dead letters, queries served (the audit stream's length), live
  workers (their heartbeats, ``worker.ops.heartbeat``: the count ``/readyz`` uses);
* counted in this process: projection batches and events it folded, queries it answered
  (by outcome), query latency, index loads (full / incremental).

A worker serves them on ``--metrics-port`` (``serve_metrics``); ``hivemind serve`` puts
``render()`` behind ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hivemind_memory.projections.store.readmodel import BatchInfo
from hivemind_memory.projections.store.types import QueueConn, Store
from hivemind_memory.worker.ops.status import WorkerStatus, live_workers, read_status

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The content type of ``render()``'s bytes."""

REGISTRY = CollectorRegistry(auto_describe=True)
"""Every hivemind metric of this process (not prometheus-client's global registry)."""

BATCHES = Counter("hivemind_projection_batches", "Projection batches this process committed",
                  ["ns"], registry=REGISTRY)
FOLDED = Counter("hivemind_events_folded", "Stream entries this process folded and committed",
                 ["ns"], registry=REGISTRY)
QUERIES = Counter("hivemind_queries_answered",
                  "Queries this process answered, by outcome (ok or error)",
                  ["ns", "outcome"], registry=REGISTRY)
LATENCY = Histogram("hivemind_query_latency_seconds",
                    "Time from a query job picking a query up to its answer being published",
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                             2.5, 5.0, 10.0, 30.0), registry=REGISTRY)
INDEX_EVICTIONS = Counter("hivemind_index_evictions",
                          "Namespace indexes this process evicted to stay within its memory "
                          "budget", registry=REGISTRY)
INDEX_LOAD_FAILURES = Counter("hivemind_index_load_failures",
                              "Namespace indexes this process could not hold, by reason "
                              "(namespace_too_large, worker_out_of_memory, index_load_failed)",
                              ["ns", "code"], registry=REGISTRY)
INDEX_LOADS = Counter("hivemind_index_loads",
                      "Namespace index refreshes: full (first use, replay, trim gap) or "
                      "incremental (from the changes stream)", ["ns", "kind"], registry=REGISTRY)


def observe_batch(info: BatchInfo) -> None:
    """Count one projection batch (committed ones only)."""
    if info.committed:
        BATCHES.labels(info.ns).inc()
        FOLDED.labels(info.ns).inc(info.count)


def observe_query(ns: str, ok: bool, seconds: float) -> None:
    """Count one answered query and its latency."""
    observe_queries(ns, ok, 1)
    LATENCY.observe(seconds)


def observe_queries(ns: str, ok: bool, n: int) -> None:
    """Count ``n`` answered queries of one namespace and outcome (their latencies go to
    ``LATENCY`` one by one)."""
    QUERIES.labels(ns or "_invalid", "ok" if ok else "error").inc(n)


def observe_evictions(n: int) -> None:
    """Count ``n`` evicted indexes."""
    INDEX_EVICTIONS.inc(n)


def observe_load_failure(ns: str, code: str) -> None:
    """Count one namespace this process could not hold."""
    INDEX_LOAD_FAILURES.labels(ns, code).inc()


def observe_index_load(ns: str, full: bool) -> None:
    """Count one index refresh."""
    INDEX_LOADS.labels(ns, "full" if full else "incremental").inc()


class StoreCollector(Collector):
    """Figures read from Redis at scrape time (the same for every process that reports them)."""

    def __init__(self, store: Store, rq: QueueConn) -> None:
        self.store = store
        self.rq = rq

    def collect(self) -> Iterator[Metric]:
        st = read_status(self.store, self.rq, datetime.now(UTC))
        appended = CounterMetricFamily("hivemind_events_appended",
                                       "Events appended to the namespace's log", labels=["ns"])
        projected = CounterMetricFamily("hivemind_events_projected",
                                        "Log entries the projection checkpoint covers",
                                        labels=["ns"])
        lag = GaugeMetricFamily("hivemind_projection_lag_entries",
                                "Log entries not yet projected", labels=["ns"])
        lag_s = GaugeMetricFamily("hivemind_projection_lag_seconds",
                                  "Age of the oldest entry not yet projected (0: caught up)",
                                  labels=["ns"])
        dead = GaugeMetricFamily("hivemind_dead_letters",
                                 "Events that changed nothing (see hivemind dead)", labels=["ns"])
        served = CounterMetricFamily("hivemind_queries_served",
                                     "Queries served (entries of the audit stream)",
                                     labels=["ns"])
        for n in st.namespaces:
            appended.add_metric([n.ns], n.stream_length)
            projected.add_metric([n.ns], n.projected)
            lag.add_metric([n.ns], n.lag_entries)
            lag_s.add_metric([n.ns], n.lag_seconds)
            dead.add_metric([n.ns], n.dead_letters)
            served.add_metric([n.ns], n.queries_served)
        yield from (appended, projected, lag, lag_s, dead, served)
        yield GaugeMetricFamily("hivemind_workers",
                                "Live worker processes (heartbeats; what /readyz counts)",
                                value=len(st.workers))
        yield from _memory_families(st.workers)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # nothing to read from Redis at registration time


def _memory_families(workers: list[WorkerStatus]) -> Iterator[Metric]:
    """Each live worker's index memory, budget, held namespaces and load failures (from its
    heartbeat, ``worker.memory``)."""
    held = GaugeMetricFamily("hivemind_worker_index_bytes",
                             "Bytes of the namespace indexes the worker holds",
                             labels=["worker"])
    budget = GaugeMetricFamily("hivemind_worker_memory_budget_bytes",
                               "The worker's index memory budget (--memory-budget)",
                               labels=["worker"])
    count = GaugeMetricFamily("hivemind_worker_namespaces_held",
                              "Namespace indexes the worker holds", labels=["worker"])
    evicted = CounterMetricFamily("hivemind_worker_index_evictions",
                                  "Indexes the worker evicted to stay within its budget",
                                  labels=["worker"])
    failing = GaugeMetricFamily("hivemind_worker_namespaces_unavailable",
                                "Namespaces the worker could not hold lately, by reason",
                                labels=["worker", "code"])
    for w in workers:
        m = w.memory
        if m is None:
            continue
        held.add_metric([w.name], m.held)
        budget.add_metric([w.name], m.budget)
        count.add_metric([w.name], m.namespaces)
        evicted.add_metric([w.name], m.evictions)
        codes: dict[str, int] = {}
        for f in m.failures:
            codes[f.code] = codes.get(f.code, 0) + 1
        for code, n in sorted(codes.items()):
            failing.add_metric([w.name, code], n)
    yield from (held, budget, count, evicted, failing)


_collector: StoreCollector | None = None


def watch_store(store: Store, rq: QueueConn) -> None:
    """Report the store's figures from this process (once; later calls replace the store)."""
    global _collector
    if _collector is not None:
        REGISTRY.unregister(_collector)
    _collector = StoreCollector(store, rq)
    REGISTRY.register(_collector)


def render() -> bytes:
    """The exposition text of every metric (for an HTTP handler: ``CONTENT_TYPE``)."""
    return generate_latest(REGISTRY)


def serve_metrics(port: int, host: str = "0.0.0.0") -> int:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread of this process; the bound port
    (the one the system picked for port 0)."""
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    return int(server.server_address[1])


__all__ = ["CONTENT_TYPE", "REGISTRY", "StoreCollector", "live_workers", "observe_batch",
           "observe_index_load", "observe_queries", "observe_query", "render", "serve_metrics",
           "watch_store"]
