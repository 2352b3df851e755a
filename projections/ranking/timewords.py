"""The time a question names, relative to when it is asked: a pure parser (no clock: ``now`` is
the query's ``as_of``, or the worker's clock read once at the edge).

``named_days(text, now)`` finds the time expressions of a question and returns, for each, the
span of days it names (``Named``: UTC days, ``start`` inclusive, ``end`` exclusive) and the
words that named it; ``window(named, now, fraction, min_days)`` widens a span by a tolerance
that grows with how long ago it is (``Calibration.time_window_fraction``): people remember
recent days exactly and older ones roughly ("two weeks ago" said of 11 to 17 days ago).

The forms (case-insensitive; numbers as digits or words up to twenty, tens up to ninety,
"a"/"an"/"one", "a couple of" 2, "a few" 3):

* ``N days|weeks|months|years ago``: the day that far back (months and years by the
  calendar, the day of month clamped: a month before March 31 is February 28 or 29);
  ``the day before yesterday`` is 2 days ago;
* ``today``, ``yesterday``;
* ``last week|month|year``: the calendar week (Monday to Sunday), month or year before the
  current one; ``last weekend``: the Saturday and Sunday before the current week;
* ``this week|month|year``: from its first day to today;
* ``last <weekday>``: the latest such day before today (a week ago when today is one);
* ``in <Month> [[,|of] <year>]``: that month (without a year, the latest one that has begun: in
  February, "in March" is last year's); ``in <year>`` (1900 to 2199): that year;
* ``on <Month> <day>[st|nd|rd|th] [[,|of] <year>]`` and ``on <day> <Month> [<year>]``: that day
  (without a year, the latest one not after today).

What names no window: "0 days ago" (say "today"), a date that does not exist ("February 30"),
a count so large the day falls before year 1, any time after today ("in 2999" asked in 2026:
the window would hold no note written before the question); these are left out, and the
question's words still count as words. "13 months ago" is fine (13 calendar months back).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

from hivemind_memory.projections.ranking.columns import micros
from hivemind_memory.projections.ranking.config import Calibration

DAY = timedelta(days=1)

_SMALL = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
          "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen", "twenty")
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
NUMBER_WORDS: dict[str, int] = {w: i for i, w in enumerate(_SMALL)} | _TENS | {
    "a": 1, "an": 1, "a couple of": 2, "a couple": 2, "couple of": 2, "couple": 2, "a few": 3,
    "few": 3}
"""Words a count may be spelled with (besides digits and "twenty-one" style compounds)."""
MONTHS: dict[str, int] = {m.lower(): i for i, m in enumerate(calendar.month_name) if m} | {
    m.lower(): i for i, m in enumerate(calendar.month_abbr) if m and m != "May"} | {"sept": 9}
WEEKDAYS: dict[str, int] = {d.lower(): i for i, d in enumerate(calendar.day_name)}
MAX_COUNT = 10_000
"""Counts above this name no window (no note is that old)."""
MAX_WINDOWS = 8
"""A question names at most this many windows (the first it writes; the rest of its time
words count as words only): each window costs a pass over the namespace's notes, and a
16 KiB question repeating "N days ago" named 1,249 of them (110-195 ms of CPU at 10,000
notes against 2-7 ms with the signal off, review 2026-12-03). No question of the
LongMemEval and LoCoMo dev sets names more than 2."""

_NUM = (r"(?P<n>\d{1,5}|(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few|an?|"
        r"(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[\s-]+(?:one|two|three|"
        r"four|five|six|seven|eight|nine))?|" + "|".join(sorted(_SMALL, key=len, reverse=True))
        + ")")
_MONTH = "(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAYNUM = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20|21)\d\d)"
_THEN_YEAR = r"(?:,?\s+|\s+of\s+)" + _YEAR
"""A year after a month or a day: "March 2025", "March, 2025", "March of 2025"."""
_FORMS: tuple[tuple[str, str], ...] = (
    ("ago", _NUM + r"\s+(?P<unit>day|week|month|year)s?\s+ago"),
    ("before_yesterday", r"the\s+day\s+before\s+yesterday"),
    ("today", r"today"),
    ("yesterday", r"yesterday"),
    ("last_weekend", r"last\s+weekend"),
    ("last_period", r"last\s+(?P<unit>week|month|year)"),
    ("this_period", r"this\s+(?P<unit>week|month|year)"),
    ("last_weekday", r"last\s+(?P<weekday>" + "|".join(WEEKDAYS) + ")"),
    ("on_month_day", r"on\s+" + _MONTH + r"\s+" + _DAYNUM + "(?:" + _THEN_YEAR + ")?"),
    ("on_day_month", r"on\s+(?:the\s+)?" + _DAYNUM + r"(?:\s+of)?\s+" + _MONTH
     + "(?:" + _THEN_YEAR + ")?"),
    ("in_month", r"in\s+" + _MONTH + "(?:" + _THEN_YEAR + ")?"),
    ("in_year", r"in\s+" + _YEAR),
)
_GROUP = re.compile(r"\(\?P<(\w+)>")
"""The named groups of each form, renamed per form below (``n`` -> ``ago_n``...)."""


def _compile() -> re.Pattern[str]:
    parts = []
    for name, rx in _FORMS:
        parts.append(rf"(?P<{name}>" + _GROUP.sub(rf"(?P<{name}_\1>", rx) + r"\b)")
    return re.compile(r"\b(?:" + "|".join(parts) + ")")


_PATTERN = _compile()
"""Every form, over lower-case text (twice as fast as ``re.IGNORECASE``)."""
_PATTERN_ANY_CASE = re.compile(_PATTERN.pattern, re.IGNORECASE)
"""For a text whose lower case has another length (a few non-ASCII letters)."""
_WEEKDAY = "|".join(WEEKDAYS)
_CHEAP = re.compile(r"\b(?:ago|today|yesterday|(?:last|this)\s+(?:week|month|year|"
                    + _WEEKDAY + r")|in\s+(?:(?:19|20|21)\d\d|" + _MONTH.replace("?P<month>", "")
                    + r")|on\s+(?:the\s+)?(?:\d|" + _MONTH.replace("?P<month>", "") + r"))",
                    re.IGNORECASE)
"""What every form begins with or ends on: a question without one names no time (the usual
case: one search, no parse)."""


@dataclass(frozen=True)
class Named:
    """A span of days a question names: ``start`` inclusive, ``end`` exclusive (UTC
    midnights), and ``words``, the expression as the question wrote it."""

    words: str
    start: datetime
    end: datetime


class Span(NamedTuple):
    """A window in microseconds since the epoch: ``[start, end)`` the window, ``[named_start,
    named_end)`` the days named inside it (``calibrated.window_weights``)."""

    start: int
    named_start: int
    named_end: int
    end: int


@dataclass(frozen=True)
class Window:
    """The notes written in ``[start, end)`` are in the window ``named`` gives (``named``
    widened by the tolerance)."""

    named: Named
    start: datetime
    end: datetime


def count_of(word: str) -> int | None:
    """A count as a question spells it ("3", "three", "twenty-one", "a", "a couple of")."""
    w = " ".join(word.lower().replace("-", " ").split())
    if w.isdigit():
        return int(w)
    if w in NUMBER_WORDS:
        return NUMBER_WORDS[w]
    parts = w.split()
    if len(parts) == 2 and parts[0] in _TENS and parts[1] in NUMBER_WORDS:
        return _TENS[parts[0]] + NUMBER_WORDS[parts[1]]
    return None


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def _months_back(d: date, n: int) -> date:
    """``d`` ``n`` calendar months back, its day clamped to the month's last."""
    k = d.year * 12 + (d.month - 1) - n
    y, m = divmod(k, 12)
    return date(y, m + 1, min(d.day, calendar.monthrange(y, m + 1)[1]))


