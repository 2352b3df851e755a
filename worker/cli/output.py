"""How the CLI prints things for people: results, and Redis errors without protocol noise."""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

import msgspec
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from hivemind_memory.projections.store.logfile import FsckReport
    from hivemind_memory.worker.ops.status import Status


def redis_message(exc: RedisError) -> str:
    """A Redis error for people: the server's words, without the pipelined command bytes."""
    text = str(exc)
    _, sep, tail = text.partition(" caused error: ")
    return f"{type(exc).__name__}: {tail if sep else text}"


ADMIN_ENDPOINTS = ("GET /v1/ns/{ns}/status", "GET /v1/ns/{ns}/dead",
                   "GET /v1/ns/{ns}/notes/{note_id}", "POST /v1/ns/{ns}/audit/reproduce")
"""What ``hivemind serve`` answers for the operator's commands (an ``admin`` token)."""
ENDPOINT_OF = {"status": "GET /v1/ns/{ns}/status", "dead": "GET /v1/ns/{ns}/dead",
               "show": "GET /v1/ns/{ns}/notes/{note_id}",
               "audit reproduce": "POST /v1/ns/{ns}/audit/reproduce",
               "audit list": "GET /v1/ns/{ns}/audit", "notes": "GET /v1/ns/{ns}/notes",
               "ingest": "POST /v1/ns/{ns}/events", "import": "POST /v1/ns/{ns}/events",
               "query": "POST /v1/ns/{ns}/query", "batch": "POST /v1/ns/{ns}/queries",
               "erase": "DELETE /v1/ns/{ns}/notes/{note_id}"}
"""The endpoint of ``serve`` that does what a command does."""


def store_locked_message(reason: str, command: str, ns: str | None = None,
                         note_id: str | None = None) -> str:
    """Why a command cannot open a ``memory://PATH`` store another process holds, and where
    to go instead when that process is ``hivemind serve``: its HTTP API."""
    fill = {"ns": ns or "{ns}", "note_id": note_id or "{note_id}"}
    this = ENDPOINT_OF.get(command)
    others = [e for e in ADMIN_ENDPOINTS if e != this]
    here = f"{this.format(**fill)} (what `hivemind {command}` does); also " if this else ""
    return (f"{reason}. If that is `hivemind serve`, operate the store through its HTTP API "
            f"with an admin token: {here}{', '.join(e.format(**fill) for e in others)} "
            "(see /docs); or stop the server first")


def print_result(body: bytes, as_json: bool, out: IO[str] | None = None) -> int:
    """Print a result (JSON, or a readable listing); 1 if it is an error object."""
    out = out or sys.stdout
    obj = msgspec.json.decode(body)
    if as_json:
        out.write(body.decode() + "\n")
        return 1 if "error" in obj else 0
    if "error" in obj:
        out.write(f"error [{obj['error']['code']}] {obj['error']['message']}\n"
                  f"query_id {obj['query_id']}\n")
        return 1
    out.write(f"query {obj['query_id']}  ns={obj['ns']}  as_of={obj['as_of']}\n")
    notes = obj["notes"]
    if notes:
        # listed in context order (the order handed to the model); rank is by score
        by_score = sorted(range(len(notes)), key=lambda i: (-notes[i]["score"],
                                                             notes[i]["note_id"]))
        rank = {i: r for r, i in enumerate(by_score, start=1)}
        out.write("ctx rank note_id              tier      score  tokens  text\n")
        for i, n in enumerate(notes):
            first = (n["text"].splitlines() or [""])[0][:40]
            out.write(f"{i + 1:>3} {rank[i]:>4} {n['note_id']:<20} {n['tier']:<9} "
                      f"{n['score']:.4f} {n['tokens']:>6}  {first}\n")
    out.write(f"used {obj['used']} / {obj['budget']} tokens, {len(obj['notes'])} note(s), "
              f"method {obj['method']}\n")
    if obj["notes"]:
        out.write("(ctx: position in the context handed to the model; rank: by score)\n")
    windows = obj.get("time_windows") or []
    in_window = {nid for w in windows for nid in w["notes"]}
    for w in windows:  # the time the question names (``calibration.time_window_weight``)
        out.write(f"time window \"{w['words']}\": {w['start']} to {w['end']}, logit "
                  f"+{w['gain']:g} at most, {len(w['notes'])} candidate(s) written in it\n")
    for c in obj.get("candidates") or []:
        # the rules' marks: the older versions a newer note won over (its score lifted above
        # rel x rec) and the near-identical notes it stands for
        marks = "".join(f" {k}={','.join(c[k])}" for k in ("updates", "stands_for")
                        if c.get(k))
        if c.get("passage"):  # a long note's passage; after its best one, its rank
            place = c["passage"]
            marks += f" passage={place['index'] + 1}/{place['count']}"
            if place.get("rank"):
                marks += f" repeat={place['rank']} (score x passage_repeat^{place['rank']})"
        if c["note_id"] in in_window:
            marks += " in-window"
        out.write(f"   {'*' if c['chosen'] else ' '} {c['note_id']:<20} rel={c['relevance']:.4f} "
                  f"rec={c['recency']:.4f} score={c['score']:.4f} cost={c['cost']} "
                  f"tier={c['tier']} uses={c['uses']} age={c['age_days']:.1f}d{marks}\n")
    return 0


