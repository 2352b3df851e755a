"""``hivemind calibrate``: a namespace whose agents use notes by a hidden rule (short notes
on the query's topic, the opposite of the defaults' taste for length); fitting from the uses
that followed the served queries, or from a labelled file, must raise held-out recall."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import utcnow
from hivemind_memory.projections.ranking.config import DEFAULT, config_from_toml, load_config
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.worker.audit.calibrate import calibrate, read_labels, split
from hivemind_memory.worker.audit.reproduce import all_served
from tests.support.factories import created, iso
from tests.unit.worker.test_audit import World

TOPICS = ("redis", "deploy", "billing", "pottery", "garden", "invoice", "canary", "backup",
          "tennis", "violin")
AGENTS = ("a1", "a2", "a3", "a4")
FILLER = ("note", "about", "team", "week", "plan", "detail", "owner", "status", "review")
MARGIN = 0.25
"""How much calibrating must raise held-out recall (measured at BUDGET tokens)."""
BUDGET = 40
"""One long note (30-36 tokens) or four short ones (6-9 tokens) fit."""


def short_note(nid: str, topic: str, rnd: random.Random) -> tuple[str, int]:
    return f"{topic} {rnd.choice(FILLER)} {rnd.choice(FILLER)}", rnd.randint(6, 9)


def namespace(rnd: random.Random) -> tuple[list[dict[str, Any]], set[str]]:
    """The notes, and the hidden rule's answer: which are short (on any topic)."""
    evs: list[dict[str, Any]] = []
    short: set[str] = set()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    i = 0
    for topic in TOPICS:
        for k in range(8):
            nid = f"{topic}-{k}"
            long = k % 2 == 0
            words = [topic] * (3 if long else 1) + rnd.choices(FILLER, k=14 if long else 2)
            rnd.shuffle(words)
            evs.append(created(nid, agent=rnd.choice(AGENTS), at=t0 + timedelta(days=3 * i),
                               text=" ".join(words),
                               tokens=rnd.randint(30, 36) if long else rnd.randint(6, 9)))
            if not long:
                short.add(nid)
            i += 1
    return evs, short


