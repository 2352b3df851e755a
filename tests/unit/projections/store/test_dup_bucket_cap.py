"""The near-duplicate lookup's bucket cap (``duplicate_lsh_bucket_cap``): a write's band whose
bucket holds more notes than the cap may go uncounted, the largest first, at most as many
bands as the recall at the threshold allows (``dupsketch.spec_of``); ``lua/dup_lookup.lua``
counts the rest. The buckets here are written by hand, so which band is left out is
exactly known."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from hivemind_memory.projections.ranking.config import DEFAULT, with_overrides
from hivemind_memory.projections.ranking.dupsketch import (
    TWIN_FP,
    DupSpec,
    Probe,
    band_hits,
    band_recall,
    note_key,
    parse_record,
    record,
    spec_of,
)
from hivemind_memory.projections.store import dupindex, keys

NS = "cap"
TWIN = b"T" * 8
FP = b"fp"
"""The fingerprint of every band of ``_probe`` (and of the entries ``_fill`` files)."""


def _band(i: int) -> bytes:
    return i.to_bytes(3, "big")


def _fill(store: Any, buckets: dict[bytes, list[str]],
          fps: dict[tuple[bytes, str], bytes] | None = None) -> None:
    """Buckets (field -> note ids, in filing order; each entry with the fingerprint ``FP``,
    ``TWIN_FP`` under ``TWIN``, unless ``fps`` names another for that field and note) and a
    record for every note."""
    notes = sorted({n for ns in buckets.values() for n in ns})
    fps = fps or {}
    store.hset(keys.dupbands(NS), mapping={
        k: b"".join(fps.get((k, n), TWIN_FP if k == TWIN else FP) + note_key(n) for n in ns)
        for k, ns in buckets.items()})
    store.hset(keys.dupnotes(NS), mapping={note_key(n): record(n, {n}) for n in notes})
    store.set(keys.checkpoint(NS), "1-0")


def _probe(bands: int) -> Probe:
    return Probe(TWIN, [_band(i) + FP for i in range(1, bands + 1)], frozenset(),
                 np.zeros(0, dtype=np.uint16))


def _near(store: Any, spec: DupSpec, pr: Probe | None = None) -> list[str]:
    """The notes ``lua/dup_lookup.lua`` names for ``pr`` (default: ``_probe``), checked to be
    the ones ``dupsketch.band_hits`` names from the same buckets (the one-step write's
    count, in the client)."""
    pr = pr or _probe(spec.bands)
    dupindex._seen_checkpoint(store).clear()
    got = sorted(dupindex.lookup(store, NS, pr, spec).near)
    buckets = store.hmget(keys.dupbands(NS), [b[:3] for b in pr.bands])
    hit = band_hits(pr.bands, buckets, spec.min_hits, spec.bucket_cap, spec.skips)
    recs = store.hmget(keys.dupnotes(NS), hit) if hit else []
    assert sorted(parse_record(r)[0] for r in recs if r) == got
    return got


def _spec(cap: int, skips: int, min_hits: int = 2) -> DupSpec:
    return DupSpec("english", 4, 1, min_hits, cap, skips)


def test_the_largest_buckets_over_the_cap_go_uncounted_up_to_the_skips(store: Any) -> None:
    """Band 1's bucket holds 4 notes, band 2's 3, bands 3 and 4 two and one: with a cap of 2,
    one skip leaves band 1 out (``a`` then shares one counted band, under the 2 hits), two
    skips leave band 2 out as well (``b`` keeps one hit of its three); a cap of 0, or one
    no bucket exceeds, counts them all."""
    _fill(store, {_band(1): ["a", "b", "x1", "x2"], _band(2): ["a", "b", "y1"],
                  _band(3): ["b", "c"], _band(4): ["c"]})
    assert _near(store, _spec(0, 1)) == ["a", "b", "c"]  # no cap: every band counted
    assert _near(store, _spec(4, 1)) == ["a", "b", "c"]  # no bucket holds more than 4
    assert _near(store, _spec(2, 0)) == ["a", "b", "c"]  # no skip allowed
    assert _near(store, _spec(2, 1)) == ["b", "c"]       # band 1 (4 notes) left out
    assert _near(store, _spec(2, 2)) == ["c"]            # bands 1 and 2 left out
    assert _near(store, _spec(2, 3)) == ["c"]            # no third bucket over the cap
    assert _near(store, _spec(3, 2)) == ["b", "c"]       # band 2 (3 notes) is within it


def test_buckets_of_equal_size_are_left_out_in_band_order(store: Any) -> None:
    """Two buckets over the cap, of the same size, and one skip: the earlier band's goes."""
    _fill(store, {_band(1): ["p", "x1", "x2"], _band(2): ["q", "y1", "y2"],
                  _band(3): ["p", "q"]})
    assert _near(store, _spec(2, 1)) == ["q"]
    assert _near(store, _spec(2, 2)) == []
    assert _near(store, _spec(0, 2)) == ["p", "q"]