def print_status(st: Status, out: IO[str] | None = None) -> None:
    """``hivemind status`` for people: a namespace table, then the live workers."""
    out = out or sys.stdout
    w = out.write
    w(f"{'namespace':<20} {'events':>9} {'lag':>8} {'lag_s':>8} {'dead':>5} {'queries':>8}  "
      "checkpoint / last query\n")
    for n in st.namespaces:
        last = (f"{n.last_query.served_at:%Y-%m-%dT%H:%M:%SZ} {n.last_query.query_id}"
                if n.last_query else "no query yet")
        w(f"{n.ns:<20} {n.stream_length:>9} {n.lag_entries:>8} {n.lag_seconds:>8.1f} "
          f"{n.dead_letters:>5} {n.queries_served:>8}  {n.checkpoint}\n"
          f"{'':<20} {'':>43}  {last}\n")
    if not st.namespaces:
        w("no namespace has seen an event yet\n")
    w(f"{len(st.workers)} live worker(s)\n")
    for wk in st.workers:
        beat = f"{wk.last_heartbeat:%H:%M:%SZ}" if wk.last_heartbeat else "-"
        w(f"  {wk.name:<40} {wk.state:<9} jobs ok {wk.successful_jobs} failed "
          f"{wk.failed_jobs}  heartbeat {beat}  {','.join(wk.queues)}\n")
        shards = (_spans(wk.shards) + f" of {wk.shard_count}") if wk.shards else "-"
        rss = f"{wk.rss_bytes / 2**20:,.0f} MiB" if wk.rss_bytes else "-"
        names = ", ".join(wk.namespaces_held[:SHOWN_NAMESPACES])
        more = wk.namespace_count - min(len(wk.namespaces_held), SHOWN_NAMESPACES)
        w(f"  {'':<40} shards {shards}  rss {rss}  {wk.namespace_count} namespace(s) held"
          + (f": {names}" if names else "") + (f" (+{more} more)" if more > 0 else "") + "\n")
        m = wk.memory
        if m is not None:
            kept = (f" (+ {m.outside / 2**20:.1f} MiB of kept word sets and passages)"
                    if m.outside else "")
            w(f"    index memory {m.held / 2**20:.1f} of {m.budget / 2**20:.1f} MiB{kept}, "
              f"{m.namespaces} namespace(s) held, {m.evictions} evicted\n")
            for f in m.failures:
                w(f"    cannot hold {f.ns}: {f.code}: {f.message}\n")
    if st.unserved_shards:
        w(f"shards with no live worker: {_spans(st.unserved_shards)} of {st.shard_count} "
          "(their queries get shard_unavailable)\n")
    elif st.shard_count > 1:
        w(f"all {st.shard_count} shards have a live worker\n")


SHOWN_NAMESPACES = 8
"""Namespaces held that ``status`` names on a worker's line (``--json`` has them all)."""


def _spans(nums: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out: list[str] = []
    for n in sorted(nums):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def print_fsck(rep: FsckReport, out: IO[str] | None = None) -> None:
    """``hivemind fsck`` for people: what the log holds, each problem, what a repair did."""
    w = (out or sys.stdout).write
    f = rep.found
    w(f"{f.path}: {f.size:,} bytes, {f.records:,} record(s): {f.source_records:,} of "
      f"{f.keys} source stream(s), {f.derived_records:,} derived\n")
    for p in f.problems:
        w(f"problem: {p}\n")
    if f.derived_records:
        kinds = ", ".join(f"{k} {n:,}" for k, n in f.derived_kinds.items())
        w(f"note: {f.derived_records:,} derived record(s) ({f.derived_bytes:,} bytes: {kinds}) "
          "written by an older version; replay skips them, --repair drops them\n")
    if rep.refused:
        w(f"not repaired: {rep.refused}\n")
    if rep.repaired and rep.after is not None:
        w(f"repaired: wrote {rep.written_records:,} record(s) ({rep.written_bytes:,} bytes); "
          f"the old file is kept as {rep.backup}\n")
        for p in rep.after.problems:
            w(f"problem after repair: {p}\n")
    if rep.ok:
        w("clean: every record whole, every stream in entry-id order"
          + (" (after repair)\n" if rep.repaired else "\n"))
    elif not rep.repaired and not rep.refused:
        how = ("--repair --drop-unreadable (the records in the unreadable bytes are lost; the "
               "old file is kept)" if f.unreadable else
               "--repair (no acknowledged record is lost; the old file is kept)")
        w(f"{len(f.problems)} problem(s); "
          + (f"to fix: {how}\n" if f.repairable(True) else "no repair can keep every record\n"))
