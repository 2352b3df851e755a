"""``audit reproduce`` after an erasure: a 3-note store written with ``Memory.remember`` (its
near-duplicate check is a lookup: nothing of it is in the audit), six queries (some showed the
note erased later, some did not but were ranked on its words: BM25 statistics, the calibrated
features) and one whose text is the note's own, then one note erased. Every answer an erasure
changed is reported ``erased`` with its cause, the others ``identical``, exit 0; a genuine
difference (the config history lost, the current config another) still exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from hivemind_memory import Memory
from hivemind_memory.projections.store import keys
from hivemind_memory.worker.cli.main import main as hivemind_main

NS = "team-a"
NOTES = ["the vault passphrase is zebra-quartz-4471",
         "deploy the staging cluster on friday after the vault check",
         "the coffee machine on floor two is broken again"]
STATUSES = ("identical", "erased", "DIFFERENT", "skipped")
"""The first word of each answer's line."""
QUERIES = ["vault passphrase", "staging cluster deploy", "coffee machine", "friday",
           "broken machine vault", "zebra"]


def _reproduce(url: str, capsys: pytest.CaptureFixture[str], *extra: str
               ) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = hivemind_main(["audit", "reproduce", "--ns", NS, "--all", "--redis-url", url, *extra])
    got = capsys.readouterr()
    # one line per answer (the in-process worker's log lines may share stdout)
    return code, [ln for ln in got.out.splitlines() if ln.split(" ", 1)[0] in STATUSES], \
        got.err


def test_reproduce_names_answers_an_erasure_changed_and_exits_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"memory://{tmp_path / 'store'}"
    m = Memory(url, ns=NS, agent="alice")
    ops = Memory.over_client(m._t.client, ns=NS, agent="ops",  # type: ignore[attr-defined]
                             admin=True, on_write=m._t.on_write)  # type: ignore[attr-defined]
    try:
        ids = [str(m.remember(t)) for t in NOTES]
        shown = {q: [n.note_id for n in m.recall(q, budget=200).notes] for q in QUERIES}
        m.recall(NOTES[0], budget=200)  # a query quoting the note's text
        secret = ids[0]
        assert any(secret in v for v in shown.values())  # some showed it
        assert any(v and secret not in v for v in shown.values())  # some did not
        code, lines, err = _reproduce(url, capsys)
        assert code == 0 and all(ln.startswith("identical") for ln in lines), lines
        assert len(lines) == 1 + len(QUERIES)  # the quoting recall, six recalls (no checks)

        ops.erase(secret)
        code, lines, err = _reproduce(url, capsys)
        assert code == 0, (lines, err)
        status = {ln.split()[1]: ln for ln in lines}
        assert len(status) == 1 + len(QUERIES)
        assert "0 different" in err
        erased = [ln for ln in lines if ln.startswith("erased")]
        # the recall quoting it: its text was erased with it
        assert sum(f"query text was a version of note {secret}" in ln for ln in erased) == 1
        # every recall ranked on a state holding it, showed it or not (two of the six did
        # not show it), is erased
        assert sum(f"note {secret} erased since" in ln for ln in erased) == len(QUERIES)
        assert sum(secret not in v for v in shown.values()) == 2
        assert all(ln.split()[0] == "erased" for ln in lines)
        assert f"{len(erased)} erased" in err

        # a genuine difference still fails: the config history gone, another config now
        m._t.client.store.delete(keys.configs(NS))  # type: ignore[attr-defined]
        cfg = tmp_path / "other.toml"
        cfg.write_text("min_relevance = 0.99\n")
        code, lines, err = _reproduce(url, capsys, "--config", str(cfg))
        assert code == 1, (lines, err)
        assert any(ln.startswith("DIFFERENT") for ln in lines)
        assert not any(ln.startswith("erased") for ln in lines)  # not the erasure alone
    finally:
        ops.close()
        m.close()
