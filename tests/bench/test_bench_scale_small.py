"""``python -m bench scale`` at a tiny size on both targets: every row is measured and checked
against the pure fold (a mismatch exits). No timing assertions (the figures are for people)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from bench import scale
from tests.support import need_cluster_tools

pytestmark = [pytest.mark.redis_server, pytest.mark.redis_cluster]


def test_scale_bench_measures_both_targets(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    need_cluster_tools()
    out = tmp_path / "rows.json"
    assert scale.main(["--events", "400", "--queries", "12", "--workers", "1,2",
                       "--namespaces", "4", "--json", str(out)]) == 0
    rows = msgspec.json.decode(out.read_bytes())
    assert [(r["target"], r["namespaces"], r["workers"]) for r in rows] == [
        (t, 4, w) for t in ("single", "cluster") for w in (1, 2)]
    for r in rows:
        assert r["ingest_eps"] > 0 and r["project_eps"] > 0 and r["query_qps"] > 0
        assert r["notes"] > 10 and r["notes_hash_bytes"] > 0
    printed = capsys.readouterr().out
    assert printed.count("cluster ") == 2 and "queries/s" in printed
