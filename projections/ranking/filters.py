"""Metadata filters in LangGraph's form: which notes a query may consider at all. Pure.

A filter maps metadata keys to a value (equality) or to operators: ``{"project": "apollo",
"priority": {"$gte": 2}, "lang": {"$in": ["en", "de"]}}``. Every condition must hold (AND).

- Equality (``v`` or ``{"$eq": v}``) holds when the note has the key with the same JSON type
  and value; integers and floats compare as numbers (``1 == 1.0``), a boolean equals only a
  boolean, a string only a string. ``$in``: equal to one of the listed values.
- ``$ne``: not equal, so a note without the key matches (as in LangGraph's store).
- ``$gt``, ``$gte``, ``$lt``, ``$lte``: both numbers (booleans are not numbers) or both
  strings (compared by code point); a note without the key, or with a value of the other
  type, does not match.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from hivemind_memory.events.schema import METADATA_KEY_PATTERN, check_metadata

OPERATORS = ("$eq", "$ne", "$in", "$gt", "$gte", "$lt", "$lte")
"""The operators a filter may use."""
MAX_FILTER_CONDITIONS = 32
"""Most conditions (key and operator pairs) in one filter."""
MAX_IN_VALUES = 100
"""Most values one ``$in`` lists."""

Scalar = str | int | float | bool


class Condition(msgspec.Struct, frozen=True):
    """One condition: the note's ``key`` compared with ``value`` by ``op``."""

    key: str
    op: str
    value: Scalar | tuple[Scalar, ...]


def _scalar(v: Any, path: str) -> Scalar:
    if isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"filter value must be a finite number - at `{path}`")
        return v
    raise ValueError(f"filter value must be a string, number or boolean, got "
                     f"{type(v).__name__} - at `{path}`")


def parse_filter(spec: Any) -> tuple[Condition, ...]:
    """The conditions of a filter object; ``ValueError`` naming the path of what is wrong
    (a key outside ``METADATA_KEY_PATTERN``, an unknown operator, a value that is not a
    scalar, ``$in`` without a list, too many conditions)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"filter must be an object, got {type(spec).__name__} - at `$.filter`")
    out: list[Condition] = []
    for key, want in spec.items():
        path = f"$.filter.{key}"
        if not isinstance(key, str):
            raise ValueError("filter keys must be strings - at `$.filter`")
        try:
            check_metadata({key: ""}, "filter")
        except ValueError:
            raise ValueError(f"filter key {key[:80]!r} must match {METADATA_KEY_PATTERN!r}"
                             " - at `$.filter`") from None
        if isinstance(want, Mapping):
            if not want:
                raise ValueError(f"filter operators must not be empty - at `{path}`")
            for op, v in want.items():
                if op not in OPERATORS:
                    raise ValueError(f"unknown filter operator {str(op)[:20]!r} (one of "
                                     f"{', '.join(OPERATORS)}) - at `{path}`")
                if op == "$in":
                    if not isinstance(v, list | tuple) or not 1 <= len(v) <= MAX_IN_VALUES:
                        raise ValueError(f"$in takes a list of 1 to {MAX_IN_VALUES} values"
                                         f" - at `{path}.$in`")
                    out.append(Condition(key, op, tuple(
                        _scalar(x, f"{path}.$in[{i}]") for i, x in enumerate(v))))
                else:
                    out.append(Condition(key, op, _scalar(v, f"{path}.{op}")))
        else:
            out.append(Condition(key, "$eq", _scalar(want, path)))
    if len(out) > MAX_FILTER_CONDITIONS:
        raise ValueError(f"filter has {len(out)} conditions, at most "
                         f"{MAX_FILTER_CONDITIONS} allowed - at `$.filter`")
    return tuple(out)


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _equal(have: object, want: object) -> bool:
    if isinstance(have, bool) or isinstance(want, bool):
        return type(have) is type(want) and have == want
    if _number(have) and _number(want):
        return have == want
    return type(have) is type(want) and have == want


def _holds(have: object, c: Condition) -> bool:
    op, want = c.op, c.value
    if op == "$eq":
        return have is not None and _equal(have, want)
    if op == "$ne":
        return have is None or not _equal(have, want)
    if op == "$in":
        assert isinstance(want, tuple)
        return have is not None and any(_equal(have, w) for w in want)
    if not ((_number(have) and _number(want))
            or (isinstance(have, str) and isinstance(want, str))):
        return False
    a: Any = have
    if op == "$gt":
        return bool(a > want)
    if op == "$gte":
        return bool(a >= want)
    if op == "$lt":
        return bool(a < want)
    return bool(a <= want)


def matches(meta: Mapping[str, Scalar] | None, conditions: tuple[Condition, ...]) -> bool:
    """Whether a note with ``meta`` (None: no metadata) satisfies every condition."""
    get = (meta or {}).get
    return all(_holds(get(c.key), c) for c in conditions)

