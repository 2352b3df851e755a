"""Smoke test of ``python -m bench quality --task longmemeval`` on the first questions of the
shared LongMemEval-S development file (read where it lies, never copied)."""

from __future__ import annotations

import pytest

from bench import longmemeval, quality
from tests.support import IN_CI

DATA = longmemeval.DEFAULT_DATA / longmemeval.FILE

pytestmark = pytest.mark.skipif(not DATA.exists(),
                                reason=f"the LongMemEval file is not at {DATA}")


@pytest.mark.slow
def test_the_task_is_built_as_the_readme_describes() -> None:
    qs = longmemeval.load_task(longmemeval.DEFAULT_DATA)
    assert len(qs) == 105 and sum(q.abstention for q in qs) == 10
    assert sum(len(q.notes) for q in qs) == 51_601
    assert sum(len(q.evidence) for q in qs if not q.abstention) > 0
    assert all(not q.evidence for q in qs if q.abstention)  # their labels are ignored
    q = qs[0]
    first = q.notes[0]
    assert first.note_id.startswith("0.") and first.note_id.endswith(":0")
    assert first.text.startswith(f"{first.agent}: ") and first.agent in ("user", "assistant")
    assert first.tokens == -(-len(first.text.encode()) // 4)
    assert (q.notes[1].created_at - first.created_at).total_seconds() == 60
    assert q.asked >= max(n.created_at for n in q.notes)
    assert set(q.newest) <= set(q.evidence) and q.newest
    assert max(len(n.text.encode()) for x in qs for n in x.notes) <= longmemeval.MAX_TEXT_BYTES
    answerable = [x for x in qs if not x.abstention]
    # the halves the last session's figures were measured on
    assert [sum(longmemeval.half(x) == h for x in answerable) for h in (0, 1)] == [34, 61]
    assert sum(longmemeval.answer_in_evidence(x) for x in answerable) == 40


@pytest.mark.slow
def test_quality_prints_hivemind_beside_the_baselines(
        capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import bm25s  # noqa: F401  (the bench extra: .ci/run installs it)
    except ImportError:
        if IN_CI:
            pytest.fail("bm25s (the bench extra) is not installed (CI=true: it must be)")
        pytest.skip("bm25s (the bench extra) is not installed")
    assert quality.main(["--task", "longmemeval", "--limit", "3", "--halves",
                         "--set", "relevance=bm25"]) == 0
    out = capsys.readouterr().out
    assert "LongMemEval turn-level evidence recall, 3 questions" in out
    for row in ("hivemind (default config)", "hivemind relevance=bm25",
                "bm25s, sort, fill top-down (stop", "bm25s, sort, fill skipping",
                "wordllama cosine", "RRF (k=60)", "the seed's rule", "KUnew B=500",
                "abstention tokens B=1000", "knowledge-update @200", "answer B=500",
                "whole turns B=200", "## half 0 (", "## half 1 ("):
        assert row in out
    ours = next(ln for ln in out.splitlines() if ln.startswith("| hivemind (default"))
    assert float(ours.split("|")[3]) > 0.3  # recall at B=500
    assert "hivemind (default config) / best baseline: B=200" in out
