"""``hivemind demo``: the whole flow in one process on the embedded store (no server)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.jobs import schedule_namespaces
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.state import tier_of
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.readmodel import read_dead, read_notes
from hivemind_memory.worker import runtime
from hivemind_memory.worker.cli.output import print_result
from hivemind_memory.worker.loop import run_worker

DEMO_NS = "demo"
AS_OF = "2026-06-01T12:00:00Z"


def sample_events() -> list[dict[str, Any]]:
    """A small namespace whose notes differ in every signal: age, length, uses, scope, kind."""
    ev: list[dict[str, Any]] = []

    def created(nid: str, agent: str, at: str, text: str, **extra: Any) -> None:
        ev.append({"type": "note.created", "event_id": f"c-{nid}", "ns": DEMO_NS,
                   "note_id": nid, "agent": agent, "at": at, "text": text, **extra})

    created("redis-aof", "alice", "2025-06-01T09:00:00Z",
            "Redis persistence: enable appendonly yes with appendfsync everysec for the "
            "event streams; RDB snapshots alone lose the last minutes of events.")
    created("deploy-window", "bob", "2026-05-30T10:00:00Z",
            "Deploys happen Tuesdays after 14:00 UTC; never deploy the worker during a replay.")
    created("old-incident", "carol", "2025-01-15T08:00:00Z",
            "Incident: the projector double-counted uses after a crash because the checkpoint "
            "was written after the projection, not with it. Fixed with one Lua commit.")
    created("scratch-todo", "alice", "2026-05-25T16:00:00Z",
            "scratch: try a smaller batch size for the projector to see the redis latency",
            kind="scratch")
    created("alice-secret", "alice", "2026-05-20T12:00:00Z",
            "Private: alice's redis staging password rotation reminder", scope="private")
    created("big-runbook", "bob", "2026-04-01T12:00:00Z",
            "Redis runbook. " + "Check memory, check AOF rewrite, check replication lag. " * 60,
            tokens=2000)
    for i in range(6):
        ev.append({"type": "note.used", "event_id": f"u-aof-{i}", "ns": DEMO_NS,
                   "note_id": "redis-aof", "agent": "bob", "at": f"2026-0{i + 1}-02T10:00:00Z"})
    ev.append({"type": "note.used", "event_id": "u-aof-0", "ns": DEMO_NS,  # a redelivery
               "note_id": "redis-aof", "agent": "bob", "at": "2026-01-02T10:00:00Z"})
    ev.append({"type": "note.used", "event_id": "u-ghost", "ns": DEMO_NS,
               "note_id": "never-created", "agent": "bob", "at": "2026-05-02T10:00:00Z"})
    ev.append({"type": "note.forgotten", "event_id": "f-deploy", "ns": DEMO_NS,
               "note_id": "deploy-window", "agent": "bob", "at": "2026-05-31T10:00:00Z"})
    return ev


def run_demo(config_path: str | None, store_url: str = "memory://") -> int:
    """Ingest the sample into the embedded store, project it with a burst worker in this
    process, show the result. ``memory://PATH`` keeps the log on disk (a second run replays
    it; the repeated events are applied once)."""

    if not store_url.startswith("memory://"):
        print("hivemind demo: --store must be memory:// or memory://PATH", file=sys.stderr)
        return 2
    s = Settings.from_env({}, redis_url=store_url, config_path=config_path)
    rt = runtime.build(s, connect(s.redis_url))
    runtime.install(rt)
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    with os.fdopen(fd, "w") as fh:
        for e in sample_events():
            fh.write(json.dumps(e) + "\n")
    try:
        rep = ingest(rt.store, path, on_error=lambda m: print(m, file=sys.stderr),
                     on_chunk=lambda nss: schedule_namespaces(rt.store, rt.project_queue, nss))
    finally:
        os.unlink(path)
    print(f"== ingested {rep.appended} events into namespace '{DEMO_NS}' (embedded store)")
    code = run_worker(rt, burst=True)
    print("== projected notes (hivemind notes --ns demo)")
    for nid, n in sorted(read_notes(rt.store, DEMO_NS).items()):
        flag = " (forgotten)" if n.forgotten else ""
        tier = tier_of(n.uses, n.kind, rt.cfg)
        print(f"  {nid:<14} tier={tier:<9} uses={n.uses} tokens={n.tokens:<5} "
              f"{n.scope:<7} {n.kind:<7} created {n.created_at.date()}{flag}")
    print("== dead letters")
    for d in read_dead(rt.store, DEMO_NS):
        print(f"  {d.entry}: {d.reason}")
    client = Client(rt.store, settings=s)
    asks = [
        ("bob", "redis persistence aof projector crash", 400, False),
        ("alice", "redis persistence aof projector crash", 400, False),
        ("bob", "redis runbook memory", 2100, True),
    ]
    ids = [client.submit_query(DEMO_NS, text, budget, agent=agent, as_of=AS_OF, explain=ex)
           for agent, text, budget, ex in asks]
    code = max(code, run_worker(rt, burst=True))
    for (agent, text, budget, _), qid in zip(asks, ids, strict=True):
        print(f"== hivemind query {text!r} --ns {DEMO_NS} --budget {budget} --agent {agent} "
              f"--as-of {AS_OF}")
        code = max(code, print_result(client.result_json(qid, timeout=10), as_json=False))
    return code
