"""The ``analyzer`` config key: ``english`` (the default: Snowball stems, stop words dropped)
vs ``plain`` (the tokens as they are, the default before), on a small labelled set of notes
and queries, and the english BM25 against ``scores_over`` over pre-analysed texts (bit for
bit)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.events.errors import ConfigError
from hivemind_memory.projections.ranking.analyzer import analyze
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, config_from_toml
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.state import NoteState
from tests.support.factories import T0
from tests.support.reference import LexicalIndex, scores_over

ENGLISH = RankingConfig(analyzer="english", relevance="bm25")
PLAIN = RankingConfig(analyzer="plain", relevance="bm25")
"""Lexical relevance under each analyzer: which notes share a word with the query."""
LEGACY_DEFAULT_DIGEST = "e3b0495deb7bc6fe"
"""``DEFAULT.digest()`` before the analyzer key existed (recorded in older audit trails)."""

NOTES = {
    "argo": "Deploys go through ArgoCD",
    "db": "The production database runs Postgres 16",
    "lunch": "Lunch menu for Friday",
    "worker": "We are deploying the new worker",
    "incidents": "Production incidents are reviewed weekly",
    "runbook": "Runbook: restart the stream consumer",
}

LABELLED = [
    # query, what plain finds, what english finds
    ("deploy to production", {"db", "incidents"}, {"argo", "worker", "db", "incidents"}),
    ("deployments", set(), {"argo", "worker"}),
    ("restarting consumers", set(), {"runbook"}),
    ("the", {"db", "worker", "runbook"}, set()),  # a stop word alone matches nothing
    ("postgres", {"db"}, {"db"}),
]


def note(nid: str, text: str, **kw: object) -> NoteState:
    return NoteState(note_id=nid, agent="a", scope="shared", kind="note", text=text,
                     tokens=len(text) // 4 + 1, created_at=T0 - timedelta(days=1), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("query", "plain", "english"), LABELLED)
def test_what_the_english_analyzer_changes(query: str, plain: set[str],
                                           english: set[str]) -> None:
    idx = build_index("t", {k: note(k, t) for k, t in NOTES.items()})
    assert set(idx.relevance(query, None, PLAIN)) == plain
    assert set(idx.relevance(query, None, ENGLISH)) == english
    assert DEFAULT.analyzer == "english"


def test_the_issue_example_ranks_the_argo_note_first_among_deploy_notes() -> None:
    idx = build_index("t", {k: note(k, t) for k, t in NOTES.items()})
    rel = idx.relevance("deploy to production", None, ENGLISH)
    assert rel["argo"] > 0 and rel["argo"] >= rel["worker"]  # shorter note, same term


WORDS = ["deploy", "deploys", "deploying", "Deployed", "the", "to", "run", "runs", "running",
         "production", "product", "x_y", "v2", "café"]


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from([f"n{i}" for i in range(12)]),
                       st.tuples(st.lists(st.sampled_from(WORDS), max_size=10), st.booleans(),
                                 st.booleans()), max_size=12),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.sampled_from(["", "a", "b"]))
def test_english_bm25_equals_scores_over_on_analysed_texts(
        docs: dict[str, tuple[list[str], bool, bool]], q: list[str], agent: str) -> None:
    notes = {k: NoteState(note_id=k, agent="a" if mine else "b",
                          scope="private" if mine else "shared", kind="note",
                          text=" ".join(ws), tokens=1, created_at=T0, forgotten=gone)
             for k, (ws, mine, gone) in docs.items()}
    got = build_index("t", notes).relevance(" ".join(q), None, ENGLISH, agent)
    inc = NamespaceIndex("t")  # note by note, querying in between (cached english lengths)
    for k in sorted(notes):
        inc.put(notes[k])
        inc.relevance(" ".join(q), None, ENGLISH, agent)
    assert inc.relevance(" ".join(q), None, ENGLISH, agent) == got
    shared, own = LexicalIndex(), LexicalIndex()
    for k in sorted(notes):
        n = notes[k]
        if n.forgotten:
            continue
        text = " ".join(analyze(tokenize(n.text), "english"))
        if n.scope == "shared":
            shared.add(k, text)
        elif n.agent == agent:
            own.add(k, text)
    want = scores_over([shared, own], " ".join(analyze(tokenize(" ".join(q)), "english")),
                       ENGLISH)
    assert got == want


def test_analyzer_key_is_validated_and_plain_keeps_the_digest() -> None:
    with pytest.raises(ConfigError, match="analyzer"):
        config_from_toml('analyzer = "german"')
    assert config_from_toml('analyzer = "english"').analyzer == "english"
    first = 'analyzer = "plain"\nrelevance = "bm25"\nbm25_b = 0.75'  # the first release's
    assert config_from_toml(first).digest() == LEGACY_DEFAULT_DIGEST
    assert ENGLISH.digest() != PLAIN.digest()
