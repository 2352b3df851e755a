"""Revisions and supersessions from the outside: the SDK on the embedded store writes them,
queries as of before and after see the old and the new, ``show`` lists the versions, and every
answer served before a revision still reproduces byte for byte (``hivemind audit reproduce``)."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from hivemind_memory import AlreadySuperseded, Memory, NotAllowed, UnknownNote
from hivemind_memory.projections.store.connection import close_embedded
from tests.support import HIVEMIND
from tests.support.factories import T0, iso

BM25 = {"relevance": "bm25"}
"""Lexical relevance: whether a note's words match is then the only way it is a candidate."""


def _ids(res: dict[str, object]) -> list[str]:
    return [n["note_id"] for n in res["notes"]]  # type: ignore[attr-defined, index]


def _texts(res: dict[str, object]) -> dict[str, str]:
    return {n["note_id"]: n["text"] for n in res["notes"]}  # type: ignore[attr-defined, index]


def test_revise_and_supersede_as_of_show_and_reproduce(tmp_path: Path) -> None:
    url = f"memory://{tmp_path / 'store'}"
    t = [iso(T0 + timedelta(days=d)) for d in range(6)]
    with Memory(url, ns="ops", agent="alice") as mem:
        mem.append([{"type": "note.created", "note_id": "deploy", "at": t[0],
                     "text": "Deploys go through ArgoCD on Tuesdays."},
                    {"type": "note.used", "note_id": "deploy", "at": t[1]}])
        before = mem.query("argocd deploys", 200, as_of=t[1], config=BM25)
        assert _texts(before) == {"deploy": "Deploys go through ArgoCD on Tuesdays."}
        mem.append([{"type": "note.revised", "note_id": "deploy", "at": t[2],
                     "text": "Deploys go through Flux on Tuesdays."}])
        # as of before the revision: the old text, ranked on its own words
        old = mem.query("argocd deploys", 200, as_of=t[1], config=BM25)
        assert old == {**before, "query_id": old["query_id"]}
        assert mem.query("flux", 200, as_of=t[1], config=BM25)["notes"] == []
        # after it: the new text, found by its words, not by the old ones; uses kept
        new = mem.query("flux", 200, as_of=t[3], config=BM25)
        assert _texts(new) == {"deploy": "Deploys go through Flux on Tuesdays."}
        assert new["notes"][0]["uses"] == 1
        assert mem.query("argocd", 200, as_of=t[3], config=BM25)["notes"] == []
        live = mem.query("how do deploys go", 300)  # calibrated (default) relevance too
        assert _texts(live).get("deploy") == "Deploys go through Flux on Tuesdays."
        got = mem.get("deploy")
        assert got is not None and (got.version, got.uses) == (2, 1)

        # a supersession: the old note leaves answers from then on, its use carries over
        mem.append([{"type": "note.created", "note_id": "deploy-2", "at": t[4],
                     "text": "Deploys go through Flux, on Tuesdays and Thursdays.",
                     "supersedes": ["deploy"]}])
        then = mem.query("flux deploys", 300, as_of=t[3], config=BM25)
        assert _ids(then) == ["deploy"]
        now = mem.query("flux deploys", 300, as_of=t[5], config=BM25)
        assert _ids(now) == ["deploy-2"] and now["notes"][0]["uses"] == 1
        assert mem.get("deploy") is None  # superseded: not a note one reads any more
        with pytest.raises(AlreadySuperseded):
            mem.remember("Deploys: Flux.", supersedes=["deploy"])
        with pytest.raises(UnknownNote):
            mem.revise("no-such-note", "x")
    with Memory(url, ns="ops", agent="bob") as bob:
        with pytest.raises(NotAllowed):
            bob.revise("deploy-2", "Deploys go through Jenkins.")
        with pytest.raises(NotAllowed):
            bob.remember("Deploys: Jenkins.", supersedes=["deploy-2"])

    close_embedded(url)  # this process lets go of the directory: the CLI opens it
    env = {**os.environ, "HIVEMIND_REDIS_URL": url}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*HIVEMIND, *args], capture_output=True, text=True, env=env,
                              timeout=120, check=False)

    shown = cli("show", "--ns", "ops", "deploy", "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert [(v["version"], v["text"]) for v in doc["versions"]] == [
        (1, "Deploys go through ArgoCD on Tuesdays."), (2, "Deploys go through Flux on Tuesdays.")]
    assert doc["note"]["superseded_by"] == "deploy-2"
    assert "note.created" in {e["type"] for e in doc["events"]}  # deploy-2's, naming it
    text = cli("show", "--ns", "ops", "deploy")
    assert "(superseded by deploy-2)" in text.stdout and "v2  " in text.stdout
    rep = cli("audit", "reproduce", "--ns", "ops", "--all")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    replay = cli("replay", "--ns", "ops", "--verify")
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_remember_reports_near_duplicates_and_can_supersede_them(tmp_path: Path) -> None:
    with Memory(f"memory://{tmp_path / 's'}", ns="ops", agent="alice") as mem:
        a = mem.remember("The staging database is read-only on Fridays.")
        assert a.duplicates == [] and a.superseded == []
        b = mem.remember("On Fridays the staging database is read-only!")
        assert [(d.note_id, d.overlap) for d in b.duplicates or []] == [(str(a), 1.0)]
        assert mem.get(a) is not None  # reported, not superseded
        c = mem.remember("The staging database is read-only on Fridays and Saturdays.",
                         duplicates="supersede")
        assert set(c.superseded) == {str(a), str(b)}
        assert mem.get(a) is None and mem.get(b) is None and mem.get(c) is not None
        far = mem.remember("Lunch is at noon.", duplicates="ignore")
        assert far.duplicates is None
    with Memory(f"memory://{tmp_path / 's'}", ns="ops", agent="bob") as bob:
        d = bob.remember("The staging database is read-only on Fridays and Saturdays!",
                         duplicates="supersede")
        # alice's note is reported, but only its author may supersede it
        assert [x.note_id for x in d.duplicates or []] == [str(c)] and d.superseded == []
