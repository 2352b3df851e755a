"""Golden answers under the default config: calibrated relevance, the bundled embedder, the
dense candidate stage, passages of long notes, the updated-facts rule, near-identical notes,
the probability floor. ``test_golden`` pins today's lexical path (``GOLDEN_CONFIG``); this
pins what a user gets without a config, so a refactor or a speed-up of the default path that
changes one byte of an answer fails here.

The log is ``test_golden``'s generated log plus notes written as people write them: a long
runbook that is served as passages, facts that changed later (the newer should win), three
copies of one sentence, a paraphrase's target, private notes of another agent.

``HIVEMIND_REGEN_GOLDEN=1 pytest tests/unit/projections/ranking/test_golden_default.py``
rewrites ``tests/golden/answers_default.jsonl``; do that only for a change that is meant to
alter the default answers, and say why in the commit.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import msgspec

from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.worker import runtime
from tests.support.factories import T0, created, iso, revised, used
from tests.unit.projections.ranking.test_golden import answers, check_golden, golden_log

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "answers_default.jsonl"

RUNBOOK = " ".join([
    "Runbook for the payments service.",
    "To restart the payments worker, drain the queue first with the drain command and wait "
    "until the backlog reads zero.",
    "Database failover: promote the replica in the eu-west region, then point the "
    "connection string at it and restart the api pods one at a time.",
    "Certificates are renewed by the cert-manager job every sixty days; if renewal fails, "
    "check the DNS challenge records at the registrar.",
    "The nightly export to the data warehouse runs at 02:00 UTC and takes about forty "
    "minutes; do not deploy between 02:00 and 03:00.",
    "Rotating the Stripe webhook secret: create the new secret in the dashboard, deploy it "
    "as a second accepted secret, and remove the old one a day later.",
] * 6)


def people_log() -> list[dict[str, Any]]:
    day = timedelta(days=1)
    return [
        created("rb1", agent="alice", at=T0 - 40 * day, text=RUNBOOK),
        created("ed1", agent="bob", at=T0 - 300 * day,
                text="Bob's preferred editor is vim with a dark theme."),
        created("ed2", agent="bob", at=T0 - 20 * day,
                text="Bob's preferred editor is now emacs with a dark theme."),
        created("cf1", agent="carol", at=T0 - 90 * day,
                text="The team standup moved to 9:30 in the small meeting room."),
        created("cf2", agent="carol", at=T0 - 5 * day,
                text="The team standup is at 10:15 in the large meeting room now."),
        created("dup1", agent="alice", at=T0 - 3 * day,
                text="Always run the migrations before starting the api server."),
        created("dup2", agent="bob", at=T0 - 2 * day,
                text="Always run the migrations before starting the api server."),
        created("dup3", agent="carol", at=T0 - 1 * day,
                text="Always run the migrations before starting the api server."),
        created("lunch", agent="alice", at=T0 - 12 * day,
                text="Alice is vegetarian and likes Thai curry for lunch on Fridays."),
        created("hobby", agent="bob", at=T0 - 200 * day,
                text="On weekends Bob climbs at the bouldering gym and plays chess online."),
        created("priv", agent="carol", at=T0 - 7 * day, scope="private",
                text="Carol's own reminder: the payments database password rotates monthly."),
        created("old1", agent="alice", at=T0 - 700 * day,
                text="The billing cron job was moved from Jenkins to GitHub Actions."),
        revised("cf1", "r-cf1", agent="carol", at=T0 - 60 * day,
                text="The team standup moved to 9:45 in the small meeting room."),
        used("old1", "u-old1-1", agent="bob", at=T0 - 600 * day),
        used("hobby", "u-hobby-1", agent="alice", at=T0 - 100 * day),
    ]


def default_queries() -> list[dict[str, Any]]:
    at = iso(T0)
    qs: list[dict[str, Any]] = []
    for i, (text, budget, agent) in enumerate([
        ("how do I restart the payments worker", 60, "bob"),
        ("how do I restart the payments worker", 4000, "bob"),
        ("what editor does Bob use", 200, "alice"),
        ("when is the standup and where", 200, ""),
        ("migrations before the api server", 300, "alice"),
        ("food preferences", 200, "bob"),
        ("hobbies", 200, "carol"),
        ("payments database password", 300, "carol"),
        ("payments database password", 300, "bob"),
        ("billing cron job", 100, ""),
        ("what is the capital of Peru", 1000, "alice"),
        ("redis stream checkpoint", 500, "alice"),
        ("agent memory audit", 2000, ""),
        ("scratch decay", 300, "bob"),
        ("what did Bob say three weeks ago", 200, "alice"),  # ed2, 20 days old, in the window
    ]):
        qs.append({"ns": "t", "text": text, "budget": budget, "agent": agent, "as_of": at,
                   "explain": i % 2 == 0})
    return qs


def test_default_config_answers_match_the_golden_file() -> None:
    store = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    assert runtime.build(Settings(), store).cfg == DEFAULT  # a worker without a config file
    check_golden(GOLDEN, answers(DEFAULT, golden_log() + people_log(), default_queries()),
                 default_queries())


def test_the_default_golden_log_exercises_the_default_signals() -> None:
    """The file pins signals only if its answers show them: a passage of the long runbook
    packed alone into a budget smaller than the note, the newer of two facts first, one of
    three identical notes standing for the others, another agent's private note unseen, a
    question with nothing relevant answered with an empty context, the window a question
    names and the note written in it first."""
    got = [msgspec.json.decode(line) for line in GOLDEN.read_bytes().splitlines()]
    ids = [[n["note_id"] for n in a["notes"]] for a in got]
    assert ids[0][0] == "rb1" and "passage" in got[0]["notes"][0]
    assert ids[2].index("ed2") < ids[2].index("ed1")
    assert ids[3].index("cf2") < ids[3].index("cf1")
    assert ids[4] == ["dup1"] and got[4]["notes"][0]["stands_for"] == ["dup2", "dup3"]
    assert "priv" in ids[7] and "priv" not in ids[8]
    assert ids[10] == [] and got[10]["nothing_relevant"]
    [window] = got[14]["time_windows"]  # explain: the window "three weeks ago" names
    assert window["words"] == "three weeks ago" and window["gain"] > 0
    assert window["notes"] == ["ed2"] and ids[14][0] == "ed2"
