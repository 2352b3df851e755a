"""The docs as the tests read them: the pages, a section under its heading, its fenced blocks,
and a console session as ``(command, expected output)`` pairs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"
FENCE = re.compile(r"^(```|~~~)")


def headings(text: str) -> list[tuple[int, int, str]]:
    """``(offset, level, title)`` of every markdown heading outside fenced code."""
    out: list[tuple[int, int, str]] = []
    fenced = False
    offset = 0
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^(#{1,6}) +(.*?)\s*$", line)):
            out.append((offset, len(m.group(1)), m.group(2)))
        offset += len(line)
    return out


def section(path: Path, title: str) -> str:
    """The text of the section headed ``title`` (at any level) of ``path``, up to the next
    heading of the same or a higher level."""
    text = path.read_text(encoding="utf-8")
    found = headings(text)
    for i, (start, level, name) in enumerate(found):
        if name == title:
            end = next((o for o, lv, _ in found[i + 1:] if lv <= level), len(text))
            return text[start:end]
    raise AssertionError(f"{path.name} has no heading {title!r}")


def fenced(text: str, lang: str) -> list[str]:
    """The bodies of the fenced blocks of ``text`` tagged ``lang``, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def session(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The tokens file (the first ``toml`` block) and the ``(command, expected output)`` pairs
    of the first ``console`` block of ``text``."""
    tomls, consoles = fenced(text, "toml"), fenced(text, "console")
    assert tomls and consoles, "a session needs a toml block (tokens) and a console block"
    steps: list[tuple[str, str]] = []
    lines = consoles[0].splitlines()
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), lines[i]
        cmd = lines[i][2:]
        i += 1
        while True:  # a command goes on until its quotes close
            try:
                shlex.split(cmd)
                break
            except ValueError:
                cmd += "\n" + lines[i]
                i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        steps.append((cmd, "\n".join(out)))
    return tomls[0], steps
