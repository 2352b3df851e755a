"""Ranking config: defaults, TOML overrides, errors that name the key, and effect on results."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from hivemind_memory.events.errors import ConfigError, HivemindError
from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    RankingConfig,
    TierDecay,
    config_from_json,
    config_from_toml,
    filed_form,
    id_digest,
    load_config,
)
from hivemind_memory.projections.ranking.recency import recency
from hivemind_memory.projections.state import NoteState
from tests.support import rank_notes

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def test_defaults_follow_the_contract() -> None:
    assert DEFAULT.longterm_uses == 5
    assert DEFAULT.short == TierDecay(half_life_days=180.0, floor=0.35)
    assert DEFAULT.scratch == TierDecay(half_life_days=3.0, floor=0.0)
    assert DEFAULT.min_relevance == 0.0
    assert DEFAULT.per_note_overhead_tokens == 0
    assert DEFAULT.order == "edges"
    assert DEFAULT.exact_max_cells == 4_000_000
    assert (DEFAULT.bm25_k1, DEFAULT.bm25_b) == (1.2, 1.0)


def test_toml_overrides_only_what_it_names() -> None:
    cfg = config_from_toml(
        """
        longterm_uses = 3
        order = "chronological"
        per_note_overhead_tokens = 7
        min_relevance = 0.2
        exact_max_cells = 100
        bm25_k1 = 0.9
        bm25_b = 0.5

        [short]
        half_life_days = 30
        floor = 0.1
        """
    )
    assert cfg.longterm_uses == 3 and cfg.order == "chronological"
    assert cfg.per_note_overhead_tokens == 7 and cfg.min_relevance == 0.2
    assert cfg.exact_max_cells == 100 and (cfg.bm25_k1, cfg.bm25_b) == (0.9, 0.5)
    assert cfg.short == TierDecay(30.0, 0.1)
    assert cfg.scratch == DEFAULT.scratch
    assert config_from_toml("") == DEFAULT


def test_a_tier_table_may_set_only_some_keys() -> None:
    cfg = config_from_toml("[short]\nhalf_life_days = 10\n[scratch]\nfloor = 0.05")
    assert cfg.short == TierDecay(10.0, DEFAULT.short.floor)
    assert cfg.scratch == TierDecay(DEFAULT.scratch.half_life_days, 0.05)


@pytest.mark.parametrize(
    ("toml", "names"),
    [
        ("[short]\nhalf_life_days = -1\nfloor = 0.3", ["half_life_days", "$.short"]),
        ("[scratch]\nhalf_life_days = 0\nfloor = 0.0", ["half_life_days", "$.scratch"]),
        ("[short]\nhalf_life_days = 10\nfloor = 1.5", ["floor", "$.short"]),
        ("[scratch]\nhalf_life_days = 10\nfloor = -0.1", ["floor", "$.scratch"]),
        ("[short]\nhalf_life_days = 10\nfloor = 0.1\nfloors = 2", ["floors"]),
        ("bogus = 1", ["bogus"]),
        ("longterm_uses = 0", ["longterm_uses"]),
        ("min_relevance = 1.5", ["min_relevance"]),
        ("min_relevance = -0.1", ["min_relevance"]),
        ("per_note_overhead_tokens = -1", ["per_note_overhead_tokens"]),
        ("exact_max_cells = -5", ["exact_max_cells"]),
        ("bm25_k1 = -0.1", ["bm25_k1"]),
        ("bm25_b = 1.01", ["bm25_b"]),
        ('order = "random"', ["$.order"]),
        ('longterm_uses = "five"', ["$.longterm_uses"]),
        ("short = 3", ["$.short"]),
        ("not toml = = 1", ["invalid ranking config"]),
    ],
)
def test_invalid_values_name_the_key(toml: str, names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_toml(toml, "team.toml")
    msg = str(info.value)
    assert msg.startswith("team.toml: invalid ranking config")
    for name in names:
        assert name in msg
    assert isinstance(info.value, HivemindError)


@pytest.mark.parametrize(
    "kwargs",
    [{"half_life_days": float("nan"), "floor": 0.1}, {"half_life_days": float("inf"), "floor": 0.1},
     {"half_life_days": 1.0, "floor": float("nan")}],
)
def test_non_finite_decay_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"half_life_days|floor"):
        TierDecay(**kwargs)


def test_boundaries_are_accepted() -> None:
    RankingConfig(short=TierDecay(1e-9, 0.0), scratch=TierDecay(1.0, 1.0), min_relevance=1.0,
                  bm25_k1=0.0, bm25_b=0.0, exact_max_cells=0, longterm_uses=1)
    RankingConfig(bm25_b=1.0, min_relevance=0.0, per_note_overhead_tokens=0)


def test_load_config_from_file(tmp_path: Path) -> None:
    assert load_config(None) is DEFAULT
    p = tmp_path / "ranking.toml"
    p.write_text("[scratch]\nhalf_life_days = 1\nfloor = 0.5\n", encoding="utf-8")
    assert load_config(p).scratch == TierDecay(1.0, 0.5)
    assert load_config(str(p)).scratch == TierDecay(1.0, 0.5)
    bad = tmp_path / "bad.toml"
    bad.write_text("bm25_b = 7\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid ranking config: bm25_b"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read ranking config"):
        load_config(tmp_path / "missing.toml")


def test_digest_changes_with_any_value() -> None:
    assert DEFAULT.digest() == RankingConfig().digest()
    assert len(DEFAULT.digest()) == 16
    assert RankingConfig(bm25_b=0.5).digest() != DEFAULT.digest()
    assert RankingConfig(short=TierDecay(90.0, 0.35)).digest() != DEFAULT.digest()


def test_config_changes_change_results() -> None:
    note = NoteState(
        note_id="n", agent="a", scope="shared", kind="note", text="t", tokens=100,
        created_at=NOW - timedelta(days=90), uses=3,
    )
    cfg = config_from_toml("[short]\nhalf_life_days = 90\nfloor = 0.5\n")
    assert recency("short", 90.0, cfg) == pytest.approx(0.75)
    base = rank_notes([note], {"n": 0.8}, agent="a", now=NOW, budget=1000, cfg=DEFAULT)
    custom = rank_notes([note], {"n": 0.8}, agent="a", now=NOW, budget=1000, cfg=cfg)
    assert custom.candidates[0].recency == 0.75 != base.candidates[0].recency
    promoted = rank_notes([note], {"n": 0.8}, agent="a", now=NOW, budget=1000,
                    cfg=config_from_toml("longterm_uses = 3"))
    assert promoted.candidates[0].tier == "longterm"
    strict = rank_notes([note], {"n": 0.8}, agent="a", now=NOW, budget=1000,
                  cfg=config_from_toml("min_relevance = 0.9"))
    assert strict.candidates == []
    overhead = rank_notes([note], {"n": 0.8}, agent="a", now=NOW, budget=1000,
                    cfg=config_from_toml("per_note_overhead_tokens = 950"))
    assert overhead.notes == [] and overhead.candidates[0].cost == 1050


def test_errors_without_a_source_say_config() -> None:
    with pytest.raises(ConfigError, match=r"^<config>: invalid ranking config: .*bogus"):
        config_from_toml("bogus = 1")


def test_config_file_is_read_as_utf8(tmp_path: Path) -> None:
    p = tmp_path / "ranking.toml"
    p.write_bytes("# réglages — café\norder = \"score\"\n".encode())
    assert load_config(p).order == "score"


LEGACY_JSON = (b'{"longterm_uses":5,"short":{"half_life_days":180.0,"floor":0.35},'
               b'"scratch":{"half_life_days":3.0,"floor":0.0},"min_relevance":0.0,'
               b'"per_note_overhead_tokens":0,"order":"edges","exact_max_cells":4000000,'
               b'"bm25_k1":1.2,"bm25_b":0.75}')
"""The default config as the first releases filed it in the audit's config history."""
LEGACY_DIGEST = "e3b0495deb7bc6fe"


