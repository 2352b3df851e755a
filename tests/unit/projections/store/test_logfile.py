"""``streams.log`` read, checked and repaired (``store.logfile``, ``hivemind fsck``): a torn
tail is told apart from damage between records; ids out of order within a stream (as the
writer before this version could leave them) are put back in order without losing or
changing a record; derived records are dropped; the CLI's report and exit statuses."""

from __future__ import annotations

import json
import random
import struct
import zlib
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.events.errors import LogDamaged
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import close_embedded, connect
from hivemind_memory.projections.store.logfile import (
    LOG_NAME,
    Unrepairable,
    check,
    frame,
    lock_directory,
    repaired,
    scan,
)
from hivemind_memory.worker.cli.main import main
from tests.support.legacy_log import race

EV_A, EV_B, AUDIT_A = (keys.stream("a").encode(), keys.stream("b").encode(),
                       keys.audit("a").encode())


def old_record(key: bytes, entry_id: bytes, fields: list[bytes]) -> bytes:
    """A record as every version wrote it, framed here independently of the product code."""
    body = msgspec.msgpack.encode((key, entry_id, fields))
    return struct.pack(">II", len(body), zlib.crc32(body)) + body


def _ids(n: int, start_ms: int = 1_700_000_000_000) -> list[bytes]:
    return [f"{start_ms + i}-0".encode() for i in range(n)]


def test_frame_is_the_format_older_versions_wrote() -> None:
    assert frame(EV_A, b"1-0", [b"d", b"\x00\xff"]) == old_record(EV_A, b"1-0", [b"d", b"\x00\xff"])


@pytest.mark.parametrize("tail", [b"\x00\x00\x00", b"\x00" * 4096, b"garbage!",
                                  "torn-body"])
def test_bytes_after_the_last_record_are_a_torn_tail(tail: bytes | str) -> None:
    whole = b"".join(old_record(EV_A, i, [b"d", i]) for i in _ids(3))
    extra = old_record(EV_A, b"9-0", [b"d", b"x" * 50])[:-7] if tail == "torn-body" else tail
    assert isinstance(extra, bytes)
    sc = scan(whole + extra)
    assert [r.entry_id for r in sc.records] == _ids(3) and not sc.gaps
    assert sc.tail is not None and (sc.tail.start, sc.tail.size) == (len(whole), len(extra))
    f = check(sc)
    assert f.openable and f.torn_tail_bytes == len(extra) and len(f.problems) == 1
    assert repaired(whole + extra, sc) == whole


def test_damage_between_records_is_not_a_torn_tail() -> None:
    recs = [old_record(EV_A, i, [b"d", i * 3]) for i in _ids(4)]
    data = bytearray(b"".join(recs))
    data[len(recs[0]) + 12] ^= 0xFF  # a bit flips inside the second record
    sc = scan(bytes(data))
    assert [r.entry_id for r in sc.records] == [_ids(4)[i] for i in (0, 2, 3)]
    assert [(g.start, g.size) for g in sc.gaps] == [(len(recs[0]), len(recs[1]))]
    assert sc.tail is None
    f = check(sc)
    assert not f.openable and f.problems[0].startswith("unreadable: 1 damaged region")
    with pytest.raises(Unrepairable, match="drop-unreadable"):
        repaired(bytes(data), sc)
    assert repaired(bytes(data), sc, drop_unreadable=True) == recs[0] + recs[2] + recs[3]


def test_repair_orders_each_stream_by_id_in_the_slots_it_held_and_keeps_every_byte() -> None:
    a = [old_record(EV_A, i, [b"d", b"a" + i]) for i in _ids(3)]
    b = [old_record(EV_B, i, [b"d", b"b" + i]) for i in _ids(2, 1_800_000_000_000)]
    derived = old_record(b"rq:results:job1", b"5-0", [b"r", b"x" * 100])
    data = a[2] + b[1] + derived + a[0] + b[0] + a[1] + a[0]  # last: an exact duplicate
    sc = scan(data)
    f = check(sc)
    assert (f.misordered, f.misordered_keys, f.duplicates, f.conflicts) == (4, 2, 1, [])
    assert f.derived_kinds == {"rq:results": 1} and f.derived_bytes == len(derived)
    assert not f.openable and f.repairable(drop_unreadable=False)
    assert repaired(data, sc) == a[0] + b[0] + a[1] + b[1] + a[2]
    assert not check(scan(repaired(data, sc))).problems


def test_two_records_with_one_id_and_different_fields_cannot_be_repaired() -> None:
    data = old_record(EV_A, b"5-0", [b"d", b"one"]) + old_record(EV_A, b"5-0", [b"d", b"two"])
    f = check(scan(data))
    assert f.conflicts == [(EV_A.decode(), "5-0")] and not f.repairable(drop_unreadable=True)
    with pytest.raises(Unrepairable, match="no repair can keep both"):
        repaired(data, scan(data))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([EV_A, EV_B, AUDIT_A, b"rq:results:j"]),
                          st.binary(max_size=40)), min_size=1, max_size=30),
       st.randoms(use_true_random=False), st.integers(0, 30))
