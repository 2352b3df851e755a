"""The docs hold together: no page speaks of project history a reader cannot look up (issue
numbers), every relative link leads to a file (and heading) that exists, every repository
path a page names exists, and every ``hivemind_memory`` import a snippet shows imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.support.docs import FENCE, ROOT, headings

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").glob("*.md"),
                ROOT / "tests" / "MUTATION.md"])
"""Every page a reader of the repository meets."""
LINKED = [p for p in PAGES if p.name == "README.md" or p.parent.name in ("docs", "deploy")]
"""The pages whose links are checked (MUTATION.md names mutants, not links)."""
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
"""The pages that describe the code as it is now, so every path they name must exist."""
ISSUE = re.compile(r"\bissues?\s*#?\d+", re.I)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TOP = ("events", "projections", "worker", "api_stub", "tests", "deploy", "bench", "docs", ".ci",
       ".typecheck")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP)})/(?:[\w.-]+/)*"
                  r"(?:[\w-]+\.\w+)?)(?![\w/])")
"""A repository path: one of the top-level folders, then folders, then a file with an
extension or nothing (``tests/unit/``). A name relative to a folder, like
``lua/commit_batch.lua`` in a module list, is not matched, nor a rate like ``events/s``."""


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def prose(text: str) -> str:
    """``text`` without its fenced blocks (links and headings inside code do not count)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return "\n".join(out)


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, _, title in headings(page.read_text(encoding="utf-8")):
        s = slug(title)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_page_mentions_an_issue_number(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [(text.count("\n", 0, m.start()) + 1, m.group()) for m in ISSUE.finditer(text)]
    assert not found, f"{rel(page)}: issue numbers at lines {found}"


@pytest.mark.parametrize("page", LINKED, ids=rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no file {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {rel(dest)})")
    assert not broken, f"{rel(page)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", DOCS, ids=rel)
def test_every_path_a_page_names_exists(page: Path) -> None:
    missing = sorted({m.rstrip(".") for m in PATH.findall(page.read_text(encoding="utf-8"))
                      if not (ROOT / m.rstrip(".")).exists()})
    assert not missing, f"{rel(page)} names paths that do not exist: {missing}"


def test_the_slug_follows_github() -> None:
    assert slug("The HTTP API (`hivemind serve`)") == "the-http-api-hivemind-serve"
    assert slug("Why not 5 % a day: a real sweep") == "why-not-5--a-day-a-real-sweep"
    assert slug("Behaviour where the contract is silent (our choices)") == \
        "behaviour-where-the-contract-is-silent-our-choices"


@pytest.mark.parametrize("page", DOCS, ids=rel)
def test_the_snippets_imports_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for block in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M):
        for mod, names in re.findall(r"^from (hivemind_memory[\w.]*) import ([\w, ]+)", block,
                                     re.M):
            module = importlib.import_module(mod)
            for name in (n.strip() for n in names.split(",")):
                assert hasattr(module, name), f"{rel(page)}: {mod} has no {name}"


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The patterns catch an issue number, a stale path and a broken anchor."""
    assert ISSUE.search("the engine (issue 9)") and ISSUE.search("Issue #12's pass")
    assert not ISSUE.search("an issue of 9 notes")
    assert PATH.findall("see `projections/rank.py`, `lua/x.lua`, 7k events/s, `tests/unit/`") \
        == ["projections/rank.py", "tests/unit/"]
    page = tmp_path / "p.md"
    page.write_text("# A title\n\n## Two words\n\n```sh\n# not a heading\n```\n")
    assert anchors(page) == {"a-title", "two-words"}