def test_a_config_filed_before_the_newer_keys_keeps_its_meaning_and_digest() -> None:
    old = config_from_json(LEGACY_JSON)
    assert old.analyzer == "plain" and old.relevance == "bm25"  # what it meant then
    assert old.digest() == LEGACY_DIGEST and filed_form(old, LEGACY_JSON)
    assert not filed_form(DEFAULT, LEGACY_JSON)  # today's defaults are another config
    half = LEGACY_JSON[:-1] + b',"analyzer":"plain"}'  # filed when only analyzer existed
    assert config_from_json(half) == old and filed_form(old, half)
    new = msgspec.json.encode(DEFAULT)
    assert config_from_json(new) == DEFAULT and filed_form(DEFAULT, new)
    tampered = LEGACY_JSON.replace(b'"bm25_b":0.75', b'"bm25_b":0.5')
    assert not filed_form(old, tampered)


def test_a_config_filed_before_the_newer_updates_keys_keeps_its_meaning_and_digest() -> None:
    """The updates table as filed before ``restated_share`` and ``newer_max_tokens`` (the
    previous default: every query word, the passage size as the limit) reads back with
    them at 1 and 0, hashes to the digest it was filed under and is its filed form; the
    same table with either key set is another config."""
    from hivemind_memory.projections.ranking.config import _digest, legacy_form

    before = {"same_subject_cosine": 1.0, "min_gap_days": 1.0, "margin": 2.0,
              "older_weight": 0.9, "max_notes": 200, "query_words_share": 0.7}
    raw = {**msgspec.to_builtins(DEFAULT), "updates": before}
    data = msgspec.json.encode(raw)
    filed_digest = _digest({k: v for k, v in legacy_form(raw).items()})
    cfg = config_from_json(data)
    assert (cfg.updates.restated_share, cfg.updates.newer_max_tokens) == (1.0, 0)
    assert cfg.digest() == filed_digest and filed_form(cfg, data)
    assert cfg != DEFAULT and DEFAULT.digest() != filed_digest
    for key, value in (("restated_share", 0.5), ("newer_max_tokens", 128)):
        other = config_from_json(msgspec.json.encode({**raw, "updates": {**before,
                                                                          key: value}}))
        assert other.digest() != filed_digest and not filed_form(other, data)


