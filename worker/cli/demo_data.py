"""The demo's sample log: a few hundred notes that five agents wrote over two years, built
deterministically (a fixed seed, fixed dates), so every run and every machine shows the same.

Ages run from hours to two years, lengths from one line to multi-page runbooks, use counts from
0 to dozens (on both sides of the promotion threshold); notes are shared, private or scratch,
some are forgotten, one use names a note that never existed (a dead letter) and one event is
sent twice (applied once). A few notes carry the story the demo tells (old notes that earned
permanence, one big runbook beside many small notes); the rest is realistic background.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

NS = "demo"
"""The demo's namespace."""
AS_OF = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
"""Every demo query runs as of this time (so the output is the same on every run)."""
START = AS_OF - timedelta(days=730)
AGENTS = ("planner", "coder", "reviewer", "ops", "research")
SEED = 20260601

# Background facts per topic: (subject, fact) pairs combined with details below.
_TOPICS: dict[str, list[str]] = {
    "redis": [
        "Redis {ver} in staging runs with maxmemory {mem}gb and noeviction",
        "the Redis replica in {region} lags up to {n} ms behind the primary during AOF rewrite",
        "redis-cli --latency on the cache host showed p99 {n} ms after the kernel upgrade",
        "Redis keyspace notifications are off; the session service polls instead",
        "Redis slowlog: XRANGE over the audit stream takes {n} ms at 1M entries",
    ],
    "postgres": [
        "Postgres {ver}: autovacuum on the orders table needs scale factor 0.02",
        "the billing database connection pool is capped at {n} by pgbouncer",
        "a missing index on payments.customer_id made the invoice page take {n} ms",
        "Postgres logical replication slot for analytics must be dropped before upgrades",
    ],
    "deploy": [
        "deploys of the api go through the canary in {region} first, {n} percent of traffic",
        "the deploy pipeline caches wheels; bump the cache key when pyproject changes",
        "blue green deploy of the web tier takes about {n} minutes end to end",
        "deploy freeze during the last week of the quarter, ask release managers for exceptions",
    ],
    "auth": [
        "auth tokens expire after {n} minutes; refresh tokens after 30 days",
        "the SSO callback url changed to /auth/callback/v2 for the {region} tenant",
        "service accounts use mTLS; certificates rotate every {n} days",
    ],
    "frontend": [
        "the dashboard bundle is {n} kB gzipped; lazy load the charts library",
        "dark mode colors live in theme.ts, not in the component styles",
        "the date picker breaks in Safari when the locale is {region}",
    ],
    "billing": [
        "invoices are generated at 02:00 UTC; never deploy billing between 01:30 and 03:00",
        "Stripe webhooks retry for 3 days; the handler must be idempotent by event id",
        "refunds above {n} EUR need a second approval in the admin tool",
    ],
    "research": [
        "paper notes: retrieval augmented agents degrade when the context has more than {n} notes",
        "benchmark: BM25 beats the small embedding model on exact error messages",
        "lost in the middle: models attend to the start and end of a long context",
        "knapsack packing of context beats greedy fill by {n} percent on our eval set",
    ],
    "meeting": [
        "standup: {agent} is blocked on the {region} quota request",
        "retro: too many pages from flaky disk alerts, tune the threshold to {n} percent",
        "planning: the search team owns the query latency budget this quarter",
    ],
}
_REGIONS = ("eu-west", "us-east", "ap-south", "de", "fr", "br")
_SCRATCH = [
    "scratch: try batch size {n} for the projector and compare lag",
    "scratch: grep the worker logs for projection_lease_lost",
    "scratch: todo rerun the flaky test_crash with -x before lunch",
    "scratch: half-written idea, cache the tokenizer output per note",
    "scratch: check whether the redis latency spike matches the deploy at {n}:00",
]


