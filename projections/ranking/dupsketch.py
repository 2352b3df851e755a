"""The near-duplicate lookup's keys: MinHash bands of a note's analyzed terms, and its twin key.

Pure (no Redis, no clock). The projector files every active note under these keys
(``projections.store.dupindex``); a write looks its own keys up and computes the exact word
overlap (``projections.ranking.similarity``) on the few notes filed under one of them, so the
check costs a lookup, not a ranking of the namespace.

* **Twin key**: a digest of the note's normalised text (``normalise``: Unicode NFKC, casefold,
  every run of whitespace one space, none at the ends). Two texts are twins when their
  normalised forms are equal.
* **Band keys**: the MinHash signature of the note's distinct analyzed terms (the config's
  analyzer, the terms ``similarity.terms`` compares), ``bands`` x ``rows`` values, cut into
  ``bands`` bands of ``rows`` values; each band's digest gives a key: a bucket (one of
  ``2**BUCKET_BITS``) and a fingerprint (the digest's next ``FP_BYTES`` bytes), so the notes
  a bucket holds by chance (the bands of unrelated notes folded into it) are told apart from
  those that share the band without being counted. Two term sets whose Jaccard overlap is
  ``J`` share each band with probability ``p = J**rows``, independently; a note is a
  candidate when it shares at least ``min_hits`` of them (``band_recall``: the binomial
  tail). ``rows`` is the largest that keeps that chance at least ``duplicate_lsh_recall`` at
  ``J = duplicate_threshold``: with 64 bands, 3 hits and 3 rows, 0.990 at 0.5, 0.99997 at
  0.6, while a note of overlap 0.2 (what unrelated notes of a small vocabulary share) is one
  with probability 0.015, of 0.1 with probability 0.00004. A note without terms (only stop
  words) has no band keys: its overlap with anything is 0.
* **Records**: each note's term digests, 16 bits a term (``short_hashes``), with its id, so a
  write bounds the overlap of a candidate (``overlaps``: never below the word overlap) without
  its text, and reads the text only of those that reach the threshold.

The hash family: each term's 64-bit BLAKE2b digest, xored with a per-row seed and mixed by
SplitMix64's finaliser, all in numpy uint64 arithmetic (wrapping, the same on every machine).
Written here rather than taken from ``datasketch``, which needs SciPy for its LSH parameters.
Only digests are kept: no text, and no term, is recoverable from a key without guessing it.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.analyzer import analyze
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.similarity import terms

DIGEST_BYTES = 8
"""Bytes of every key's digest (a member of the index is the digest, then the note id)."""
MAX_ROWS = 16
"""The most rows a band may have (a threshold of 1 needs no more to be all but exact)."""
_VERSION = "minhash3"
"""Names this layout of keys; a change of it (or of the spec) asks for a rebuild."""
BUCKET_BITS = 18
"""Band keys are folded into ``2**BUCKET_BITS`` buckets (3 bytes each; the twin key keeps
its 8): a bucket holds the bands of several unrelated notes (about ``notes * bands / 2**18``:
2.4 at 10k notes, 24 at 100k), so the index costs a few dozen bytes a band and note instead
of a hash entry each (a hash entry per band value would cost ~5 KB a note)."""
FP_BYTES = 2
"""Each entry of a bucket starts with the fingerprint of the band that filed it (the band
digest's 16 bits above the bucket's): the lookup counts only the entries whose fingerprint is
its own band's, found by a plain substring search (C, in Redis) instead of a Lua step per
entry, so the notes a bucket holds by chance (more as the namespace grows) cost a scan of
bytes, not a count. A chance entry passes with probability ``2**-16``."""
ENTRY_BYTES = FP_BYTES + DIGEST_BYTES
"""Bytes of one entry of a bucket: a fingerprint, then the ``note_key``. The twin key's
bucket has entries of the same width (fingerprint ``TWIN_FP``)."""
TWIN_FP = bytes(FP_BYTES)
"""The fingerprint of a twin key's entries (the twin key itself is a whole 8-byte digest)."""
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


U64 = npt.NDArray[np.uint64]
U16 = npt.NDArray[np.uint16]


def _mix(z: U64) -> U64:
    """SplitMix64's finaliser over uint64 values (wrapping multiplication)."""
    z = (z ^ (z >> np.uint64(30))) * _C1
    z = (z ^ (z >> np.uint64(27))) * _C2
    out: U64 = z ^ (z >> np.uint64(31))
    return out