@pytest.mark.parametrize(("key", "value"), [
    ("restated_share", 0.0), ("restated_share", 1.5), ("restated_share", float("nan")),
    ("newer_max_tokens", -1)])
def test_bad_updates_values_name_the_key(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"updates.{key}"):
        msgspec.convert({"updates": {key: value}}, RankingConfig)


def test_as_of_ids_keep_their_config_part_and_newer_keys_always_count() -> None:
    assert id_digest(None) == id_digest({}) == LEGACY_DIGEST  # ids from before stay
    assert id_digest({"exact_max_cells": 4_000_000}) == LEGACY_DIGEST  # a restated default
    assert id_digest({"bm25_b": 0.5}) != LEGACY_DIGEST
    # bm25_b's default moved from 0.75 to 1: leaving it, or restating 1, is the id of before;
    # 0.75 is no longer the default, so it is another id
    assert id_digest({"bm25_b": DEFAULT.bm25_b}) == LEGACY_DIGEST
    assert len({id_digest({"bm25_b": 0.75}), id_digest({"bm25_b": 0.5}), LEGACY_DIGEST}) == 3
    plain, english = id_digest({"analyzer": "plain"}), id_digest({"analyzer": "english"})
    assert len({plain, english, LEGACY_DIGEST}) == 3
    assert id_digest({"relevance": "bm25"}) not in {plain, LEGACY_DIGEST}


def test_calibration_is_a_table_of_the_toml_and_of_per_query_overrides() -> None:
    from hivemind_memory.api_stub.protocol.messages import effective_config
    from hivemind_memory.events.errors import QueryError

    cfg = config_from_toml("[calibration]\nbm25 = 3.5\ncontext_notes = 1\n")
    assert cfg.calibration.bm25 == 3.5 and cfg.calibration.context_notes == 1
    assert cfg.calibration.cosine == DEFAULT.calibration.cosine  # the rest kept
    assert cfg.relevance == "calibrated" and cfg.embedder == "wordllama"
    with pytest.raises(ConfigError, match="calibration"):
        config_from_toml("[calibration]\nbm26 = 1\n")
    over = effective_config(DEFAULT, {"calibration": {"author_named": 0.0}})
    assert over.calibration.author_named == 0.0 and over.digest() != DEFAULT.digest()
    with pytest.raises(QueryError, match="embedder"):  # a plugin spec would import code
        effective_config(DEFAULT, {"embedder": "os:system"})
    with pytest.raises(QueryError, match="embedder"):
        effective_config(DEFAULT, {"embedder": "none"})


def test_keys_only_calibrated_relevance_reads_do_not_count_under_bm25() -> None:
    first = {"relevance": "bm25", "analyzer": "plain", "bm25_b": 0.75}  # the first release's
    bm25 = RankingConfig(**first)
    assert bm25.digest() == LEGACY_DIGEST
    for other in (RankingConfig(**first, max_candidates=7),
                  RankingConfig(**first, embedder="none")):
        assert other.digest() == LEGACY_DIGEST  # they change no bm25 result
    cal = RankingConfig(analyzer="plain")
    assert len({cal.digest(), RankingConfig(analyzer="plain", max_candidates=7).digest(),
                RankingConfig(analyzer="plain", embedder="none").digest(),
                LEGACY_DIGEST}) == 4
    assert id_digest({"max_candidates": 7}) != id_digest({})
    assert id_digest({"calibration": {"bm25": 1.0}}) != id_digest({"calibration": {"bm25": 2.0}})