def _month_span(y: int, m: int) -> tuple[date, date]:
    end = date(y + 1, 1, 1) if m == 12 else date(y, m + 1, 1)
    return date(y, m, 1), end


def _span(form: str, g: dict[str, str | None], today: date) -> tuple[date, date] | None:
    """The days ``[start, end)`` one matched form names, or None (see the module's list)."""
    if form == "ago":
        n = count_of(g["n"] or "")
        if n is None or n <= 0 or n > MAX_COUNT:
            return None
        unit = (g["unit"] or "").lower()
        if unit == "day":
            d = today - n * DAY
        elif unit == "week":
            d = today - 7 * n * DAY
        elif unit == "month":
            d = _months_back(today, n)
        else:
            d = _months_back(today, 12 * n)
        return d, d + DAY
    if form == "before_yesterday":
        return today - 2 * DAY, today - DAY
    if form == "today":
        return today, today + DAY
    if form == "yesterday":
        return today - DAY, today
    monday = today - today.weekday() * DAY
    if form == "last_weekend":
        return monday - 2 * DAY, monday
    if form in ("last_period", "this_period"):
        unit = (g["unit"] or "").lower()
        if unit == "week":
            start = monday
        elif unit == "month":
            start = today.replace(day=1)
        else:
            start = date(today.year, 1, 1)
        if form == "this_period":
            return start, today + DAY
        if unit == "week":
            return start - 7 * DAY, start
        if unit == "month":
            return _months_back(start, 1), start
        return date(today.year - 1, 1, 1), start
    if form == "last_weekday":
        back = (today.weekday() - WEEKDAYS[(g["weekday"] or "").lower()]) % 7 or 7
        d = today - back * DAY
        return d, d + DAY
    month = MONTHS.get((g.get("month") or "").lower().rstrip("."), 0)
    named_year = g.get("year")
    year = int(named_year) if named_year else None
    if form in ("on_month_day", "on_day_month"):
        day = int(g["day"] or 0)
        y = today.year if year is None else year
        if not 1 <= day <= 31 or day > calendar.monthrange(y, month)[1]:
            if year is None and month == 2 and day == 29:  # the latest leap year's
                y -= (y % 4) or 4
                while not calendar.isleap(y):
                    y -= 4
            else:
                return None
        d = date(y, month, day)
        if year is None and d > today:
            y -= 1
            while day > calendar.monthrange(y, month)[1]:  # February 29
                y -= 1
            d = date(y, month, day)
        return d, d + DAY
    if form == "in_month":
        y = today.year if year is None else year
        if year is None and month > today.month:
            y -= 1
        return _month_span(y, month)
    if form == "in_year":
        assert year is not None
        return date(year, 1, 1), date(year + 1, 1, 1)
    raise AssertionError(form)  # pragma: no cover - every form is handled above