_SEEDS = _mix(np.arange(1, 256 * MAX_ROWS + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
"""One seed per signature value (the most any spec uses), fixed by construction."""


@dataclass(frozen=True, slots=True)
class DupSpec:
    """How the keys are made: the analyzer and the banding. The index records ``tag``; a
    write whose spec differs does not trust an index made with another one."""

    analyzer: str
    bands: int
    rows: int
    min_hits: int = 1
    """Bands a note must share to be a candidate (a lookup's rule; not in ``tag``)."""
    bucket_cap: int = 0
    """A band whose bucket holds more notes than this may go uncounted (a lookup's rule;
    not in ``tag``; 0: every band is counted)."""
    skips: int = 0
    """The most bands a lookup leaves uncounted for ``bucket_cap`` (not in ``tag``)."""

    @property
    def tag(self) -> str:
        """The spec as the index records it, e.g. ``minhash1 english 32x3``."""
        return f"{_VERSION} {self.analyzer} {self.bands}x{self.rows}/{BUCKET_BITS}"


def band_recall(overlap: float, bands: int, rows: int, min_hits: int = 1) -> float:
    """The chance that two term sets of Jaccard ``overlap`` share at least ``min_hits`` of
    their ``bands`` band keys (each shared with probability ``overlap ** rows``)."""
    p = overlap ** rows
    below = sum(math.comb(bands, k) * p ** k * (1.0 - p) ** (bands - k)
                for k in range(min(min_hits, bands + 1)))
    return max(0.0, 1.0 - below)


def spec_of(cfg: RankingConfig) -> DupSpec:
    """The spec ``cfg`` asks for: its analyzer, ``duplicate_lsh_bands`` bands,
    ``duplicate_lsh_min_hits`` hits, the most rows (up to ``MAX_ROWS``) that keep
    ``band_recall`` at ``duplicate_threshold`` at least ``duplicate_lsh_recall`` (1 when even
    one row does not), ``duplicate_lsh_bucket_cap``, and the most bands a lookup may leave
    uncounted for it while ``band_recall`` over the bands still counted stays at least
    ``duplicate_lsh_recall`` (the slack the rows leave: 6 of 64 bands of 3 rows, 3 hits, at
    0.5 and 0.98; 0 without a cap)."""
    return _spec(cfg.analyzer, cfg.duplicate_threshold, cfg.duplicate_lsh_bands,
                 cfg.duplicate_lsh_min_hits, cfg.duplicate_lsh_recall,
                 cfg.duplicate_lsh_bucket_cap)


@lru_cache(maxsize=64)
def _spec(analyzer: str, t: float, b: int, h: int, want: float, cap: int) -> DupSpec:
    """``spec_of``'s work, cached: every checked write asks for its config's spec."""
    rows = max((r for r in range(1, MAX_ROWS + 1) if band_recall(t, b, r, h) >= want),
               default=1)
    skips = max((s for s in range(b - h + 1) if band_recall(t, b - s, rows, h) >= want),
                default=0) if cap else 0
    return DupSpec(analyzer, b, rows, h, cap, skips)


def normalise(text: str) -> str:
    """The form twins share: NFKC, casefolded (NFKC again, as casefolding may undo it), every
    run of whitespace one space, none at either end."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


def _digest(kind: bytes, payload: bytes) -> bytes:
    return hashlib.blake2b(kind + payload, digest_size=DIGEST_BYTES).digest()


def twin_key(text: str) -> bytes:
    """The digest of ``normalise(text)``."""
    return _digest(b"t", normalise(text).encode("utf-8", "surrogatepass"))


@lru_cache(maxsize=1 << 16)
def term_hash(term: str) -> int:
    """A term's 64-bit digest (cached: a namespace's vocabulary repeats)."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


def signature(term_set: Iterable[str], spec: DupSpec) -> U64 | None:
    """The MinHash signature (``bands * rows`` uint64) of a term set; None when empty."""
    return _signature(np.fromiter((term_hash(t) for t in term_set), dtype=np.uint64), spec)


def _signature(hs: U64, spec: DupSpec) -> U64 | None:
    """The MinHash signature of the term digests ``hs`` (any order); None when empty."""
    if not len(hs):
        return None
    k = spec.bands * spec.rows
    mixed = _mix(hs[:, None] ^ _SEEDS[None, :k])
    out: U64 = mixed.min(axis=0)
    return out


def band_key(digest: int) -> bytes:
    """A band digest's key: its bucket (the low ``BUCKET_BITS``, 3 bytes big-endian), then
    its fingerprint (the next ``8 * FP_BYTES`` bits, big-endian)."""
    bucket = digest & ((1 << BUCKET_BITS) - 1)
    fp = (digest >> BUCKET_BITS) & ((1 << (8 * FP_BYTES)) - 1)
    return bucket.to_bytes(3, "big") + fp.to_bytes(FP_BYTES, "big")


_BAND_KINDS = tuple(b"b" + bytes([j]) for j in range(256))
"""Each band's digest prefix (``_digest``'s kind for band ``j``), made once."""
_KEY_BYTES = 3 + FP_BYTES
"""A band key's width: its bucket (3 bytes), then its fingerprint."""
assert BUCKET_BITS <= 24 and _KEY_BYTES <= 8


def _band_keys(sig: U64 | None, spec: DupSpec) -> list[bytes]:
    """The distinct ``band_key`` of a signature's bands, in band order. The bands' digests
    are made one by one (BLAKE2b), their keys all at once in numpy: the same bytes as
    ``band_key`` of each digest, at a fraction of a write's CPU."""
    if sig is None:
        return []
    raw = sig.astype("<u8").tobytes()
    w = spec.rows * 8
    blake = hashlib.blake2b
    digests = np.frombuffer(b"".join(
        blake(_BAND_KINDS[j] + raw[j * w:(j + 1) * w], digest_size=DIGEST_BYTES).digest()
        for j in range(spec.bands)), dtype="<u8")
    bucket = digests & np.uint64((1 << BUCKET_BITS) - 1)
    fp = (digests >> np.uint64(BUCKET_BITS)) & np.uint64((1 << (8 * FP_BYTES)) - 1)
    packed = ((bucket << np.uint64(8 * FP_BYTES)) | fp).astype(">u8").tobytes()
    skip = 8 - _KEY_BYTES
    return list(dict.fromkeys(packed[i + skip:i + 8] for i in range(0, len(packed), 8)))


@dataclass(frozen=True, slots=True)
class Probe:
    """What a write looks up: its twin key (8 bytes), its band keys (``band_key``: bucket and
    fingerprint), its terms and their sorted ``short_hashes`` (to bound its overlap with each
    candidate)."""

    twin: bytes
    bands: list[bytes]
    terms: frozenset[str]
    hashes: U16


def probe(text: str, spec: DupSpec, cfg: RankingConfig) -> Probe:
    """The keys of ``text`` under ``spec`` (terms by ``cfg``'s analyzer, as ``similarity``)."""
    mine = terms(text, cfg)
    hs = np.fromiter((term_hash(t) for t in mine), dtype=np.uint64)
    return Probe(twin_key(text), _band_keys(_signature(hs, spec), spec), mine,
                 np.sort((hs & SHORT).astype(np.uint16)))


SHORT = np.uint64(0xFFFF)
"""A filed term digest keeps the low 16 bits of ``term_hash``: two bytes a term."""


def short_hashes(term_set: Iterable[str]) -> U16:
    """The sorted 16-bit digests (``term_hash``'s low bits) of a term set: what a note files
    so a write can bound its overlap without the text. Distinct terms may share a digest
    (a chance of 1/65,536 a pair), so ``overlaps`` on them can only come out *above* the
    word overlap, never below: a prefilter that drops no near-duplicate."""
    hs = np.fromiter((term_hash(t) for t in term_set), dtype=np.uint64)
    return np.sort((hs & SHORT).astype(np.uint16))


def note_key(note_id: str) -> bytes:
    """The ``DIGEST_BYTES`` a note is filed as in the band buckets (the note's record, under
    the same digest, gives its id back)."""
    return _digest(b"n", note_id.encode("utf-8", "surrogatepass"))


def record(note_id: str, term_set: Iterable[str]) -> bytes:
    """A note's record: the count of its term digests (4 bytes, little-endian), its
    ``short_hashes`` (little-endian uint16), then its id (UTF-8)."""
    hs = short_hashes(term_set)
    return len(hs).to_bytes(4, "little") + hs.astype("<u2").tobytes() + \
        note_id.encode("utf-8", "surrogatepass")


def parse_record(rec: bytes) -> tuple[str, bytes]:
    """A record's note id and its packed term digests (``record``'s inverse)."""
    n = int.from_bytes(rec[:4], "little")
    return rec[4 + 2 * n:].decode("utf-8", "surrogatepass"), rec[4:4 + 2 * n]


def overlaps(mine: U16, theirs: list[bytes]) -> list[float]:
    """The Jaccard overlap of the sorted term digests ``mine`` with each of ``theirs``
    (packed as ``record`` packs them), in one vectorised pass: shared / (|mine| + |theirs| -
    shared), with every term of theirs whose digest is among mine counted as shared. Exactly
    ``similarity.word_overlap`` unless two distinct terms share a digest, and then only
    above it (0 when either is empty)."""
    n = len(mine)
    out = [0.0] * len(theirs)
    full = [i for i, b in enumerate(theirs) if len(b) >= 2]
    if not n or not full:
        return out
    arrs = [np.frombuffer(theirs[i], dtype="<u2", count=len(theirs[i]) // 2) for i in full]
    sizes = np.fromiter((len(a) for a in arrs), dtype=np.int64, count=len(arrs))
    flat = np.concatenate(arrs)
    at = np.minimum(np.searchsorted(mine, flat), n - 1)
    hit = (mine[at] == flat).astype(np.int64)
    shared = np.add.reduceat(hit, np.concatenate(([0], np.cumsum(sizes)[:-1])))
    for i, s, k in zip(full, shared.tolist(), sizes.tolist(), strict=True):
        out[i] = min(1.0, s / (n + k - s)) if n + k - s > 0 else 1.0
    return out


@dataclass(frozen=True, slots=True)
class Filing:
    """How an active note is filed: its ``note_key``, the keys it is filed under (the twin
    key and ``TWIN_FP`` first, then the band keys: a bucket's field, then the fingerprint its
    entry starts with; none but the twin key for a note without terms), and its
    ``record``."""

    note: bytes
    keys: list[bytes]
    record: bytes


def filing(note_id: str, text: str, spec: DupSpec) -> Filing:
    """How the active note ``note_id`` of text ``text`` is filed under ``spec``."""
    ts = frozenset(analyze(tokenize(text), spec.analyzer))
    hs = np.fromiter((term_hash(t) for t in ts), dtype=np.uint64)
    return Filing(note_key(note_id),
                  [twin_key(text) + TWIN_FP, *_band_keys(_signature(hs, spec), spec)],
                  record(note_id, ts))


def split_member(m: bytes) -> tuple[bytes, bytes]:
    """A filing (a ``Filing`` key, then the note key) as the bucket's field and the entry
    (fingerprint and note key) it holds there."""
    return m[:-ENTRY_BYTES], m[-ENTRY_BYTES:]


def band_hits(bands: Sequence[bytes], buckets: Sequence[bytes | None], min_hits: int,
              bucket_cap: int = 0, skips: int = 0) -> list[bytes]:
    """The note keys filed under at least ``min_hits`` of a write's band keys ``bands``
    (``band_key``: bucket, then fingerprint), given each band's bucket as read from the lookup
    (``buckets[i]`` for ``bands[i]``: its entries concatenated, None when empty), in the
    order of the keys read as little-endian integers. The rule of ``lua/dup_lookup.lua``: up
    to ``skips`` bands whose bucket holds more than ``bucket_cap`` entries are not counted,
    the largest first (ties: the earlier band; ``bucket_cap`` 0 counts every band); an entry
    counts for a band when it starts with the band's fingerprint (a bucket files a note once
    under a band). All buckets are compared in one vectorised pass: the cost is the bytes
    read, not a Python step per entry."""
    if len(bands) != len(buckets):
        raise ValueError(f"band_hits: {len(bands)} band keys but {len(buckets)} buckets")
    sizes = [len(v) // ENTRY_BYTES if v else 0 for v in buckets]
    if bucket_cap > 0 and skips > 0:
        big = sorted((i for i, n in enumerate(sizes) if n > bucket_cap),
                     key=lambda i: (-sizes[i], i))
        for i in big[:skips]:
            sizes[i] = 0
    if sum(sizes) < min_hits:
        return []
    buf = b"".join(v[:n * ENTRY_BYTES] for v, n in zip(buckets, sizes, strict=True)
                   if v and n)
    entries = np.frombuffer(buf, dtype=np.uint8).reshape(-1, ENTRY_BYTES)
    fps = np.frombuffer(b"".join(b[3:3 + FP_BYTES] for b in bands),
                        dtype=np.uint8).reshape(-1, FP_BYTES)
    want = np.repeat(fps, sizes, axis=0)
    mine = (entries[:, :FP_BYTES] == want).all(axis=1)
    if int(mine.sum()) < min_hits:
        return []
    notes = np.ascontiguousarray(entries[mine, FP_BYTES:]).view("<u8").ravel()
    got, counts = np.unique(notes, return_counts=True)
    return [k.tobytes() for k in got[counts >= min_hits]]