PREVIOUS_RELEASE_DEFAULT = (
    b'{"longterm_uses":5,"short":{"half_life_days":180.0,"floor":0.35},"scratch":{"half_li'
    b'fe_days":3.0,"floor":0.0},"min_relevance":0.0,"per_note_overhead_tokens":0,"order":"'
    b'edges","exact_max_cells":4000000,"bm25_k1":1.2,"bm25_b":0.75,"relevance":"calibrated'
    b'","analyzer":"english","embedder":"wordllama","max_candidates":200,"calibration":{"i'
    b'ntercept":-12.79,"bm25":0.266,"bm25_x_log_tokens":1.076,"cosine":0.359,"cosine_x_log'
    b'_tokens":0.7282,"log_tokens":0.6695,"log_tokens_sq":0.006989,"context_bm25":1.985,"c'
    b'ontext_cosine":0.5946,"author_named":2.034,"context_notes":2,"context_minutes":60.0,'
    b'"reference_notes":550.0,"max_tokens":64,"floor":0.001,"nearest":3,"nearest_min_cosin'
    b'e":0.05,"nearest_max_notes":50,"min_cosine":0.45},"updates":{"same_subject_cosine":1'
    b'.0,"min_gap_days":1.0,"margin":2.0,"older_weight":0.9,"max_notes":200,"query_words_s'
    b'hare":0.7},"unknown_word_factor":1.0,"near_identical":0.9,"passage_tokens":48,"candi'
    b'dates":{"scan_max_notes":20000,"dense":128,"lexical":1024,"connectivity":12,"expansi'
    b'on_add":32,"expansion_search":128},"duplicate_threshold":0.5,"duplicate_lsh_bands":6'
    b'4,"duplicate_lsh_min_hits":3,"duplicate_lsh_recall":0.98,"duplicate_lsh_bucket_cap":'
    b'128,"default_ttl_days":0.0}'
)
"""The default config exactly as the release before 2026-12-02's third session filed it
(``encode(DEFAULT)`` at ``b30407b``), and the fingerprint it filed it under."""
PREVIOUS_RELEASE_DIGEST = "650b704b956e536c"


def test_the_previous_releases_filed_default_still_verifies_and_keeps_its_meaning() -> None:
    """Today's keys (the long-note term, the tail of short notes, the moved
    candidates.lexical, bm25_b) must not make a config history entry filed by the release
    before them look altered, and the entry must decode to what it meant: no long-note term,
    no tail, lexical 1,024, bm25_b 0.75."""
    from hivemind_memory.projections.ranking.config import (
        config_from_json,
        filed_digests,
        filed_form,
    )
    from hivemind_memory.worker.audit.reproduce import ConfigHistory

    cfg = config_from_json(PREVIOUS_RELEASE_DEFAULT)
    assert PREVIOUS_RELEASE_DIGEST in filed_digests(cfg, PREVIOUS_RELEASE_DEFAULT)
    assert filed_form(cfg, PREVIOUS_RELEASE_DEFAULT)
    assert ConfigHistory([(PREVIOUS_RELEASE_DIGEST, PREVIOUS_RELEASE_DEFAULT)]).problems == {}
    assert cfg.calibration.long_note_log_tokens == 0.0 and cfg.calibration.tail_notes == 0
    assert cfg.candidates.lexical == 1_024 and cfg.bm25_b == 0.75
    # today's default differs from it in what it does, so in its fingerprint too
    assert DEFAULT.digest() != PREVIOUS_RELEASE_DIGEST
    assert DEFAULT.calibration.long_note_log_tokens == -0.5 and DEFAULT.candidates.lexical == 256
    assert DEFAULT.calibration.tail_notes == 8


def test_a_candidates_table_is_left_out_of_a_fingerprint_only_at_a_former_default() -> None:
    """An entry whose candidates table is an earlier default verifies under the fingerprint
    its writer made without the table; one holding any other table verifies only under the
    fingerprint that includes it (else a tampered table would pass)."""
    import msgspec

    from hivemind_memory.projections.ranking.config import (
        CANDIDATES_DEFAULTS,
        _digest,
        config_from_json,
        filed_digests,
        legacy_form,
    )
    from hivemind_memory.worker.audit.reproduce import ConfigHistory

    other = {**CANDIDATES_DEFAULTS[0], "lexical": 777}
    for table, former in ((CANDIDATES_DEFAULTS[0], True), (other, False)):
        raw = {**msgspec.json.decode(PREVIOUS_RELEASE_DEFAULT), "candidates": table}
        data = msgspec.json.encode(raw)
        cfg = config_from_json(data)
        form = legacy_form(msgspec.to_builtins(cfg))
        without = _digest({k: v for k, v in form.items() if k != "candidates"})
        assert "candidates" in form and cfg.digest() in filed_digests(cfg, data)
        assert (without in filed_digests(cfg, data)) is former
        assert (ConfigHistory([(without, data)]).problems == {}) is former
