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
  ``bands`` bands of ``rows`` values; each band's digest is a key. Two term sets whose Jaccard
  overlap is ``J`` share each band key with probability ``p = J**rows``, independently; a note
  is a candidate when it shares at least ``min_hits`` of them (``band_recall``: the binomial
  tail). ``rows`` is the largest that keeps that chance at least ``duplicate_lsh_recall`` at
  ``J = duplicate_threshold``: with 48 bands, 2 hits and 3 rows, 0.987 at 0.5, 0.9996 at 0.6,
  while a note of overlap 0.1 (what unrelated notes of a small vocabulary share) is one with
  probability 0.001. A note without terms (only stop words) has no band keys: its overlap with
  anything is 0.

The hash family: each term's 64-bit BLAKE2b digest, xored with a per-row seed and mixed by
SplitMix64's finaliser, all in numpy uint64 arithmetic (wrapping, the same on every machine).
Written here rather than taken from ``datasketch``, which needs SciPy for its LSH parameters.
Only digests are kept: no text, and no term, is recoverable from a key without guessing it.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Iterable
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
_VERSION = "minhash1"
"""Names this layout of keys; a change of it (or of the spec) asks for a rebuild."""
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


U64 = npt.NDArray[np.uint64]


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

    @property
    def tag(self) -> str:
        """The spec as the index records it, e.g. ``minhash1 english 32x3``."""
        return f"{_VERSION} {self.analyzer} {self.bands}x{self.rows}"


def band_recall(overlap: float, bands: int, rows: int, min_hits: int = 1) -> float:
    """The chance that two term sets of Jaccard ``overlap`` share at least ``min_hits`` of
    their ``bands`` band keys (each shared with probability ``overlap ** rows``)."""
    p = overlap ** rows
    below = sum(math.comb(bands, k) * p ** k * (1.0 - p) ** (bands - k)
                for k in range(min(min_hits, bands + 1)))
    return max(0.0, 1.0 - below)


def spec_of(cfg: RankingConfig) -> DupSpec:
    """The spec ``cfg`` asks for: its analyzer, ``duplicate_lsh_bands`` bands,
    ``duplicate_lsh_min_hits`` hits, and the most rows (up to ``MAX_ROWS``) that keep
    ``band_recall`` at ``duplicate_threshold`` at least ``duplicate_lsh_recall`` (1 when even
    one row does not)."""
    t, b, h = cfg.duplicate_threshold, cfg.duplicate_lsh_bands, cfg.duplicate_lsh_min_hits
    rows = max((r for r in range(1, MAX_ROWS + 1)
                if band_recall(t, b, r, h) >= cfg.duplicate_lsh_recall), default=1)
    return DupSpec(cfg.analyzer, b, rows, h)


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


def _band_keys(sig: U64 | None, spec: DupSpec) -> list[bytes]:
    if sig is None:
        return []
    raw = sig.astype("<u8").tobytes()
    w = spec.rows * 8
    return [_digest(b"b" + bytes([j]), raw[j * w:(j + 1) * w]) for j in range(spec.bands)]


@dataclass(frozen=True, slots=True)
class Probe:
    """What a write looks up: its twin key, its band keys, its terms and their sorted
    digests (``term_hashes``: for the exact overlap with each candidate)."""

    twin: bytes
    bands: list[bytes]
    terms: frozenset[str]
    hashes: U64


def probe(text: str, spec: DupSpec, cfg: RankingConfig) -> Probe:
    """The keys of ``text`` under ``spec`` (terms by ``cfg``'s analyzer, as ``similarity``)."""
    mine = terms(text, cfg)
    hs = term_hashes(mine)
    return Probe(twin_key(text), _band_keys(_signature(hs, spec), spec), mine, hs)


TERMS_MARK = b"\x00terms\x00\x00"
"""The first ``DIGEST_BYTES`` of a note's terms member (``terms_member``): no digest a key
makes is expected to equal it (a chance of 2**-64 a key)."""


def term_hashes(term_set: Iterable[str]) -> U64:
    """The sorted 64-bit digests (``term_hash``) of a term set: what the exact overlap is
    computed on without the text (two distinct terms share a digest with a chance of 2**-64,
    which would add one shared term)."""
    return np.sort(np.fromiter((term_hash(t) for t in term_set), dtype=np.uint64))


def terms_member(note_id: str, term_set: Iterable[str]) -> bytes:
    """A note's terms member: ``TERMS_MARK``, the note id, a NUL, then its ``term_hashes``
    (little-endian uint64), so a lookup reads a candidate's terms by the lex range of
    ``TERMS_MARK + note_id + NUL`` and computes the exact overlap without its text."""
    return _terms_member(note_id.encode(), term_hashes(term_set))


def _terms_member(nid: bytes, hs: U64) -> bytes:
    return TERMS_MARK + nid + b"\x00" + hs.astype("<u8").tobytes()


def overlaps(mine: U64, theirs: list[bytes]) -> list[float]:
    """The Jaccard overlap of the sorted term digests ``mine`` with each of ``theirs`` (packed
    as ``terms_member`` packs them), in one vectorised pass: shared / (|mine| + |theirs| -
    shared), each as ``similarity.word_overlap`` computes it (0 when either is empty)."""
    n = len(mine)
    out = [0.0] * len(theirs)
    full = [i for i, b in enumerate(theirs) if len(b) >= 8]
    if not n or not full:
        return out
    arrs = [np.frombuffer(theirs[i], dtype="<u8", count=len(theirs[i]) // 8) for i in full]
    sizes = np.fromiter((len(a) for a in arrs), dtype=np.int64, count=len(arrs))
    flat = np.concatenate(arrs)
    at = np.minimum(np.searchsorted(mine, flat), n - 1)
    hit = (mine[at] == flat).astype(np.int64)
    shared = np.add.reduceat(hit, np.concatenate(([0], np.cumsum(sizes)[:-1])))
    for i, s, k in zip(full, shared.tolist(), sizes.tolist(), strict=True):
        out[i] = s / (n + k - s)
    return out


def entries(note_id: str, text: str, spec: DupSpec) -> list[bytes]:
    """The index members of an active note: each key's digest followed by the note id (the
    twin key first, then the bands), then its terms member (``terms_member``; none for a note
    without terms, whose overlap with anything is 0)."""
    nid = note_id.encode()
    hs = term_hashes(frozenset(analyze(tokenize(text), spec.analyzer)))
    out = [twin_key(text) + nid] + [k + nid for k in _band_keys(_signature(hs, spec), spec)]
    if len(hs):
        out.append(_terms_member(nid, hs))
    return out