def named_days(text: str, now: datetime) -> list[Named]:
    """The spans of days ``text`` names relative to ``now`` (an aware datetime; its UTC day
    is today), in the order they appear, the first ``MAX_WINDOWS``; none that begin after
    today (see the module's list of forms and of what names no window)."""
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware, got {now!r}")
    if not _CHEAP.search(text):
        return []
    today = now.astimezone(UTC).date()
    out: list[Named] = []
    low = text.lower()
    found = (_PATTERN.finditer(low) if len(low) == len(text)
             else _PATTERN_ANY_CASE.finditer(text))
    for m in found:
        form = m.lastgroup
        assert form is not None
        g = {k[len(form) + 1:]: v for k, v in m.groupdict().items()
             if k.startswith(form + "_")}
        try:
            span = _span(form, g, today)
        except (ValueError, OverflowError):  # before year 1, or a month that is none
            span = None
        if span is None or span[0] > today:
            continue
        words = " ".join(text[m.start():m.end()].split())  # as the question wrote them
        out.append(Named(words, _midnight(span[0]), _midnight(span[1])))
        if len(out) == MAX_WINDOWS:
            break
    return out


FIRST = datetime.min.replace(tzinfo=UTC)
"""The earliest a window begins: "2000 years ago" widened by a quarter of its offset would
begin before year 1, which no ``datetime`` holds."""
LAST = datetime.max.replace(tzinfo=UTC)
"""The latest a window ends ("today" asked on December 31, 9999)."""


def window(named: Named, now: datetime, fraction: float, min_days: float) -> Window:
    """``named`` widened on each side by ``fraction`` of how long before ``now`` its middle
    lies, at least ``min_days`` (a note written the evening before or the morning after
    still counts), and never beyond ``FIRST`` or ``LAST``."""
    middle = named.start + (named.end - named.start) / 2
    offset = max(now - middle, timedelta(0))
    tol = max(offset * fraction, timedelta(days=min_days))
    start = named.start - tol if named.start - FIRST > tol else FIRST
    end = named.end + tol if LAST - named.end > tol else LAST
    return Window(named, start, end)


def windows(text: str, now: datetime, fraction: float, min_days: float) -> list[Window]:
    """``window`` of each span ``text`` names (``named_days``)."""
    return [window(n, now, fraction, min_days) for n in named_days(text, now)]


def question_windows(text: str, now: datetime, cal: Calibration) -> list[Window]:
    """The windows ``text`` names under ``cal`` (``time_window_fraction``,
    ``time_window_min_days``)."""
    return windows(text, now, cal.time_window_fraction, cal.time_window_min_days)


def spans_us(found: list[Window]) -> list[Span]:
    """Each window as a ``Span`` in microseconds since the epoch (``columns.micros``)."""
    return [Span(micros(w.start), micros(w.named.start), micros(w.named.end), micros(w.end))
            for w in found]
