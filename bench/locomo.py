"""The LoCoMo retrieval task of ``../shared/benchmarks/locomo-dev/README.md``, built from its
files (never copied into the product or the tests).

Each dialogue turn is a note (one namespace per conversation): note id = its ``dia_id``,
``at`` = its session's date and time plus a minute per turn within the session, author = the
speaker, text = ``"<speaker>: <text>"`` plus the photo caption if any, tokens = the default
estimate. Each question of categories 1-4 with evidence is a query asked one day after the
conversation's last session. The figure is evidence recall: the share of a question's
evidence turns that the packed context holds.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hivemind_memory.projections.state import NoteState

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks" / "locomo-dev"
"""``../shared/benchmarks/locomo-dev`` from the project's root."""
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
"""Question categories measured (5, adversarial, has no usable evidence)."""
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Question:
    """One query of the task."""

    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """One conversation: its notes (turns) and its questions, asked at ``asked``."""

    name: str
    notes: tuple[NoteState, ...]
    questions: tuple[Question, ...]
    asked: datetime


def tokens_of(text: str) -> int:
    """The contract's default estimate: ``ceil(utf8_bytes / 4)``."""
    return max(1, math.ceil(len(text.encode()) / 4))


def note_text(turn: dict[str, object]) -> str:
    """``"<speaker>: <text>"``, plus the photo caption when the speaker shared one."""
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [shares a photo: {caption}]"
    return text


def load_conversation(path: Path) -> Conversation:
    """The notes and questions of one LoCoMo conversation file."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    sessions = sorted((int(m.group(1)), k) for k in raw if (m := _SESSION.fullmatch(k)))
    notes: list[NoteState] = []
    last = datetime.min.replace(tzinfo=UTC)
    for _, key in sessions:
        start = datetime.strptime(raw[f"{key}_date_time"], DATE_FORMAT).replace(tzinfo=UTC)
        last = max(last, start)
        for i, turn in enumerate(raw[key]):
            text = note_text(turn)
            notes.append(NoteState(
                note_id=str(turn["dia_id"]), agent=str(turn["speaker"]), scope="shared",
                kind="note", text=text, tokens=tokens_of(text),
                created_at=start + timedelta(minutes=i)))
    questions: list[Question] = []
    for qa in raw["qa"]:
        if qa["category"] not in CATEGORIES:
            continue
        evidence = tuple(dict.fromkeys(
            part.strip() for item in qa["evidence"] for part in str(item).split(";")
            if part.strip()))
        if evidence:
            questions.append(Question(str(qa["question"]), evidence, int(qa["category"])))
    return Conversation(path.stem, tuple(notes), tuple(questions), last + timedelta(days=1))


def load_task(data: Path) -> list[Conversation]:
    """Every ``conv-*.json`` of ``data``, in name order."""
    files = sorted(data.glob("conv-*.json"))
    if not files:
        raise FileNotFoundError(f"no conv-*.json in {data}")
    return [load_conversation(p) for p in files]


def recall(chosen: set[str], evidence: tuple[str, ...]) -> float:
    """Share of the evidence turns in the packed context."""
    return sum(e in chosen for e in evidence) / len(evidence)
