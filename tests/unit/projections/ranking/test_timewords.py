"""The time a question names (``projections.ranking.timewords``): each form at a fixed ``now``,
the tolerance that grows with the offset, what names no window, and properties over any day
and count."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.timewords import (
    FIRST,
    LAST,
    MAX_WINDOWS,
    count_of,
    named_days,
    question_windows,
    spans_us,
    window,
    windows,
)

NOW = datetime(2023, 5, 5, 10, 30, tzinfo=UTC)
"""A Friday."""


def days(text: str, now: datetime = NOW) -> list[tuple[str, str, str]]:
    return [(n.words, n.start.date().isoformat(), n.end.date().isoformat())
            for n in named_days(text, now)]


@pytest.mark.parametrize(("text", "want"), [
    ("What gardening-related activity did I do two weeks ago?",
     [("two weeks ago", "2023-04-21", "2023-04-22")]),
    ("what did I say 3 days ago", [("3 days ago", "2023-05-02", "2023-05-03")]),
    ("A week ago I read it", [("A week ago", "2023-04-28", "2023-04-29")]),
    ("an hour", []),  # no unit that names a day
    ("a month ago", [("a month ago", "2023-04-05", "2023-04-06")]),
    ("13 months ago", [("13 months ago", "2022-04-05", "2022-04-06")]),
    ("two years ago", [("two years ago", "2021-05-05", "2021-05-06")]),
    ("twenty-one days ago", [("twenty-one days ago", "2023-04-14", "2023-04-15")]),
    ("a couple of days ago", [("a couple of days ago", "2023-05-03", "2023-05-04")]),
    ("a few weeks ago", [("a few weeks ago", "2023-04-14", "2023-04-15")]),
    ("couple days ago", [("couple days ago", "2023-05-03", "2023-05-04")]),  # was no window
    ("what did I say yesterday", [("yesterday", "2023-05-04", "2023-05-05")]),
    ("the day before yesterday", [("the day before yesterday", "2023-05-03", "2023-05-04")]),
    ("anything from today?", [("today", "2023-05-05", "2023-05-06")]),
    ("last week", [("last week", "2023-04-24", "2023-05-01")]),  # Monday to Sunday
    ("last month", [("last month", "2023-04-01", "2023-05-01")]),
    ("last year", [("last year", "2022-01-01", "2023-01-01")]),
    ("this week", [("this week", "2023-05-01", "2023-05-06")]),
    ("this month", [("this month", "2023-05-01", "2023-05-06")]),
    ("this year", [("this year", "2023-01-01", "2023-05-06")]),
    ("last weekend", [("last weekend", "2023-04-29", "2023-05-01")]),
    ("last Saturday", [("last Saturday", "2023-04-29", "2023-04-30")]),
    ("last friday", [("last friday", "2023-04-28", "2023-04-29")]),  # today is one: a week
    ("in March", [("in March", "2023-03-01", "2023-04-01")]),
    ("in May", [("in May", "2023-05-01", "2023-06-01")]),  # this month: begun
    ("in June", [("in June", "2022-06-01", "2022-07-01")]),  # not begun: last year's
    ("in Sept. 2021", [("in Sept. 2021", "2021-09-01", "2021-10-01")]),
    ("in March 2022", [("in March 2022", "2022-03-01", "2022-04-01")]),
    # "of" before the year (it named this year's March: "in March" alone)
    ("in March of 2022", [("in March of 2022", "2022-03-01", "2022-04-01")]),
    ("in March, 2022", [("in March, 2022", "2022-03-01", "2022-04-01")]),
    ("on March 5th of 2021", [("on March 5th of 2021", "2021-03-05", "2021-03-06")]),
    ("on the 5th of March of 2021", [("on the 5th of March of 2021", "2021-03-05",
                                      "2021-03-06")]),
    ("in March of the year", [("in March", "2023-03-01", "2023-04-01")]),  # no year after
    ("in 2022", [("in 2022", "2022-01-01", "2023-01-01")]),
    ("on March 5th", [("on March 5th", "2023-03-05", "2023-03-06")]),
    ("on May 6", [("on May 6", "2022-05-06", "2022-05-07")]),  # tomorrow: last year's
    ("on the 5th of March", [("on the 5th of March", "2023-03-05", "2023-03-06")]),
    ("on 5 March 2021", [("on 5 March 2021", "2021-03-05", "2021-03-06")]),
    ("on February 29", [("on February 29", "2020-02-29", "2020-03-01")]),
    ("İstanbul trip LAST WEEK", [("LAST WEEK", "2023-04-24", "2023-05-01")]),  # not ASCII
    ("a week ago, and last month too", [("a week ago", "2023-04-28", "2023-04-29"),
                                        ("last month", "2023-04-01", "2023-05-01")]),
])
def test_each_form_names_its_days(text: str, want: list[tuple[str, str, str]]) -> None:
    assert days(text) == want


@pytest.mark.parametrize("text", [
    "0 weeks ago",  # say "today"
    "zero days ago",
    "How many days ago did I buy it?",  # no count: a question about time, not a window
    "on February 30",  # no such day
    "on March 32",
    "in 2999",  # after the question: no note was written then
    "9999 years ago",  # before year 1
    "100000 days ago",  # over MAX_COUNT
    "lasting weeks",
    "the last weekday",
    "ago",
    "What is my favourite colour?",
])
def test_what_names_no_window(text: str) -> None:
    assert named_days(text, NOW) == []


def test_now_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        named_days("yesterday", datetime(2023, 5, 5))


def test_today_is_the_utc_day_of_now() -> None:
    """Late on May 5 in UTC-5 is May 6 in UTC: "yesterday" is May 5."""
    late = datetime(2023, 5, 5, 22, tzinfo=UTC) + timedelta(hours=5)
    assert days("yesterday", late) == [("yesterday", "2023-05-05", "2023-05-06")]


@pytest.mark.parametrize(("text", "tol_days"), [
    ("yesterday", 1.0),  # 1.4 days back: a quarter is 0.35, the least is 1
    ("two weeks ago", 13.938 / 4),  # the named day's middle is 13.94 days before 10:30
    ("four weeks ago", 27.938 / 4),
    ("last month", None),
])
def test_the_tolerance_grows_with_the_offset(text: str, tol_days: float | None) -> None:
    [n] = named_days(text, NOW)
    w = window(n, NOW, 0.25, 1.0)
    middle = n.start + (n.end - n.start) / 2
    want = max((NOW - middle) * 0.25, timedelta(days=1)) if tol_days is None \
        else timedelta(days=tol_days)
    assert abs((n.start - w.start) - want) < timedelta(minutes=2)
    assert w.end - n.end == n.start - w.start
    assert w.start < n.start < n.end < w.end


def test_the_fraction_and_the_least_tolerance_are_the_callers() -> None:
    [n] = named_days("two weeks ago", NOW)
    assert window(n, NOW, 0.0, 0.0).start == n.start
    assert window(n, NOW, 0.0, 2.0).start == n.start - timedelta(days=2)
    assert window(n, NOW, 0.5, 1.0).start < window(n, NOW, 0.25, 1.0).start


@pytest.mark.parametrize(("text", "now"), [
    ("what happened 2020 years ago", NOW),  # year 3 less a quarter of 2,020 years
    ("what did I say 1700 years ago", NOW),  # year 323, less a quarter of 1,700 years
    ("today", datetime(1, 1, 1, 5, tzinfo=UTC)),  # the least tolerance before year 1
    ("this year", datetime(1, 6, 1, tzinfo=UTC)),
    ("yesterday", datetime(9999, 12, 31, 5, tzinfo=UTC)),  # and after 9999
])
def test_a_window_past_what_a_datetime_holds_stops_there(text: str, now: datetime) -> None:
    """A window widened beyond year 1 or 9999 (which ``datetime`` cannot hold: the query
    crashed with OverflowError) begins at ``FIRST`` or ends at ``LAST``; its other side and
    the named days are as usual, and it converts to microseconds."""
    [n] = named_days(text, now)
    [w] = windows(text, now, 0.25, 1.0)
    assert w.named == n
    middle = n.start + (n.end - n.start) / 2
    tol = max((now - middle) * 0.25, timedelta(days=1))
    if now.year > 5000:
        assert (w.start, w.end) == (n.start - tol, LAST)
    else:
        assert (w.start, w.end) == (FIRST, n.end + tol)
    [s] = spans_us([w])
    assert s.start <= s.named_start < s.named_end <= s.end


def test_a_question_names_at_most_max_windows() -> None:
    """The first ``MAX_WINDOWS`` times a question names, in its order (a time after today
    is not one of them); the others are left out (a long question repeating times cost a
    pass over the notes for each)."""
    text = "in 2099 and " + ", ".join(f"{n} days ago" for n in range(1, 21))
    got = named_days(text, NOW)
    assert MAX_WINDOWS == 8
    assert [n.words for n in got] == [f"{n} days ago" for n in range(1, 9)]
    assert len(windows("yesterday " * 100, NOW, 0.25, 1.0)) == MAX_WINDOWS


def test_windows_in_microseconds() -> None:
    [w] = windows("yesterday", NOW, 0.25, 1.0)
    [s] = spans_us([w])
    assert s.start < s.named_start < s.named_end < s.end
    assert s.named_end - s.named_start == 86_400 * 10**6
    assert s.named_start - s.start == 86_400 * 10**6


def test_question_windows_read_the_calibration() -> None:
    from hivemind_memory.projections.ranking.config import DEFAULT, with_overrides

    wide = with_overrides(DEFAULT, {"calibration": {"time_window_fraction": 0.5}}).calibration
    [a] = question_windows("two weeks ago", NOW, DEFAULT.calibration)
    [b] = question_windows("two weeks ago", NOW, wide)
    assert b.start < a.start and b.end > a.end and a.named == b.named


@pytest.mark.parametrize(("word", "n"), [("7", 7), ("seven", 7), ("a", 1), ("An", 1),
                                         ("a couple of", 2), ("few", 3), ("twenty", 20),
                                         ("ninety nine", 99), ("forty-two", 42),
                                         ("many", None), ("seventy many", None)])
def test_count_of(word: str, n: int | None) -> None:
    assert count_of(word) == n


UNITS = {"day": 1, "week": 7}


@settings(max_examples=200, deadline=None)
@given(st.dates(date(1990, 1, 1), date(2100, 12, 31)), st.integers(1, 400),
       st.sampled_from(["day", "week", "month", "year"]), st.integers(0, 23))
def test_n_units_ago_names_the_day_that_far_back(today: date, n: int, unit: str,
                                                 hour: int) -> None:
    """The window of "N units ago" holds the day N units back and lies before now."""
    now = datetime(today.year, today.month, today.day, hour, tzinfo=UTC)
    got = named_days(f"what happened {n} {unit}s ago", now)
    if unit in UNITS:
        back = today - timedelta(days=n * UNITS[unit])
    else:
        months = n if unit == "month" else 12 * n
        k = today.year * 12 + today.month - 1 - months
        y, m = divmod(k, 12)
        import calendar
        back = date(y, m + 1, min(today.day, calendar.monthrange(y, m + 1)[1]))
    [d] = got
    assert d.start.date() == back and d.end - d.start == timedelta(days=1)
    [w] = windows(f"{n} {unit}s ago", now, 0.25, 1.0)
    assert w.start <= d.start < d.end <= w.end
    assert w.start < now


@settings(max_examples=200, deadline=None)
@given(st.dates(date(1990, 1, 1), date(2100, 12, 31)),
       st.sampled_from(["yesterday", "today", "last week", "last month", "last year",
                        "this week", "this month", "this year", "last weekend",
                        "last monday", "last sunday", "in january", "in december",
                        "on july 4", "on february 29", "in 2000"]))
def test_every_named_span_has_begun_and_lies_in_its_window(today: date, text: str) -> None:
    now = datetime(today.year, today.month, today.day, 12, tzinfo=UTC)
    for w in windows(text, now, 0.25, 1.0):
        assert w.named.start.date() <= today
        assert w.start < w.named.start < w.named.end < w.end
        if text.startswith(("last ", "yesterday")):
            assert w.named.end.date() <= today  # wholly before today
