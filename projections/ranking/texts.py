"""The texts of a columnar table, one per slot, kept as UTF-8 in a few large byte chunks plus
one array of offsets, instead of one Python ``str`` per note. Pure.

Slots are appended and a slot's text never changes, so the texts of slots ``[0, sealed)`` sit
in immutable *chunks* (each a run of whole texts, e.g. a field of an index snapshot, used as
read without a copy), located by one int64 array of offsets into their concatenation; texts
of later slots wait in a short *tail* list until it holds ``TEXT_CHUNK`` bytes and is sealed
into a new chunk. A text is decoded only when it is read (the notes a query returns).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

TEXT_CHUNK = 4 << 20
"""Bytes of text per chunk (a tail this large is sealed; snapshots store one field per chunk,
so a reader never holds more than one chunk twice while a reply is parsed)."""
DECODED_CHARS = 8 << 20
"""``TextColumn.many`` keeps the texts it decoded, up to this many characters in all (then
it starts over): the notes queries return repeat from query to query and batch to batch."""


T = TypeVar("T")


class SlotMemo(Generic[T]):
    """Values worked out once per slot and kept (slots are only appended; a slot whose value
    changes is ``forget``-ten by its owner): a list by slot and a numpy mask of the slots it
    holds, so a read of slots it holds is one gather (``TextColumn.many``,
    ``Columns.created``)."""

    def __init__(self, blank: T) -> None:
        self._blank = blank
        self.at: list[T] = []
        """The value of slot ``s`` where ``known[s]`` (``blank`` elsewhere)."""
        self.known = np.zeros(0, np.bool_)

    def missing(self, a: IntArray, n: int) -> IntArray:
        """The slots of ``a`` not held (repeats kept), once it covers ``n`` slots."""
        if len(self.known) < n:
            grow = n - len(self.known)
            self.at.extend([self._blank] * grow)  # the list first: never shorter than the mask
            self.known = np.concatenate((self.known, np.zeros(grow, np.bool_)))
        return a[~self.known[a]]

    def put(self, slots: list[int], values: Iterable[T]) -> None:
        at = self.at
        for s, v in zip(slots, values, strict=True):
            at[s] = v
        self.known[slots] = True

    def get(self, slots: Sequence[int]) -> list[T]:
        """The values of ``slots``, all held."""
        if len(slots) <= 1:
            return [self.at[s] for s in slots]
        return list(itemgetter(*slots)(self.at))

    def forget(self, s: int) -> None:
        """Slot ``s``'s value changed: it is worked out again when next read."""
        if s < len(self.known) and self.known[s]:
            self.at[s] = self._blank
            self.known[s] = False

    def clear(self) -> None:
        self.at = [self._blank] * len(self.known)
        self.known[:] = False


