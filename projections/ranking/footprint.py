"""How much memory a ``NamespaceIndex`` holds: what a worker's memory budget counts. Pure.

``index_bytes`` walks everything reachable from the index (its columns, postings, texts,
vectors, and the caches it keeps between queries: decoded texts, BM25 parts of recent words,
layouts of recent askers) and adds up

* every numpy array's ``nbytes`` (an array over a buffer it does not own, e.g. a snapshot's
  reply, counts the buffer once instead),
* every Python object's ``sys.getsizeof`` (containers, strings, ints, datetimes), each
  object once.

Not counted: what the index shares with the rest of the process (the embedder, the config,
interpreter and library code) and what one batch of queries holds while it runs (the
``BatchMemo``, the query embeddings, the results): that is the process's base, which the
budget comes on top of. ``sys.getsizeof`` is what CPython reports; the allocator's own
rounding (up to 16 bytes an object) and fragmentation are not in it.

A walk costs about 0.1 us a reachable object (large lists and dicts of plain values are
summed in C), so a worker measures an index after each load and then only when it grew by
``REMEASURE_GROWTH``, scaling the last figure by the slot count in between
(``worker.memory``).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import numpy as np

_LEAVES = (str, bytes, int, float, bool, complex, type(None), datetime)
"""Values with nothing inside them to walk."""
_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType)
"""What an index may refer to but does not own."""
_BULK = 64
"""A container at least this long whose items are all leaves is summed in one pass."""


def index_bytes(idx: object) -> int:
    """The bytes reachable from ``idx`` (see the module docstring)."""
    seen: set[int] = set()
    return _walk(idx, seen)


def _leaves_sum(items: Iterable[Any], seen: set[int]) -> int | None:
    """The sizes of ``items`` when every one is a leaf (None otherwise)."""
    got = list(items)
    if not all(isinstance(x, _LEAVES) for x in got):
        return None
    fresh = [x for x in got if id(x) not in seen]
    seen.update(map(id, fresh))
    return sum(map(sys.getsizeof, fresh))


def _walk(obj: Any, seen: set[int]) -> int:
    """``obj``'s size and that of everything it reaches, each object counted once."""
    stack = [obj]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += _array_bytes(o, seen)
            continue
        if isinstance(o, _LEAVES):
            total += sys.getsizeof(o)
            continue
        if isinstance(o, _SHARED):
            continue  # classes, functions, modules belong to the process, not the index
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            if len(o) >= _BULK:
                k = _leaves_sum(o.keys(), seen)
                v = _leaves_sum(o.values(), seen)
                if k is not None and v is not None:
                    total += k + v
                    continue
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            if len(o) >= _BULK:
                got = _leaves_sum(o, seen)
                if got is not None:
                    total += got
                    continue
            stack.extend(o)
        else:
            d = getattr(o, "__dict__", None)
            if d is not None:
                stack.extend(d.values())
            for name in getattr(type(o), "__slots__", ()):
                if hasattr(o, name):
                    stack.append(getattr(o, name))
    return total


def _array_bytes(a: np.ndarray, seen: set[int]) -> int:
    """An array's data (its header included), or the buffer it views, counted once."""
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
        if id(base) in seen:
            return 112  # a view of an array already counted: only its header
        seen.add(id(base))
    owner = base.base
    if owner is None:
        return int(base.nbytes) + 112
    if id(owner) in seen:
        return 112
    seen.add(id(owner))
    return sys.getsizeof(owner) + 112 if isinstance(owner, (bytes, bytearray)) \
        else int(base.nbytes) + 112