def test_the_twin_key_is_never_left_out(store: Any) -> None:
    """The twin key's bucket is not a band: however many notes it holds, all are twins."""
    twins = [f"t{i}" for i in range(6)]
    _fill(store, {TWIN: twins, _band(1): ["a", "z1", "z2"], _band(2): ["a"]})
    dupindex._seen_checkpoint(store).clear()
    found = dupindex.lookup(store, NS, _probe(4), _spec(2, 4))
    assert sorted(found.twins) == twins and found.near == []


@pytest.mark.parametrize("over", [
    {}, {"duplicate_lsh_bucket_cap": 0}, {"duplicate_lsh_recall": 0.9},
    {"duplicate_lsh_bands": 32}, {"duplicate_lsh_min_hits": 1},
    {"duplicate_threshold": 0.7, "duplicate_lsh_bands": 100},
])
def test_the_skips_spend_only_the_recall_the_rows_leave(over: dict[str, Any]) -> None:
    """``spec_of`` leaves out at most as many bands as keep a pair at the threshold at least
    ``duplicate_lsh_recall`` likely to be compared over the bands still counted: one more
    would not (or every band but ``min_hits`` is already allowed). No cap, no skip."""
    cfg = with_overrides(DEFAULT, over)
    spec = spec_of(cfg)
    assert spec.bucket_cap == cfg.duplicate_lsh_bucket_cap
    if not spec.bucket_cap:
        assert spec.skips == 0
        return
    t, want = cfg.duplicate_threshold, cfg.duplicate_lsh_recall

    def recall(skips: int) -> float:
        return band_recall(t, spec.bands - skips, spec.rows, spec.min_hits)
    assert recall(spec.skips) >= want
    assert spec.skips == spec.bands - spec.min_hits or recall(spec.skips + 1) < want


def test_the_default_leaves_out_at_most_6_of_64_bands() -> None:
    spec = spec_of(DEFAULT)
    assert (spec.bands, spec.rows, spec.min_hits, spec.bucket_cap, spec.skips) == \
        (64, 3, 3, 128, 6)
    assert band_recall(0.5, 58, 3, 3) >= 0.98 > band_recall(0.5, 57, 3, 3)


def test_a_negative_cap_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="duplicate_lsh_bucket_cap must be >= 0"):
        with_overrides(DEFAULT, {"duplicate_lsh_bucket_cap": -1})


def test_only_entries_with_the_bands_own_fingerprint_are_counted(store: Any) -> None:
    """A bucket holds the entries of several band values (unrelated notes' bands folded into
    it by chance): ``x`` is in the buckets of bands 1-3, but filed there by bands of other
    values (other fingerprints), so it is not named; ``a``, filed with the probe's
    fingerprints in the same buckets, is. A fingerprint's bytes met inside a note key
    (not at an entry's start) count for nothing: ``y``'s note key is crafted around them."""
    other = b"zz"
    _fill(store, {_band(1): ["x", "a"], _band(2): ["a", "x"], _band(3): ["x", "a"]},
          fps={(_band(i), "x"): other for i in (1, 2, 3)})
    assert _near(store, _spec(0, 0, min_hits=3)) == ["a"]
    assert _near(store, _spec(0, 0, min_hits=2)) == ["a"]
    # the same buckets with every entry of x under the probe's fingerprint: x is named too
    _fill(store, {_band(1): ["x", "a"], _band(2): ["a", "x"], _band(3): ["x", "a"]})
    assert _near(store, _spec(0, 0, min_hits=3)) == ["a", "x"]


def test_a_fingerprint_inside_a_note_key_is_not_an_entry(store: Any) -> None:
    """Entries whose note keys hold the probe's fingerprint bytes at every offset, filed
    under another fingerprint: none is counted (the search only counts a match at an
    entry's start, and goes on from the next entry)."""
    odd = b"\x00" + FP + FP + FP + b"\x00"  # FP at offsets 1, 3 and 5 of an 8-byte key
    for k in (1, 2, 3):
        store.hset(keys.dupbands(NS), _band(k), b"zz" + odd + b"yy" + odd)
    store.hset(keys.dupnotes(NS), odd, record("odd", {"odd"}))
    store.set(keys.checkpoint(NS), "1-0")
    assert _near(store, _spec(0, 0, min_hits=1)) == []
    store.hset(keys.dupbands(NS), _band(1), b"zz" + odd + FP + odd)
    assert _near(store, _spec(0, 0, min_hits=1)) == ["odd"]


