"""Smoke test of ``python -m bench quality`` and ``python -m bench fit`` on one LoCoMo
conversation of the shared folder (read where it lies, never copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import fit_calibration, quality
from bench.locomo import DEFAULT_DATA, load_conversation, recall
from tests.support import IN_CI

SMALLEST = DEFAULT_DATA / "conv-30.json"

pytestmark = pytest.mark.skipif(not SMALLEST.exists(),
                                reason=f"the LoCoMo folder is not at {DEFAULT_DATA}")


@pytest.fixture
def one(tmp_path: Path) -> Path:
    (tmp_path / SMALLEST.name).symlink_to(SMALLEST)
    return tmp_path


def test_the_task_is_built_as_the_readme_describes() -> None:
    c = load_conversation(SMALLEST)
    assert c.name == "conv-30" and len(c.notes) == 369 and len(c.questions) == 81
    first = c.notes[0]
    assert first.note_id == "D1:1" and first.text.startswith(f"{first.agent}: ")
    assert first.tokens == -(-len(first.text.encode()) // 4)
    assert (c.notes[1].created_at - first.created_at).total_seconds() == 60
    assert c.asked > max(n.created_at for n in c.notes)
    assert {q.category for q in c.questions} <= {1, 2, 3, 4}
    assert recall({"a", "b"}, ("a", "c")) == 0.5


@pytest.mark.slow
def test_quality_prints_hivemind_beside_the_baselines(
        one: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import bm25s  # noqa: F401  (the bench extra: .ci/run installs it)
    except ImportError:
        if IN_CI:
            pytest.fail("bm25s (the bench extra) is not installed (CI=true: it must be)")
        pytest.skip("bm25s (the bench extra) is not installed")
    assert quality.main(["--data", str(one), "--set", "relevance=bm25"]) == 0
    out = capsys.readouterr().out
    assert "evidence recall, 81 questions" in out
    for row in ("hivemind (default config)", "hivemind relevance=bm25", "bm25s",
                "wordllama cosine", "RRF (k=60)", "the seed's rule", "filled top-down"):
        assert row in out
    ours = next(ln for ln in out.splitlines() if ln.startswith("| hivemind (default"))
    assert float(ours.split("|")[2]) > 0.5  # B=200
    assert "hivemind / best baseline: B=200" in out


@pytest.mark.slow
def test_fit_prints_held_out_recall_and_the_coefficients(
        one: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (one / "conv-26.json").symlink_to(DEFAULT_DATA / "conv-26.json")
    out_toml = tmp_path / "cal.toml"
    assert fit_calibration.main(["--data", str(one), "--l2", "1e-5", "--toml",
                                 str(out_toml)]) == 0
    out = capsys.readouterr().out
    assert "held out" in out and "l2=1e-05:" in out and "FITTED = Calibration(" in out
    assert out_toml.read_text().startswith("[calibration]\nintercept = ")
