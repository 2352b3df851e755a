"""A namespace's term dictionary without a Python object per term. Pure.

Term ids are given in insertion order (0, 1, 2, ...) and never change. Sealed terms live in one
UTF-8 buffer, each followed by ``\\n`` (a term never holds one: the tokenizer splits on
whitespace), located by an offset array, and are found by a sorted array of their hashes with
the id of each (a binary search, then the bytes compared: a hash collision costs a second
compare, never a wrong id). Terms added since the last seal wait in a small dict until it holds
``SEAL_FRACTION`` of the sealed ones. About 28 bytes a term (its UTF-8, an 8-byte offset, an
8-byte hash, a 4-byte id) against ~115 as a ``dict[str, int]`` entry with its ``str`` and
``int``: 1.1 MiB -> 0.3 MiB for 12,571 terms.

Hashes are Python's ``hash`` of the term, salted per process: they are never stored (a
snapshot stores the buffer; ``from_joined`` hashes again).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np
import numpy.typing as npt

SEAL_FRACTION = 0.125
"""The unsealed dict is sealed into the arrays once it holds this share of the sealed terms
(and at least ``SEAL_MIN`` terms)."""
SEAL_MIN = 256


class NativeLookup(Protocol):
    """What this module calls of the C kernel (checked against ``_terms.pyi``)."""

    def lookup(self, terms: list[str], hashes: npt.NDArray[np.int64],
               ids: npt.NDArray[np.int32], off: npt.NDArray[np.int64],
               buf: bytes) -> list[int]: ...


_built: NativeLookup | None
try:
    from hivemind_memory.projections.ranking import _terms as _built
except ImportError:  # pragma: no cover - an install without a C compiler
    _built = None

native: NativeLookup | None = _built
"""``TermTable.lookup``'s search and compare over the sealed terms in C
(``projections/ranking/_terms.c``), when it was built; otherwise (or set to None) the Python
loop of ``lookup`` (the reference: the tests run both and require the same ids). A kept
text's words are looked up when a note's passages and word set are first derived (the rules'
``ranker.KeptTexts``): ~3,000 instructions a word in Python, most of a dense query's
derivations."""


class TermTable:
    """Term -> id; see the module docstring. Reads like the ``dict[str, int]`` it replaces
    (``get``, ``[]``, ``in``, ``len``, iteration in id order); ``table[term] = len(table)``
    adds a term."""

    __slots__ = ("_buf", "_hash", "_ids", "_off", "_tail")

    def __init__(self, terms: Iterable[str] = ()) -> None:
        self._buf = b""
        self._off: npt.NDArray[np.int64] = np.zeros(1, np.int64)
        self._hash: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self._ids: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self._tail: dict[str, int] = {}
        for t in terms:
            self._tail[t] = len(self._tail)
        self.seal()

    @classmethod
    def from_joined(cls, joined: bytes) -> TermTable:
        """The table of ``b"\\n".join(terms)`` (``joined()``'s bytes; ids in that order)."""
        self = cls()
        if not joined:
            return self
        buf = joined + b"\n"
        ends = np.flatnonzero(np.frombuffer(buf, np.uint8) == 10)
        self._buf = buf
        self._off = np.concatenate((np.zeros(1, np.int64), (ends + 1).astype(np.int64)))
        self._index(buf[:-1].decode().split("\n"), 0, full=True)
        return self

    def _index(self, terms: list[str], first: int, full: bool = False) -> None:
        h = np.fromiter(map(hash, terms), np.int64, len(terms))
        ids = np.arange(first, first + len(terms), dtype=np.int32)
        if not full:
            h = np.concatenate((self._hash, h))
            ids = np.concatenate((self._ids, ids))
        order = np.argsort(h, kind="stable")
        self._hash, self._ids = h[order], ids[order]

    @property
    def sealed(self) -> int:
        return len(self._off) - 1

    def seal(self) -> None:
        """Move the terms added since the last seal into the arrays."""
        if not self._tail:
            return
        new = list(self._tail)
        enc = [t.encode() + b"\n" for t in new]
        lens = np.fromiter(map(len, enc), np.int64, len(enc))
        first = self.sealed
        self._off = np.concatenate((self._off, self._off[-1] + np.cumsum(lens)))
        self._buf = self._buf + b"".join(enc)
        self._index(new, first)
        self._tail = {}

    def __len__(self) -> int:
        return self.sealed + len(self._tail)

    def term(self, t: int) -> str:
        """The term of id ``t``."""
        if t >= self.sealed:
            return list(self._tail)[t - self.sealed]
        return self._buf[int(self._off[t]):int(self._off[t + 1]) - 1].decode()

    def get(self, term: str, default: int | None = None) -> int | None:
        """The id of ``term`` (``default`` when it is not in the table)."""
        t = self._tail.get(term)
        if t is not None:
            return t
        h = self._hash
        if not len(h):
            return default
        key = hash(term)
        i = int(np.searchsorted(h, key))
        if i < len(h) and int(h[i]) == key:
            want = term.encode() + b"\n"
            buf, off = self._buf, self._off
            while i < len(h) and int(h[i]) == key:
                tid = int(self._ids[i])
                if buf[int(off[tid]):int(off[tid + 1])] == want:
                    return tid
                i += 1
        return default

    def lookup(self, terms: list[str]) -> list[int]:
        """The id of each of ``terms`` (-1: not in the table): ``get``'s, one search for all
        (a hash shared by two terms falls back to ``get``)."""
        h = self._hash
        n = len(h)
        if not n:
            return [self._tail.get(t, -1) for t in terms]
        kernel = native
        if kernel is not None:
            found = kernel.lookup(terms if type(terms) is list else list(terms), h, self._ids,
                                  self._off, self._buf)
            if self._tail and -1 in found:  # not sealed: maybe added since the last seal
                tail = self._tail
                found = [tail.get(t, -1) if i == -1 else i
                         for t, i in zip(terms, found, strict=True)]
            return found
        keys = np.fromiter(map(hash, terms), np.int64, len(terms))
        pos = np.minimum(np.searchsorted(h, keys), n - 1)
        same = (h[pos] == keys).tolist()
        tid = self._ids[pos].astype(np.int64)
        starts = self._off[tid].tolist()
        ends = (self._off[tid + 1] - 1).tolist()
        buf, tail, get = self._buf, self._tail, self.get
        out: list[int] = []
        for term, hit, t, a, z in zip(terms, same, tid.tolist(), starts, ends, strict=True):
            if hit and buf[a:z] == term.encode():
                out.append(t)
            else:
                got = tail.get(term) if not hit else get(term)
                out.append(-1 if got is None else got)
        return out

    def __getitem__(self, term: str) -> int:
        t = self.get(term)
        if t is None:
            raise KeyError(term)
        return t

    def __contains__(self, term: object) -> bool:
        return isinstance(term, str) and self.get(term) is not None

    def __setitem__(self, term: str, t: int) -> None:
        """Add ``term`` with the next id (``t`` must be ``len(self)``)."""
        if t != len(self) or term in self:
            raise ValueError(f"term {term!r}: ids are given in order, once ({t} != {len(self)})")
        self._tail[term] = t
        if len(self._tail) >= max(SEAL_MIN, SEAL_FRACTION * self.sealed):
            self.seal()

    def __iter__(self) -> Iterator[str]:
        return self.iter_from(0)

    def iter_from(self, first: int) -> Iterator[str]:
        """The terms of ids ``first``, ``first + 1``, ... in order."""
        n = self.sealed
        if first < n:
            yield from self._buf[int(self._off[first]):-1].decode().split("\n") \
                if n else ()
        yield from list(self._tail)[max(0, first - n):]

    def keys(self) -> list[str]:
        """The terms in id order (as ``dict.keys`` listed them)."""
        return list(self)

    def joined(self) -> bytes:
        """Every term in id order, ``\\n``-separated (what ``from_joined`` reads)."""
        self.seal()
        return self._buf[:-1]


class StemIndex:
    """The ``english`` analyzer's view of a ``TermTable``: each term's stem (or none: a stop
    word) and, per stem, the ids of its terms in ascending order, in arrays (a CSR over the
    terms covered at the last rebuild, plus a small dict of those added since)."""

    __slots__ = ("_csr_n", "_n", "_order", "_ptr", "_stem_of", "_tail", "stems")

    def __init__(self) -> None:
        self.stems = TermTable()
        self._stem_of: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        """Stem id of each term (-1: a stop word)."""
        self._n = 0
        self._csr_n = 0
        self._order: npt.NDArray[np.int32] = np.zeros(0, np.int32)
        self._ptr: npt.NDArray[np.int64] = np.zeros(1, np.int64)
        self._tail: dict[int, list[int]] = {}

    def __len__(self) -> int:
        """Terms covered."""
        return self._n

    def add(self, stems: Iterable[str | None]) -> None:
        """The stems of the next terms (ids ``len(self)``, ``len(self) + 1``, ...)."""
        table = self.stems
        got: list[int] = []
        for stem in stems:
            if stem is None:
                got.append(-1)
                continue
            sid = table.get(stem)
            if sid is None:
                sid = len(table)
                table[stem] = sid
            got.append(sid)
        first = self._n
        self._stem_of = np.concatenate((self._stem_of[:first], np.array(got, np.int32)))
        self._n = first + len(got)
        for t, sid in enumerate(got, first):
            if sid >= 0:
                self._tail.setdefault(sid, []).append(t)
        if self._n - self._csr_n >= max(SEAL_MIN, SEAL_FRACTION * self._csr_n):
            self._rebuild()

    def _rebuild(self) -> None:
        sid = self._stem_of[:self._n]
        tids = np.flatnonzero(sid >= 0)
        sids = sid[tids]
        self._order = tids[np.argsort(sids, kind="stable")].astype(np.int32)
        ptr = np.zeros(len(self.stems) + 1, np.int64)
        np.cumsum(np.bincount(sids, minlength=len(self.stems)), out=ptr[1:])
        self._ptr = ptr
        self._csr_n = self._n
        self._tail = {}
        self.stems.seal()

    def get(self, stem: str, default: list[int] | None = None) -> list[int]:
        """The ids of the terms whose stem is ``stem``, ascending (``default`` or [] when
        none)."""
        sid = self.stems.get(stem)
        if sid is None:
            return [] if default is None else default
        out: list[int] = []
        if sid + 1 < len(self._ptr):
            out = self._order[int(self._ptr[sid]):int(self._ptr[sid + 1])].tolist()
        return out + self._tail.get(sid, [])

    def stop_terms(self) -> npt.NDArray[np.int64]:
        """The ids of the terms without a stem (stop words), ascending."""
        return np.flatnonzero(self._stem_of[:self._n] < 0)
