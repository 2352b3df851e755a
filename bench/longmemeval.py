"""The LongMemEval-S retrieval task of ``../shared/benchmarks/longmemeval-dev/README.md``, built
from its file (read where it lies, never copied into the product or the tests).

One namespace per question. Each turn is a note: note id ``<session index>.<session
id>:<turn index>``, author = the turn's role, ``at`` = its session's date plus a minute per
turn index, text = ``"<role>: <content>"`` cut to 60,000 bytes, tokens = the default
estimate. The question is asked as of its ``question_date`` (one minute after the last turn
where the history has turns dated after it). Figures: turn-level evidence recall (the share
of the question's ``has_answer`` turns that are packed) over the questions that are not
abstention questions; knowledge-update newest-fact recall (the ``has_answer`` turns of the
session holding the newest evidence turn); the tokens packed for abstention questions; the
share of the questions whose answer string is in their evidence turns whose packed context
holds it (``answer_in_evidence``, ``normalised``); the share of evidence turns packed whole
(not as a passage). ``half`` splits the questions in two by the md5 of ``question_id``.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.locomo import tokens_of
from hivemind_memory.projections.state import NoteState

DEFAULT_DATA = (Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
                / "longmemeval-dev")
"""``../shared/benchmarks/longmemeval-dev`` from the project's root."""
FILE = "longmemeval_s_dev.json.xz"
TYPES = ("single-session-user", "single-session-assistant", "multi-session",
         "knowledge-update", "temporal-reasoning")
"""Question types measured for recall (abstention questions are counted apart)."""
MAX_TEXT_BYTES = 60_000
"""A turn's text is cut to this many bytes (one turn of the set exceeds an event's 64 KiB)."""
DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"


@dataclass(frozen=True)
class Question:
    """One question with its own history (namespace)."""

    qid: str
    qtype: str
    text: str
    asked: datetime
    notes: tuple[NoteState, ...]
    evidence: tuple[str, ...]
    """The ids of the ``has_answer`` turns (empty for abstention questions)."""
    newest: tuple[str, ...]
    """The ``has_answer`` turns of the session holding the newest evidence turn."""
    answer: str = ""
    """The release's ``answer`` when it is a string ("" for a number)."""

    @property
    def abstention(self) -> bool:
        return self.qid.endswith("_abs")


def parse_date(s: str) -> datetime:
    return datetime.strptime(s, DATE_FORMAT).replace(tzinfo=UTC)


def cut(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (never inside a character)."""
    raw = text.encode()
    return text if len(raw) <= limit else raw[:limit].decode(errors="ignore")


def load_question(raw: dict[str, object]) -> Question:
    """The notes, evidence and asking time of one question of the release."""
    notes: list[NoteState] = []
    evidence: list[tuple[datetime, str, str]] = []  # (at, session key, note id)
    sessions = raw["haystack_sessions"]
    dates = raw["haystack_dates"]
    sids = raw["haystack_session_ids"]
    assert isinstance(sessions, list) and isinstance(dates, list) and isinstance(sids, list)
    abstention = str(raw["question_id"]).endswith("_abs")
    for si, (sid, date, turns) in enumerate(zip(sids, dates, sessions, strict=True)):
        start = parse_date(str(date))
        for ti, turn in enumerate(turns):
            nid = f"{si}.{sid}:{ti}"
            text = cut(f"{turn['role']}: {turn['content']}")
            at = start + timedelta(minutes=ti)
            notes.append(NoteState(note_id=nid, agent=str(turn["role"]), scope="shared",
                                   kind="note", text=text, tokens=tokens_of(text),
                                   created_at=at))
            if turn.get("has_answer") and not abstention:
                evidence.append((at, f"{si}", nid))
    asked = parse_date(str(raw["question_date"]))
    last = max(n.created_at for n in notes)
    if last > asked:
        asked = last + timedelta(minutes=1)
    newest: tuple[str, ...] = ()
    if evidence:
        top = max(evidence)[1]
        newest = tuple(nid for _, s, nid in evidence if s == top)
    answer = raw.get("answer")
    return Question(str(raw["question_id"]), str(raw["question_type"]),
                    str(raw["question"]), asked, tuple(notes),
                    tuple(nid for _, _, nid in evidence), newest,
                    answer if isinstance(answer, str) else "")


def normalised(text: str) -> str:
    """``text`` casefolded with every run of whitespace one space (for the answer check)."""
    return " ".join(text.casefold().split())


def half(q: Question) -> int:
    """0 or 1: the md5 of the ``question_id``, as an integer, modulo 2 (the dev set's 95
    answerable questions: 34 in half 0, 61 in half 1)."""
    return int(hashlib.md5(q.qid.encode()).hexdigest(), 16) % 2


def answer_in_evidence(q: Question) -> bool:
    """Whether the question's answer is a string found (normalised) in one of its evidence
    turns: only then can a packed context be checked for it."""
    want = normalised(q.answer)
    texts = {n.note_id: n.text for n in q.notes}
    return bool(want) and any(want in normalised(texts[e]) for e in q.evidence)


def load_task(data: Path, limit: int | None = None) -> list[Question]:
    """The questions of ``data``'s file, in the file's order (the first ``limit``)."""
    path = data / FILE
    if not path.exists():
        raise FileNotFoundError(f"no {FILE} in {data}")
    with lzma.open(path, "rt", encoding="utf-8") as fh:
        raw = json.load(fh)
    return [load_question(r) for r in raw[:limit]]
