"""Pure reducers: promotion threshold on both sides, repeats, out-of-order times, rejections."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.events.schema import token_estimate
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.reduce import Projection, Rejected, Undecodable, apply_event
from hivemind_memory.projections.state import tier_of
from tests.support.factories import T0, created, erased, ev, forgotten, revised, used

CFG = RankingConfig()


def _fold(dicts: list[dict]) -> Projection:  # type: ignore[type-arg]
    p = Projection()
    p.feed([(f"{i + 1}-0", ev(d), b"") for i, d in enumerate(dicts)])
    return p


def _tier(p: Projection, nid: str, cfg: RankingConfig) -> str:
    """The tier a query under ``cfg`` gives the folded note (the fold itself has none)."""
    n = p.notes[nid]
    return tier_of(n.uses, n.kind, cfg)


@pytest.mark.parametrize(("uses", "tier"), [(0, "short"), (4, "short"), (5, "longterm"),
                                            (9, "longterm")])
def test_promotion_at_threshold(uses: int, tier: str) -> None:
    p = _fold([created("n"), *[used("n", f"u{i}") for i in range(uses)]])
    assert p.notes["n"].uses == uses
    assert _tier(p, "n", CFG) == tier


@pytest.mark.parametrize(("uses", "tier"), [(0, "scratch"), (4, "scratch"), (5, "longterm")])
def test_scratch_notes_earn_longterm_too(uses: int, tier: str) -> None:
    p = _fold([created("n", kind="scratch"), *[used("n", f"u{i}") for i in range(uses)]])
    assert _tier(p, "n", CFG) == tier


def test_threshold_comes_from_config() -> None:
    cfg = RankingConfig(longterm_uses=2)
    assert _tier(_fold([created("n"), used("n", "u1")]), "n", cfg) == "short"
    two = _fold([created("n"), used("n", "u1"), used("n", "u2")])
    assert _tier(two, "n", cfg) == "longterm"
    assert _tier(two, "n", CFG) == "short"  # the same folded facts, another config


def test_repeated_event_id_applies_once() -> None:
    p = _fold([created("n"), used("n", "u1"), used("n", "u1"), used("n", "u2"), used("n", "u1")])
    assert p.notes["n"].uses == 2
    assert p.seen == {"c-n", "u1", "u2"}


def test_repeated_event_id_across_batches_applies_once() -> None:
    p = Projection()
    p.feed([("1-0", ev(created("n")), b""), ("2-0", ev(used("n", "u1")), b"")])
    res = p.feed([("3-0", ev(used("n", "u1")), b""), ("4-0", ev(used("n", "u2")), b"")])
    assert res.duplicates == 1 and p.notes["n"].uses == 2


def test_out_of_order_at_keeps_latest_last_used() -> None:
    late, early = T0 + timedelta(days=30), T0 + timedelta(days=3)
    p = _fold([created("n"), used("n", "u1", at=late), used("n", "u2", at=early)])
    assert p.notes["n"].last_used_at == late
    assert p.notes["n"].uses == 2


def test_created_fields_and_token_default() -> None:
    p = _fold([created("a", text="x" * 41, agent="zed", scope="private", kind="scratch"),
               created("b", text="y" * 41, tokens=900)])
    a, b = p.notes["a"], p.notes["b"]
    assert (a.agent, a.scope, a.kind, a.tokens) == ("zed", "private", "scratch",
                                                     token_estimate("x" * 41))
    assert a.tokens == 11 and b.tokens == 900
    assert a.created_at == T0 and a.uses == 0 and a.last_used_at is None and not a.forgotten


@pytest.mark.parametrize(
    ("events", "reason"),
    [
        ([used("ghost", "u1")], "unknown_note"),
        ([forgotten("ghost", "f1")], "unknown_note"),
        ([created("n"), created("n", eid="c2")], "note_id_exists"),
        ([created("n"), forgotten("n", "f1"), used("n", "u1")], "forgotten_note"),
        ([created("n"), forgotten("n", "f1"), created("n", eid="c2")], "note_id_exists"),
        ([created("n"), forgotten("n", "f1"), forgotten("n", "f2")], "forgotten_note"),
    ],
)
def test_events_that_cannot_apply_are_dead_letters(events: list[dict], reason: str) -> None:  # type: ignore[type-arg]
    p = _fold(events)
    assert len(p.dead) == 1 and reason in p.dead[0].reason
    assert p.dead[0].entry_id == f"{len(events)}-0"


def test_rejection_changes_nothing() -> None:
    base = _fold([created("n"), used("n", "u1")])
    before = base.notes["n"]
    res = apply_event(before, ev(created("n", eid="again", text="other")))
    assert isinstance(res, Rejected)
    assert base.notes["n"] == before


def test_forget_keeps_uses_and_flags() -> None:
    p = _fold([created("n"), used("n", "u1"), forgotten("n", "f1")])
    assert p.notes["n"].forgotten and p.notes["n"].uses == 1


def test_undecodable_entry_becomes_a_dead_letter() -> None:
    p = Projection()
    p.feed([("1-0", Undecodable(b"\x00", "undecodable: bad"), b"\x00"),
            ("2-0", ev(created("n")), b"")])
    assert [d.entry_id for d in p.dead] == ["1-0"] and "n" in p.notes


# --- Hypothesis: how the stream is cut into batches never changes the fold -----------------

NOTE_IDS = ["a", "b", "c"]
EVENT = st.one_of(
    st.builds(lambda n, k: created(n, eid=f"c{k}", kind="note"),
              st.sampled_from([*NOTE_IDS, "d"]), st.integers(0, 3)),
    st.builds(lambda n, k, d: used(n, f"u{k}", at=T0 + timedelta(days=d)),
              st.sampled_from([*NOTE_IDS, "ghost"]), st.integers(0, 12), st.integers(-5, 400)),
    st.builds(lambda n, k: forgotten(n, f"f{k}"), st.sampled_from(NOTE_IDS), st.integers(0, 2)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(EVENT, max_size=40), st.lists(st.integers(1, 7), min_size=1, max_size=10))
def test_any_batching_folds_like_one_pass(events: list[dict], cuts: list[int]) -> None:  # type: ignore[type-arg]
    entries = [(f"{i + 1}-0", ev(d), b"") for i, d in enumerate(events)]
    one = Projection()
    one.feed(entries)
    many = Projection()
    i = 0
    k = 0
    while i < len(entries):
        size = cuts[k % len(cuts)]
        many.feed(entries[i:i + size])
        i += size
        k += 1
    assert many.notes == one.notes
    assert many.seen == one.seen
    assert [d.entry_id for d in many.dead] == [d.entry_id for d in one.dead]
    # the replay's in-place fold (no delta kept) does exactly the same, chunk by chunk
    absorbed, i, k, dups = Projection(), 0, 0, 0
    while i < len(entries):
        size = cuts[k % len(cuts)]
        dups += absorbed.absorb(entries[i:i + size])
        i += size
        k += 1
    assert absorbed.notes == one.notes and absorbed.seen == one.seen
    assert absorbed.dead == one.dead
    assert dups == len(entries) - len(one.seen) - sum(
        isinstance(e, Undecodable) for _, e, _ in entries)


@pytest.mark.parametrize(("scope", "user", "counted"), [
    ("private", "alice", True), ("private", "bob", False),
    ("shared", "alice", True), ("shared", "bob", True)])
def test_a_use_counts_only_for_an_agent_that_may_see_the_note(
        scope: str, user: str, counted: bool) -> None:
    """Both paths of the fold (the inline use and ``apply_event``) apply the same rule."""
    p = _fold([created("n", agent="alice", scope=scope), used("n", "u1", agent=user)])
    assert p.notes["n"].uses == int(counted)
    assert [d.reason.split(": ")[1] for d in p.dead] == ([] if counted else ["not_visible"])
    note = p.notes["n"]
    res = apply_event(note, ev(used("n", "u2", agent=user)))
    assert isinstance(res, Rejected) != counted


@pytest.mark.parametrize(("scope", "by", "admin", "why"), [
    ("shared", "alice", False, None), ("shared", "bob", False, "not_allowed"),
    ("shared", "bob", True, None), ("private", "alice", False, None),
    ("private", "bob", False, "not_visible"), ("private", "bob", True, None)])
def test_a_note_is_forgotten_by_its_author_or_an_admin(
        scope: str, by: str, admin: bool, why: str | None) -> None:
    f = forgotten("n", "f1") | {"agent": by, "as_admin": admin}
    p = _fold([created("n", agent="alice", scope=scope), f])
    assert p.notes["n"].forgotten == (why is None)
    assert [d.reason.split(": ")[1] for d in p.dead] == ([] if why is None else [why])


def test_check_write_folds_like_the_projector_and_stops_at_the_first_refusal() -> None:
    from hivemind_memory.projections.reduce import check_write

    base = _fold([created("n", agent="alice")]).notes
    evs = [ev(used("n", "u1")), ev(created("m", eid="c-m")), ev(used("m", "u2")),
           ev(used("n", "u1")), ev(created("n", eid="c-n2")), ev(used("n", "u3"))]
    got = check_write(base, {"u0"}, evs)
    assert got.fresh == [0, 1, 2] and got.logged == [3]  # u1 twice: the second a duplicate
    assert got.refused is not None and got.refused[0] == 4
    assert got.refused[1].code == "note_id_exists"
    # a retry of the first three after u1 and c-m landed (the view then holds note m)
    landed = _fold([created("n", agent="alice"), used("n", "u1"), created("m", eid="c-m")])
    again = check_write(landed.notes, {"u1", "c-m"}, evs[:4])
    assert again.fresh == [2] and again.logged == [0, 1, 3] and again.refused is None
    assert check_write(base, set(), [ev(used("m", "u9"))]).refused[1].code == "unknown_note"


# --- the lifecycle: revise, supersede, erase ---------------------------------------------------
def _states(*dicts: dict) -> tuple[Projection, list[str]]:  # type: ignore[type-arg]
    p = _fold(list(dicts))
    return p, [d.reason.split(": ", 1)[1].split(":")[0] for d in p.dead]


def test_a_revision_keeps_id_uses_and_tier_and_changes_the_content() -> None:
    p, dead = _states(created("n", agent="a", embedding=[1.0, 0.0]), used("n", "u1"),
                      revised("n", "r1", agent="a", text="new words here", kind="scratch"),
                      revised("n", "r2", agent="a", text="x" * 40, tokens=3))
    n = p.notes["n"]
    assert dead == [] and (n.uses, n.version, n.kind) == (1, 3, "scratch")
    assert n.text == "x" * 40 and n.tokens == 3 and n.embedding is None
    assert n.created_at == T0 and n.revised_at == T0 + timedelta(days=1)
    p2, _ = _states(created("n"), revised("n", "r1", text="abcdefghi"))
    assert p2.notes["n"].tokens == token_estimate("abcdefghi")


@pytest.mark.parametrize(("events", "code"), [
    ([created("n", agent="a"), revised("n", "r", agent="b")], "not_allowed"),
    ([created("n", agent="a", scope="private"), revised("n", "r", agent="b")], "not_visible"),
    ([created("n"), forgotten("n", "f"), revised("n", "r")], "forgotten_note"),
    ([revised("n", "r")], "unknown_note"),
    ([created("n"), erased("n", "e", as_admin=False)], "not_allowed"),
    ([created("n"), erased("n", "e"), used("n", "u")], "erased_note"),
    ([created("n"), erased("n", "e"), erased("n", "e2")], "erased_note"),
    ([created("o", agent="b"), created("n", agent="a", supersedes=["o"])], "not_allowed"),
    ([created("n", supersedes=["ghost"])], "unknown_note"),
    ([created("o"), created("n", supersedes=["o", "o"])], "duplicate_supersedes"),
    ([created("n", supersedes=["n"])], "duplicate_supersedes"),
    ([created("o"), forgotten("o", "f"), created("n", supersedes=["o"])], "forgotten_note"),
    ([created("o"), created("n", supersedes=["o"]), created("m", eid="c-m",
                                                            supersedes=["o"])],
     "superseded_note"),
])
def test_lifecycle_events_that_cannot_apply(events: list[dict], code: str) -> None:  # type: ignore[type-arg]
    _, dead = _states(*events)
    assert dead == [code]


def test_an_admin_revises_any_note_and_erases_a_forgotten_one() -> None:
    p, dead = _states(created("n", agent="a", scope="private"),
                      revised("n", "r", agent="ops", as_admin=True, text="fixed"),
                      forgotten("n", "f"), erased("n", "e"))
    n = p.notes["n"]
    assert dead == [] and n.erased and n.redacted and n.forgotten
    assert (n.text, n.embedding, n.version) == ("", None, 2) and not n.active


def test_a_superseding_note_takes_the_uses_and_the_old_one_leaves() -> None:
    late = T0 + timedelta(days=9)
    p, dead = _states(created("o1", agent="a"), created("o2", agent="a"),
                      used("o1", "u1"), used("o1", "u2", at=late), used("o2", "u3"),
                      created("n", agent="a", supersedes=["o1", "o2"], at=late))
    assert dead == []
    n, o1, o2 = p.notes["n"], p.notes["o1"], p.notes["o2"]
    assert (n.uses, n.last_used_at, n.supersedes) == (3, late, ["o1", "o2"])
    assert o1.superseded_by == o2.superseded_by == "n" and not o1.active and n.active
    assert o1.uses == 2  # the old note keeps its own count
    # a refused supersession changes none of the notes it names
    q, dead = _states(created("o1", agent="a"), created("o2", agent="b"),
                      created("n", agent="a", supersedes=["o1", "o2"]))
    assert dead == ["not_allowed"] and q.notes["o1"].superseded_by is None and "n" not in q.notes


def test_a_redacted_event_folds_to_a_note_that_is_never_active() -> None:
    digest = "sha256:" + "0" * 64
    p, dead = _states({**created("n"), "text": "", "redacted": digest, "tokens": 5},
                      used("n", "u"))
    n = p.notes["n"]
    assert dead == [] and (n.text, n.tokens, n.uses) == ("", 5, 1)
    assert n.redacted and not n.erased and not n.active