def test_any_shuffled_log_repairs_to_every_source_record_once_in_id_order(
        appends: list[tuple[bytes, bytes]], rng: random.Random, torn: int) -> None:
    ids = iter(_ids(len(appends)))
    recs = [(k, next(ids), [b"d", v]) for k, v in appends]
    shuffled = recs[:]
    rng.shuffle(shuffled)
    data = b"".join(old_record(*r) for r in shuffled)
    data += old_record(EV_A, b"99-0", [b"d", b"torn"])[:torn]
    out = scan(repaired(data, scan(data)))
    assert out.tail is None and not out.gaps and not check(out).problems
    got = [(r.key, r.entry_id, r.fields) for r in out.records]
    assert sorted(got) == sorted(r for r in recs if r[0] != b"rq:results:j")
    for key in (EV_A, EV_B, AUDIT_A):
        mine = [r.position for r in out.records if r.key == key]
        assert mine == sorted(mine)


def _legacy_race(directory: Path, rounds: int) -> list[tuple[bytes, bytes, list[bytes]]]:
    """The old writer's race in ``rounds`` pairs over three streams; the source records
    sorted by key and id."""
    streams = (EV_A, EV_B, AUDIT_A)
    made = race(directory, [((streams[n % 3], [b"d", b"A-%d" % n]),
                             (streams[n % 3], [b"d", b"B-%d" % n])) for n in range(rounds)])
    return sorted(made, key=_by_key_and_id)


def _by_key_and_id(r: tuple[bytes, bytes, list[bytes]]) -> tuple[bytes, int, int]:
    ms, _, seq = r[1].partition(b"-")
    return r[0], int(ms), int(seq)


def test_a_log_the_old_writer_left_out_of_order_is_repaired_by_fsck_and_then_opens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "store"
    made = _legacy_race(d, rounds=9)
    with (d / LOG_NAME).open("ab") as fh:
        fh.write(old_record(EV_A, b"9999999999999-0", [b"d", b"torn"])[:-4])  # then a crash
    before = (d / LOG_NAME).read_bytes()
    url = f"memory://{d}"

    with pytest.raises(LogDamaged) as refused:
        connect(url)
    msg = str(refused.value)
    assert str(d / LOG_NAME) in msg and f"hivemind fsck --store {url}" in msg
    assert "order: 9 record(s) of 3 stream(s)" in msg
    assert (d / LOG_NAME).read_bytes() == before  # nothing changed, and not left locked

    capsys.readouterr()
    assert main(["fsck", "--store", url]) == 1
    out = capsys.readouterr().out
    assert "problem: order: 9 record(s)" in out and "problem: torn tail: " in out
    assert "9 derived record(s)" in out and "rq:results 9" in out and "to fix: --repair" in out
    assert (d / LOG_NAME).read_bytes() == before  # a check writes nothing

    assert main(["fsck", "--store", url, "--repair"]) == 0
    out = capsys.readouterr().out
    assert "repaired: wrote 18 record(s)" in out and "clean" in out
    assert (d / f"{LOG_NAME}.before-fsck-1").read_bytes() == before
    assert main(["fsck", "--store", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["ok"] and rep["openable"] and rep["found"]["records"] == 18

    r = connect(url)
    try:
        got = [(k, eid, [x for kv in f.items() for x in kv])
               for k in (EV_A, EV_B, AUDIT_A) for eid, f in r.xrange(k)]
        assert sorted(got, key=_by_key_and_id) == made  # every record once, id and fields kept
        assert not list(r.scan_iter(match="rq:*"))
    finally:
        close_embedded(url)


def test_fsck_exit_statuses_and_a_store_in_use(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "store"
    d.mkdir()
    recs = [old_record(EV_A, i, [b"d", i]) for i in _ids(3)]
    data = bytearray(b"".join(recs))
    data[len(recs[0]) + 10] ^= 0x01
    (d / LOG_NAME).write_bytes(bytes(data))
    url = f"memory://{d}"
    assert main(["fsck", "--store", url, "--repair"]) == 1  # would lose a record: refused
    out = capsys.readouterr().out
    assert "not repaired:" in out and "--drop-unreadable" in out
    assert (d / LOG_NAME).read_bytes() == bytes(data)
    with pytest.raises(LogDamaged, match="unreadable"):
        connect(url)
    assert main(["fsck", "--store", url, "--repair", "--drop-unreadable"]) == 0
    assert (d / LOG_NAME).read_bytes() == recs[0] + recs[2]

    assert main(["fsck", "--store", "memory://"]) == 2
    assert main(["fsck", "--store", "redis://u:secret@h:6379/0"]) == 2
    assert main(["fsck", "--store", url, "--drop-unreadable"]) == 2
    assert main(["fsck", "--store", f"memory://{tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err
    assert "secret" not in err and "no embedded store log" in err
    held = lock_directory(d)
    try:
        assert main(["fsck", "--store", url]) == 2
        assert "in use by another process" in capsys.readouterr().err
    finally:
        held.close()