class TextColumn:
    """Append-only per-slot texts; see the module docstring."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.first: list[int] = []
        """First slot of each chunk."""
        self.start: list[int] = []
        """Offset of each chunk's first byte in the concatenation of all chunks."""
        self.off: IntArray = np.zeros(1, np.int64)
        """Text of sealed slot ``s``: bytes ``off[s]:off[s + 1]`` of the concatenation."""
        self.tail: list[bytes] = []
        self._tail_bytes = 0
        self._kept: SlotMemo[str] = SlotMemo("")
        """The texts ``many`` decoded."""
        self._decoded_chars = 0

    @classmethod
    def of(cls, texts: Iterable[str]) -> TextColumn:
        """A column holding ``texts`` (slot order), sealed."""
        self = cls()
        for text in texts:
            self.append(text)
        self.seal()
        return self

    @classmethod
    def from_parts(cls, chunks: Sequence[bytes], first: Sequence[int],
                   off: IntArray) -> TextColumn:
        """The column ``parts`` gave (chunks used as they are, no copy). Raises ValueError when
        the parts do not fit together."""
        if len(chunks) != len(first) or len(off) < 1 or int(off[0]) != 0:
            raise ValueError("text chunks, first slots and offsets disagree")
        self = cls()
        self.chunks, self.first, self.off = list(chunks), list(first), off
        at = 0
        for k, chunk in enumerate(chunks):
            lo = first[k]
            hi = first[k + 1] if k + 1 < len(first) else len(off) - 1
            if not 0 <= lo <= hi < len(off) or (k == 0 and lo != 0) or \
                    int(off[lo]) != at or int(off[hi]) - at != len(chunk):
                raise ValueError("text chunk does not match its offsets")
            self.start.append(at)
            at += len(chunk)
        if not chunks and len(off) != 1:
            raise ValueError("text offsets without chunks")
        return self

    def __len__(self) -> int:
        return self.sealed + len(self.tail)

    @property
    def sealed(self) -> int:
        """Slots whose texts are in chunks."""
        return len(self.off) - 1

    def append(self, text: str) -> None:
        """The text of the next slot."""
        b = text.encode()
        self.tail.append(b)
        self._tail_bytes += len(b)
        if self._tail_bytes >= TEXT_CHUNK:
            self.seal()

    def seal(self) -> None:
        """Move the tail into a new chunk."""
        if not self.tail:
            return
        lens = np.fromiter(map(len, self.tail), np.int64, len(self.tail))
        at = int(self.off[-1])
        self.first.append(self.sealed)
        self.start.append(at)
        self.chunks.append(b"".join(self.tail))
        self.off = np.concatenate((self.off, at + np.cumsum(lens)))
        self.tail = []
        self._tail_bytes = 0

    def get(self, s: int) -> str:
        """The text of slot ``s``."""
        t = s - self.sealed
        if t >= 0:
            return self.tail[t].decode()
        k = bisect_right(self.first, s) - 1
        at = self.start[k]
        return self.chunks[k][int(self.off[s]) - at:int(self.off[s + 1]) - at].decode()

    def many(self, slots: Sequence[int], at: IntArray | None = None) -> list[str]:
        """The texts of ``slots`` (``at``: the same as an array, if the caller has it),
        decoded once, then kept (``SlotMemo``, up to ``DECODED_CHARS``)."""
        if not slots:
            return []
        a = np.asarray(slots, np.int64) if at is None else at
        kept = self._kept
        miss = kept.missing(a, len(self))
        if len(miss):
            missing = list(dict.fromkeys(miss.tolist()))  # a slot may be asked twice
            got = self._decode(missing)
            size = sum(map(len, got))
            if self._decoded_chars + size > DECODED_CHARS:  # start over, keeping these slots
                keep = list(dict.fromkeys(a[kept.known[a]].tolist()))
                texts = kept.get(keep)
                kept.clear()
                kept.put(keep, texts)
                self._decoded_chars = sum(map(len, texts))
            kept.put(missing, got)
            self._decoded_chars += size
        return kept.get(slots)

    def kept(self) -> dict[int, str]:
        """The texts ``many`` holds, by slot (for tests and inspection)."""
        return {s: self._kept.at[s] for s in self._kept.known.nonzero()[0].tolist()}

    def _decode(self, slots: Sequence[int]) -> list[str]:
        sealed = self.sealed
        if any(s >= sealed for s in slots):
            return [self.get(s) for s in slots]
        at = np.asarray(slots, np.int64)
        k = np.searchsorted(np.asarray(self.first, np.int64), at, "right") - 1
        base = np.asarray(self.start, np.int64)[k]
        chunks = self.chunks
        return [chunks[c][lo:hi].decode() for c, lo, hi in zip(
            k.tolist(), (self.off[at] - base).tolist(), (self.off[at + 1] - base).tolist(),
            strict=True)]

    def parts(self, target: int | None = None) -> tuple[list[bytes], list[int], IntArray]:
        """Seal, join small neighbouring chunks up to ``target`` bytes (default
        ``TEXT_CHUNK``; large ones stay as they are), and return (chunks, first slots,
        offsets); ``from_parts`` inverts it."""
        self.seal()
        target = TEXT_CHUNK if target is None else target
        chunks: list[bytes] = []
        first: list[int] = []
        start: list[int] = []
        group: list[bytes] = []
        size = 0
        for k, chunk in enumerate(self.chunks):
            if group and size + len(chunk) > target:
                chunks.append(group[0] if len(group) == 1 else b"".join(group))
                group, size = [], 0
            if not group:
                first.append(self.first[k])
                start.append(self.start[k])
            group.append(chunk)
            size += len(chunk)
        if group:
            chunks.append(group[0] if len(group) == 1 else b"".join(group))
        self.chunks, self.first, self.start = chunks, first, start
        return chunks, first, self.off