def _at(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Log:
    """Events in the order an agent fleet would have appended them (sorted by ``at``)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.seq = 0

    def _eid(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}-{self.seq:05d}"

    def created(self, nid: str, agent: str, at: datetime, text: str, **extra: Any) -> None:
        self.events.append({"type": "note.created", "event_id": self._eid("c"), "ns": NS,
                            "note_id": nid, "agent": agent, "at": _at(at), "text": text,
                            **extra})

    def used(self, nid: str, agent: str, at: datetime) -> None:
        self.events.append({"type": "note.used", "event_id": self._eid("u"), "ns": NS,
                            "note_id": nid, "agent": agent, "at": _at(at)})

    def forgotten(self, nid: str, agent: str, at: datetime) -> None:
        self.events.append({"type": "note.forgotten", "event_id": self._eid("f"), "ns": NS,
                            "note_id": nid, "agent": agent, "at": _at(at)})

    def uses(self, rnd: random.Random, nid: str, created: datetime, count: int,
             owner: str | None = None) -> None:
        """``count`` uses by random agents (all by ``owner`` for a private note: no other
        agent can see it)."""
        span = max(1.0, (AS_OF - created).total_seconds())
        for _ in range(count):
            agent = rnd.choice(AGENTS)
            self.used(nid, owner or agent, created + timedelta(seconds=rnd.uniform(0, span)))


def _story(log: _Log, rnd: random.Random) -> None:
    """The notes the demo's queries are about (each query's comparison depends on them)."""
    d = timedelta
    # Old notes that earned permanence: 5% a day has wiped them out, hivemind keeps them.
    old = [
        ("redis-aof-everysec", "ops", 610, 14,
         "Redis persistence for the event log: appendonly yes with appendfsync everysec. "
         "RDB snapshots alone lose minutes of events after a crash; AOF loses at most a second."),
        ("redis-noeviction", "ops", 540, 9,
         "Redis holding the event log must use maxmemory-policy noeviction: an evicted stream "
         "entry is a lost event. Set maxmemory so writes fail with OOM instead."),
        ("projector-crash-fix", "coder", 480, 7,
         "Incident: the projector double counted uses after a crash because the checkpoint was "
         "written after the projection. Fix: one Lua script writes both atomically."),
        ("billing-idempotency", "coder", 650, 11,
         "Stripe webhook handler must be idempotent: store the event id in the same "
         "transaction as the invoice update, or retries double charge."),
        ("deploy-rollback-rule", "ops", 400, 6,
         "Rollback rule: if the canary error rate doubles within 10 minutes, roll back first "
         "and debug later; never hotfix forward during an incident."),
    ]
    for nid, agent, age, uses, text in old:
        created = AS_OF - d(days=age, hours=rnd.uniform(0, 20))
        log.created(nid, agent, created, text)
        log.uses(rnd, nid, created, uses)
    # One big, recent, relevant runbook beside many small notes on the same subject.
    runbook = ["Deploy and rollback runbook for the api and the workers."]
    steps = ["Check the canary dashboard and the error rate before promoting.",
             "Drain the workers with SIGTERM so the current job finishes.",
             "Roll back by redeploying the previous image tag; deploy rollback is one command.",
             "Verify the projection lag returns to zero after the deploy.",
             "Record the deploy in the changelog with the image tag and the time."]
    for i in range(60):
        runbook.append(f"Step {i + 1}. " + steps[i % len(steps)])
    log.created("deploy-runbook", "ops", AS_OF - d(days=3), " ".join(runbook), tokens=2400)
    small = [
        "deploy: the canary gets 5 percent of traffic for 10 minutes before promotion",
        "deploy rollback: previous image tag is kept for 7 days in the registry",
        "deploy: drain workers with SIGTERM; RQ finishes the current job then exits",
        "after a deploy check projection lag in hivemind status; it must return to 0",
        "deploy checklist: changelog entry with image tag, time and who approved",
        "rollback of the schema migration needs the down script; test it in staging",
        "deploy windows: Tuesday and Thursday after 14:00 UTC, never Friday",
        "the deploy bot posts the canary error rate to the release channel",
    ]
    for i, text in enumerate(small):
        age = 20 + 37 * i
        created = AS_OF - d(days=age, hours=i)
        log.created(f"deploy-tip-{i + 1}", rnd.choice(("ops", "coder", "reviewer")), created, text)
        log.uses(rnd, f"deploy-tip-{i + 1}", created, rnd.choice((0, 1, 2, 3, 6)))
    # Private and scratch notes on the same subjects.
    log.created("ops-private-oncall", "ops", AS_OF - d(days=12),
                "private: my on-call handover, redis persistence alarms go to my phone first",
                scope="private")
    log.created("coder-scratch-aof", "coder", AS_OF - d(hours=5),
                "scratch: is redis appendfsync always too slow for the event log? measure it",
                kind="scratch")
    log.created("coder-scratch-old", "coder", AS_OF - d(days=40),
                "scratch: redis persistence question from last month, answered in the wiki",
                kind="scratch")
    # A note that was forgotten (never a candidate again) and a use of one that never existed.
    created = AS_OF - d(days=90)
    log.created("redis-wrong-advice", "research", created,
                "Redis persistence: disable AOF, RDB snapshots every hour are enough")
    log.forgotten("redis-wrong-advice", "research", created + d(days=2))  # its author
    log.used("never-created", "coder", AS_OF - d(days=30))


def _background(log: _Log, rnd: random.Random, count: int) -> None:
    topics = sorted(_TOPICS)
    for i in range(count):
        topic = rnd.choice(topics)
        agent = rnd.choice(AGENTS)
        age = min(729.0, rnd.expovariate(1 / 200))  # more recent notes than old ones
        created = AS_OF - timedelta(days=age, seconds=rnd.randrange(86_400))
        fill = {"ver": rnd.choice(("6.2", "7.0", "7.2", "15", "16")), "mem": rnd.randint(2, 64),
                "region": rnd.choice(_REGIONS), "n": rnd.randint(2, 900), "agent": agent}
        sentences = [t.format(**fill) for t in rnd.sample(_TOPICS[topic], k=1)]
        size = rnd.random()
        if size > 0.8:  # a longer write-up: several facts of the topic, repeated details
            sentences += [rnd.choice(_TOPICS[topic]).format(**fill) for _ in
                          range(rnd.randint(5, 40))]
        nid = f"{topic}-{i:03d}"
        extra: dict[str, Any] = {}
        r = rnd.random()
        if r < 0.12:
            extra["scope"] = "private"
        elif r < 0.22:
            extra["kind"] = "scratch"
            sentences = [rnd.choice(_SCRATCH).format(**fill)]
            created = AS_OF - timedelta(days=rnd.uniform(0, 60))
            nid = f"scratch-{i:03d}"
        log.created(nid, agent, created, ". ".join(sentences).capitalize() + ".", **extra)
        # Uses: most notes are used rarely; a few are used a lot (older ones had more chance)
        u = rnd.random()
        uses = 0 if u < 0.5 else rnd.randint(1, 4) if u < 0.85 else rnd.randint(5, 40)
        log.uses(rnd, nid, created, uses, owner=agent if extra.get("scope") == "private" else None)
        if uses == 0 and rnd.random() < 0.08:
            log.forgotten(nid, agent, created + timedelta(days=rnd.uniform(0, 1)))


def sample_events(background: int = 300) -> list[dict[str, Any]]:
    """The demo's log: the story notes plus ``background`` notes, in ``at`` order, with one
    event redelivered (same ``event_id``, applied once)."""
    rnd = random.Random(SEED)
    log = _Log()
    _story(log, rnd)
    _background(log, rnd, background)
    events = sorted(log.events, key=lambda e: (e["at"], e["event_id"]))
    events = [e for e in events if e["at"] <= _at(AS_OF)]
    redelivered = next(e for e in events if e["type"] == "note.used")
    return [*events, dict(redelivered)]