def test_a_band_key_of_the_wrong_width_is_refused_not_looped_on(store: Any) -> None:
    """A probe's band key must be a bucket and a fingerprint (5 bytes): the script says so
    instead of searching for an empty fingerprint."""
    _fill(store, {_band(1): ["a"]})
    dupindex._seen_checkpoint(store).clear()
    bad = Probe(TWIN, [_band(1)], frozenset(), np.zeros(0, dtype=np.uint16))
    with pytest.raises(Exception, match="band key 1 is 3 bytes, not 5"):
        dupindex.lookup(store, NS, bad, _spec(0, 0, min_hits=1))


def test_a_band_key_is_its_digests_bucket_then_fingerprint() -> None:
    """The low 18 bits of a band's digest pick the bucket, the next 16 the fingerprint: two
    digests of one bucket and other fingerprints are two keys of the same field."""
    from hivemind_memory.projections.ranking.dupsketch import BUCKET_BITS, band_key

    a = band_key(0x3_FFFF | (0x1234 << BUCKET_BITS) | (0xFF << 40))  # bits above 34 unused
    b = band_key(0x3_FFFF | (0x1235 << BUCKET_BITS))
    assert a == b"\x03\xff\xff\x12\x34" and b == b"\x03\xff\xff\x12\x35"
    assert band_key(5) == b"\x00\x00\x05\x00\x00"


def test_a_notes_filing_puts_each_bands_fingerprint_before_its_note_key() -> None:
    """Filed entries are 10 bytes: the fingerprint of the band (the probe's key's last two
    bytes, ``TWIN_FP`` under the twin key), then the note key; a probe of the same text
    has the same keys."""
    from hivemind_memory.projections.ranking.dupsketch import filing, probe, split_member

    spec = spec_of(DEFAULT)
    f = filing("n1", "the release train leaves on thursdays at noon", spec)
    pr = probe("the release train leaves on thursdays at noon", spec, DEFAULT)
    assert f.keys[0] == pr.twin + TWIN_FP and f.keys[1:] == pr.bands
    for k in f.keys[1:]:
        field, entry = split_member(k + f.note)
        assert len(field) == 3 and entry == k[3:] + note_key("n1")


@pytest.mark.parametrize(("bands", "rows"), [(64, 3), (48, 2), (1, 16), (256, 1), (7, 5)])
def test_a_signatures_band_keys_are_band_key_of_each_bands_digest(bands: int, rows: int) -> None:
    """``_band_keys`` makes every key at once; each must be ``band_key`` of its band's digest
    (BLAKE2b of the band's prefix and rows), in band order, repeats dropped: the reference
    written out here, over signatures of random values (high bits set included) and of
    repeated bands (equal rows give one key)."""
    import hashlib

    from hivemind_memory.projections.ranking.dupsketch import _band_keys, band_key

    spec = DupSpec("english", bands, rows)
    rng = np.random.default_rng(bands * 31 + rows)
    sigs = [rng.integers(0, 2**64, size=bands * rows, dtype=np.uint64) for _ in range(20)]
    sigs.append(np.full(bands * rows, 2**64 - 1, dtype=np.uint64))
    sigs.append(np.zeros(bands * rows, dtype=np.uint64))
    for sig in sigs:
        raw = sig.astype("<u8").tobytes()
        w = rows * 8
        want = list(dict.fromkeys(
            band_key(int.from_bytes(hashlib.blake2b(b"b" + bytes([j]) + raw[j * w:(j + 1) * w],
                                                    digest_size=8).digest(), "little"))
            for j in range(bands)))
        assert _band_keys(sig, spec) == want
    assert _band_keys(None, spec) == []


@pytest.mark.parametrize("seed", range(6))
def test_band_hits_names_what_the_lookup_script_names(store: Any, seed: int) -> None:
    """Random buckets (notes filed under random bands with the probe's fingerprint or
    another, sizes spread over the cap), random caps, skips and hits: the client's count
    (``band_hits``) and the script's (``dup_lookup.lua``) name the same notes."""
    rng = random.Random(seed)
    bands = 12
    notes = [f"n{i}" for i in range(40)]
    buckets: dict[bytes, list[str]] = {}
    fps: dict[tuple[bytes, str], bytes] = {}
    for b in range(1, bands + 1):
        held = rng.sample(notes, rng.choice([0, 1, 2, 3, 5, 8, 13, 21]))
        if held:
            buckets[_band(b)] = held
        for n in held:
            if rng.random() < 0.3:  # another band's, sharing a byte with FP or none
                fps[(_band(b), n)] = rng.choice([b"fz", b"zp", b"zz"])
    _fill(store, buckets, fps)
    for _ in range(8):
        cap, skips, hits = rng.choice([0, 2, 4, 8]), rng.randint(0, 4), rng.randint(1, 4)
        spec = DupSpec("english", bands, 1, hits, cap, skips)
        _near(store, spec)


def test_band_hits_refuses_buckets_that_do_not_match_the_bands() -> None:
    with pytest.raises(ValueError, match="2 band keys but 1 buckets"):
        band_hits([_band(1) + FP, _band(2) + FP], [None], 1)