def queries(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    return [{"ns": "t", "text": f"{TOPICS[i % len(TOPICS)]} {rnd.choice(FILLER)}",
             "budget": 400, "agent": AGENTS[i % len(AGENTS)]} for i in range(n)]


RULES_OFF = """near_identical = 0.0
[updates]
margin = 0.0
[calibration]
floor = 0.0
"""
"""This world's ranking without the rules that drop notes from an answer (near-identical
notes merged, the probability floor, older facts halved): every note of the topic is shown,
as the hidden rule's labels assume; the calibration is what these tests measure."""


def rules_off(tmp_path: Path) -> Path:
    p = tmp_path / "rules-off.toml"
    p.write_text(RULES_OFF)
    return p


def served_world(tmp_path: Path) -> tuple[World, set[str]]:
    rnd = random.Random(11)
    w = World(tmp_path)
    evs, short = namespace(rnd)
    w.client.append(evs)
    w.serve(queries(rnd, 60), cfg_path=str(rules_off(tmp_path)))  # budget 400: every note
    # of the topic is shown
    # each asker then reports using what the hidden rule says it needed: the short notes on
    # its topic it was shown; some also used an unrelated note a week later (out of window)
    uses: list[dict[str, Any]] = []
    later = utcnow() + timedelta(minutes=5)
    for x in all_served(w.r, "t"):
        topic = x.event.text.split()[0]
        for j, (nid, _) in enumerate(x.event.chosen):
            on_topic = nid.startswith(topic + "-")
            if on_topic and nid in short:
                uses.append({"type": "note.used", "event_id": f"u-{x.event.query_id}-{j}",
                             "ns": "t", "note_id": nid, "agent": x.event.agent,
                             "at": iso(later)})
            elif on_topic and j == 0:
                uses.append({"type": "note.used", "event_id": f"late-{x.event.query_id}",
                             "ns": "t", "note_id": nid, "agent": x.event.agent,
                             "at": iso(later + timedelta(days=7))})
    # the uses are dated after the queries (minutes and days ahead of the clock): a client
    # that allows that much skew (the default refuses events more than 300 s ahead)
    Client(w.r, settings=replace(w.settings, max_future_skew_s=8 * 86400)).append(uses)
    return w, short


def test_calibrating_from_the_uses_learns_the_hidden_rule(tmp_path: Path) -> None:
    w, _ = served_world(tmp_path)
    off = load_config(rules_off(tmp_path))
    rep = calibrate(w.r, "t", off, embedder_for(off.embedder), holdout=0.25,
                    budget=BUDGET, seed=3)
    assert rep.queries == 60 and rep.held_out == 15 and rep.fitted == 45
    # the rows are the notes shown (the query's filler word shows other topics' notes too);
    # each asker used its topic's four short notes (a use follows every query of that asker
    # that showed the note within the window; the late uses are outside it)
    assert 45 * 4 <= rep.positives < rep.rows and rep.rows > 45 * 8
    assert rep.before is not None and rep.after is not None
    assert rep.after >= rep.before + MARGIN, (rep.before, rep.after)
    assert rep.config.relevance == "calibrated"
    assert rep.config.calibration != off.calibration


@pytest.mark.slow
def test_the_command_prints_recall_and_writes_a_config_that_config_takes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w, short = served_world(tmp_path)
    out_file = tmp_path / "fitted.toml"
    capsys.readouterr()
    code, out, err = w.cli(capsys, "calibrate", "--ns", "t", "--config", str(rules_off(tmp_path)),
                           "--budget", str(BUDGET),
                           "--holdout", "0.25", "--seed", "3", "-o", str(out_file))
    assert code == 0, err
    assert "held-out recall: before" in out and "60 labelled quer(ies)" in out
    before, after = (float(x.split()[-1].rstrip(",")) for x in
                     out.split("held-out recall: ")[1].split("(")[0].split(", "))
    assert after >= before + MARGIN
    cfg = load_config(out_file)
    assert cfg == config_from_toml(out_file.read_text())
    # the fitted config serves the same asks better: short on-topic notes first
    ids = w.serve([{"ns": "t", "text": "violin plan", "budget": BUDGET, "agent": "a1"}],
                  cfg_path=str(out_file))
    got = {n["note_id"] for n in w.client.result(ids[0], timeout=5)["notes"]}
    assert {n for n in short if n.startswith("violin-")} <= got <= short  # no long note
    code, out, _ = w.cli(capsys, "calibrate", "--ns", "t", "--json", "--seed", "3")
    assert code == 0 and json.loads(out)["queries"] == 61  # the violin query too


def test_calibrating_from_a_labelled_file(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rnd = random.Random(5)
    w = World(tmp_path)
    evs, short = namespace(rnd)
    w.client.append(evs)
    labels = tmp_path / "labels.jsonl"
    asked = iso(datetime(2027, 1, 1, tzinfo=UTC))
    labels.write_text("".join(json.dumps({
        "query": f"{topic} {rnd.choice(FILLER)}", "budget": BUDGET, "as_of": asked,
        "relevant": sorted(n for n in short if n.startswith(topic + "-"))}) + "\n"
        for _ in range(4) for topic in TOPICS) + "\n", encoding="utf-8")
    rep = calibrate(w.r, "t", DEFAULT, embedder_for(DEFAULT.embedder), labels=labels,
                    holdout=0.25)
    assert rep.queries == 40 and rep.positives == rep.fitted * 4
    assert rep.before is not None and rep.after is not None
    assert rep.after >= rep.before + MARGIN, (rep.before, rep.after)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x", "relevant": ["a"], "extra": 1}\n', encoding="utf-8")
    code, _, err = w.cli(capsys, "calibrate", "--ns", "t", "--labels", str(bad))
    assert code == 2 and "bad.jsonl:1" in err
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text('{"query": "redis", "relevant": []}\n' * 3, encoding="utf-8")
    code, _, err = w.cli(capsys, "calibrate", "--ns", "t", "--labels", str(nothing))
    assert code == 1 and "nothing to fit" in err
    assert len(read_labels(labels, "t")) == 40


def test_the_held_out_split_is_seeded_and_never_empty() -> None:
    from hivemind_memory.worker.audit.calibrate import Example

    exs = [Example(f"q{i}", None, datetime(2026, 1, 1, tzinfo=UTC), set(), None)  # type: ignore[arg-type]
           for i in range(10)]
    fit, out = split(exs, 0.2, 1)
    assert len(out) == 2 and len(fit) == 8 and not fit & out
    assert split(exs, 0.2, 1) == (fit, out) and split(exs, 0.2, 2) != (fit, out)
    assert len(split(exs[:2], 0.01, 0)[1]) == 1 and split(exs, 0.0, 0)[1] == set()
