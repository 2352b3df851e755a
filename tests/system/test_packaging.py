"""The wheel installs one import root and nothing else: no generic top-level names
(``events``, ``worker`` ...), no benchmarks, the Lua scripts included, the CLI entry point on
the new root."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_holds_only_hivemind_memory(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("hivemind_memory-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"hivemind_memory"}
    assert not any("bench" in n.split("/") for n in names)
    assert not any(n.startswith("hivemind_memory/tests") for n in names)
    assert "hivemind_memory/projections/store/lua/commit_batch.lua" in names
    assert "hivemind_memory/events/schema.py" in names
    assert {f"hivemind_memory/integrations/{m}.py"
            for m in ("langchain", "langgraph", "llamaindex")} <= set(names)
    assert not any("/ts/" in n or "node_modules" in n for n in names)  # the npm package stays out
    [ep] = [n for n in names if n.endswith("entry_points.txt")]
    assert "hivemind = hivemind_memory.worker.cli:run" in zipfile.ZipFile(wheel).read(
        ep).decode()
