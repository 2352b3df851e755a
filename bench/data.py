"""A seeded event workload for the core benchmark and the crash tests, with its expected outcome.

The generator writes JSON Lines straight to a file (memory bounded by the number of notes, not
of events) and records, *by construction* and without the reducers, what a correct projector
must end up with: the uses of every note (distinct ``note.used`` event_ids that arrived while
the note existed and was not forgotten), which notes are forgotten, how many events must
become dead letters and how many distinct event_ids each namespace saw.

Mix (approximate shares of the events): 10% ``note.created``, 6% redeliveries (an earlier
line of the same namespace repeated verbatim, any type), 1% uses of notes never created,
1% forgets, 0.5% uses of forgotten notes, 0.3% second creates of an existing note_id; the
rest are fresh uses of live notes, skewed so that some notes pass the longterm threshold and
many do not.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
"""``at`` of the first generated event."""
RECENT = 500
"""Lines per namespace a redelivery may repeat."""
_WORDS = ("redis", "stream", "checkpoint", "lease", "batch", "replay", "agent", "budget",
          "token", "deploy", "incident", "aof", "worker", "queue", "memory", "note")
_enc = msgspec.json.Encoder()


@dataclass
class Expected:
    """What the projection of a generated file must contain, known from the generator alone."""

    events: int = 0
    uses: dict[tuple[str, str], int] = field(default_factory=dict)
    """(ns, note_id) -> uses, for every created note."""
    kinds: dict[tuple[str, str], str] = field(default_factory=dict)
    forgotten: set[tuple[str, str]] = field(default_factory=set)
    dead: dict[str, int] = field(default_factory=dict)
    """Events per namespace that must change nothing and be dead-lettered."""
    distinct_event_ids: dict[str, int] = field(default_factory=dict)
    redeliveries: int = 0

    def tier(self, key: tuple[str, str], longterm_uses: int = 5) -> str:
        """The tier the contract gives the note."""
        if self.uses[key] >= longterm_uses:
            return "longterm"
        return "scratch" if self.kinds[key] == "scratch" else "short"


@dataclass
class _Ns:
    name: str
    tag: str = ""
    live: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    recent: deque[bytes] = field(default_factory=lambda: deque(maxlen=RECENT))
    next_note: int = 0
    next_event: int = 0
    owners: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """note id -> (its author, private): forgets are the author's, and a private note is
    used only by its author (the fold refuses anything else)."""


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def generate(path: Path | str, n_events: int, namespaces: list[str], seed: int = 7,
             tag: str = "") -> Expected:
    """Write ``n_events`` JSON lines to ``path`` and return what their projection must be.

    ``tag`` goes into every note_id and event_id, so files generated with different tags can
    be ingested into the same namespaces without their ids colliding.
    """
    rng = random.Random(seed)
    exp = Expected(events=n_events)
    state = [_Ns(ns, tag=tag) for ns in namespaces]
    for ns in namespaces:
        exp.dead[ns] = 0
        exp.distinct_event_ids[ns] = 0
    with open(path, "wb") as fh:
        for i in range(n_events):
            st = rng.choice(state)
            at = T0 + timedelta(seconds=i * 7 + rng.randint(0, 30))
            line = _one(rng, st, at, exp)
            fh.write(line)
            fh.write(b"\n")
    return exp


def _one(rng: random.Random, st: _Ns, at: datetime, exp: Expected) -> bytes:
    r = rng.random()
    ns = st.name
    if st.recent and r < 0.06:
        exp.redeliveries += 1
        return rng.choice(st.recent)  # same line again: same event_id, applied once
    st.next_event += 1
    eid = f"{ns}-{st.tag}e{st.next_event}"
    base: dict[str, Any] = {"event_id": eid, "ns": ns, "agent": f"agent{rng.randint(0, 7)}",
                            "at": _iso(at)}
    exp.distinct_event_ids[ns] += 1
    if not st.live or r < 0.16:
        d = _create(rng, st, base, exp)
    elif r < 0.17:
        d = {**base, "type": "note.used", "note_id": f"ghost-{rng.randint(0, 99)}"}
        exp.dead[ns] += 1
    elif r < 0.18:
        nid = st.live.pop(rng.randrange(len(st.live)))
        st.gone.append(nid)
        exp.forgotten.add((ns, nid))
        d = {**base, "type": "note.forgotten", "note_id": nid, "agent": st.owners[nid][0]}
    elif r < 0.185 and st.gone:
        d = {**base, "type": "note.used", "note_id": rng.choice(st.gone)}
        exp.dead[ns] += 1
    elif r < 0.188:
        nid = rng.choice(st.live)
        d = {**base, "type": "note.created", "note_id": nid, "text": "a second create"}
        exp.dead[ns] += 1
    else:
        # skewed towards older notes: uses spread on both sides of the longterm threshold
        k = len(st.live)
        nid = st.live[min(k - 1, int(k * rng.random() ** 1.5))]
        d = {**base, "type": "note.used", "note_id": nid}
        owner, private = st.owners[nid]
        if private:
            d["agent"] = owner
        exp.uses[(ns, nid)] += 1
    line = _enc.encode(d)
    st.recent.append(line)
    return line


def _create(rng: random.Random, st: _Ns, base: dict[str, Any], exp: Expected) -> dict[str, Any]:
    st.next_note += 1
    nid = f"{st.tag}n{st.next_note}"
    st.live.append(nid)
    kind = "scratch" if rng.random() < 0.2 else "note"
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 60)))
    d = {**base, "type": "note.created", "note_id": nid, "text": f"{nid}: {words}",
         "kind": kind}
    if rng.random() < 0.1:
        d["scope"] = "private"
    st.owners[nid] = (d["agent"], d.get("scope") == "private")
    if rng.random() < 0.3:
        d["tokens"] = rng.randint(1, 5000)
    exp.uses[(st.name, nid)] = 0
    exp.kinds[(st.name, nid)] = kind
    return d
