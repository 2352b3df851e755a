"""Every Python and TypeScript snippet of the README and the guide runs as written against a
real server that knows the README's token (``localhost:8080`` becomes its address). A snippet
that imports an adapter's framework skips when that extra is missing (fails under
``CI=true``); the TypeScript ones run on Node from a fresh npm project that installs
``api_stub/ts`` as the guide says."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from hivemind_memory.api_stub.server.tokens import TokenTable
from tests.adapters.conftest import framework
from tests.support.docs import GUIDE, README, fenced, section
from tests.support.frontdoor import Live, start_live
from tests.support.node import ts_package

PAGES = [README, GUIDE]
SNIPPETS = [(page, lang, i, block) for page in PAGES for lang in ("python", "ts")
            for i, block in enumerate(fenced(page.read_text(encoding="utf-8"), lang))]
FRAMEWORKS = {"langchain": "langchain_core", "langgraph": "langgraph",
              "llamaindex": "llama_index.core"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    (block,) = fenced(section(README, "Quick start"), "toml")
    srv = start_live(f"memory://{tmp_path_factory.mktemp('docs') / 'store'}",
                     tokens=TokenTable.from_entries(tomllib.loads(block)["token"]))
    yield srv
    srv.stop()


def test_the_pages_have_the_snippets_this_runs() -> None:
    assert {(p.name, lang) for p, lang, _, _ in SNIPPETS} == {
        ("README.md", "python"), ("README.md", "ts"), ("guide.md", "python"), ("guide.md", "ts")}
    assert len([s for s in SNIPPETS if "integrations" in s[3]]) >= 4


@pytest.mark.parametrize(("page", "lang", "index", "block"), SNIPPETS,
                         ids=[f"{p.name}-{lang}-{i}" for p, lang, i, _ in SNIPPETS])
def test_the_snippet_runs(page: Path, lang: str, index: int, block: str, live: Live,
                          tmp_path: Path) -> None:
    code = block.replace("http://localhost:8080", live.base)
    if lang == "python":
        for extra, module in FRAMEWORKS.items():
            if f"integrations.{extra}" in block:
                framework(module)
        cmd = [sys.executable, "-c", code]
    else:
        ts = ts_package()
        subprocess.run(["npm", "run", "-s", "build"], cwd=ts, check=True, capture_output=True,
                       timeout=300)
        (tmp_path / "package.json").write_text('{"name": "snippet", "type": "module"}\n')
        subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund",
                        "--loglevel=error", str(ts)], cwd=tmp_path, check=True,
                       capture_output=True, timeout=300)
        assert shutil.which("node")
        (tmp_path / "snippet.mjs").write_text(code)
        cmd = ["node", "snippet.mjs"]
    got = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         check=False)
    assert got.returncode == 0, f"{page.name} {lang} snippet {index}:\n{got.stderr[-3000:]}"
    assert not re.search(r"Traceback|Error:", got.stderr), got.stderr[-3000:]
