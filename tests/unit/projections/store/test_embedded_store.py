"""``memory://PATH``: every source-stream append is in the file, fsynced per client write,
replayed at start with the same ids; derived streams (dead letters, changes, RQ's results)
are not, and a user's flow shows every stream kind classified; a torn tail is cut; a write
that fails part-way is cut back and retried by the next; one process at a time. Concurrency
and crashes: ``test_embedded_concurrency.py``; the file's checks and repair:
``test_logfile.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import close_embedded, connect
from hivemind_memory.projections.store.embedded import LOG_NAME, StreamLog, is_persistent
from tests.support.factories import used


def _url(tmp_path: Path) -> str:
    return f"memory://{tmp_path / 'store'}"


def test_plain_memory_is_not_persistent() -> None:
    assert not is_persistent("memory://")
    assert is_persistent("memory://./data") and is_persistent("memory:///var/lib/hm")


def test_source_streams_are_the_hivemind_streams_nothing_rebuilds() -> None:
    src = [keys.stream("a"), keys.audit("a"), keys.configs("a"), keys.query_embeddings("a"),
           "hm:{a}:some-future-stream"]  # unknown kinds are kept: losing a source is worse
    derived = [keys.dead("a"), keys.changes("a"), "rq:results:3f2a", "rq:queue:project",
               keys.NAMESPACES, "other"]
    assert [keys.is_source_stream(k.encode()) for k in src] == [True] * len(src)
    assert [keys.is_source_stream(k.encode()) for k in derived] == [False] * len(derived)


def test_every_source_stream_append_survives_a_restart(tmp_path: Path) -> None:
    url = _url(tmp_path)
    r = connect(url)
    try:
        p = r.pipeline(transaction=True)  # MULTI/EXEC
        p.xadd(keys.stream("a"), {b"d": b"\x00\xffbinary"})
        p.xadd(keys.audit("a"), {b"d": b'{"q":1}'}, maxlen=1000, approximate=True)
        p.xadd(keys.dead("a"), {b"entry": b"1-0", b"reason": b"x"})
        p.xadd(keys.changes("a"), {b"pos": b"1-0"}, maxlen=10, approximate=True)
        p.execute()
        r.xadd(keys.stream("b"), {b"d": b"plain"})  # a single command
        r.eval("return redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])", 1,  # a Lua script
               keys.stream("b"), b"from lua")
        before = {k: r.xrange(k) for k in (keys.stream("a"), keys.audit("a"), keys.stream("b"))}
        size = (tmp_path / "store" / LOG_NAME).stat().st_size
        assert size > 0
    finally:
        close_embedded(url)

    r2 = connect(url)
    try:
        for k, entries in before.items():
            assert r2.xrange(k) == entries  # same ids, same fields
        assert not r2.exists(keys.dead("a")) and not r2.exists(keys.changes("a"))
        assert r2.smembers(keys.NAMESPACES) == {b"a", b"b"}
        r2.xadd(keys.stream("a"), {b"d": b"after restart"})
        assert (tmp_path / "store" / LOG_NAME).stat().st_size > size
    finally:
        close_embedded(url)


def test_a_torn_tail_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    url = _url(tmp_path)
    r = connect(url)
    r.xadd(keys.stream("a"), {b"d": b"one"})
    r.xadd(keys.stream("a"), {b"d": b"two"})
    close_embedded(url)
    log_path = tmp_path / "store" / LOG_NAME
    whole = log_path.read_bytes()
    log_path.write_bytes(whole[:-3])  # a crash in the middle of the second record
    with capture_logs() as logs:
        r = connect(url)
    try:
        assert [f[b"d"] for _, f in r.xrange(keys.stream("a"))] == [b"one"]
        assert any(e["event"] == "embedded_log_torn_tail" for e in logs)
        r.xadd(keys.stream("a"), {b"d": b"three"})  # appends after the cut, not the garbage
    finally:
        close_embedded(url)
    r = connect(url)
    try:
        assert [f[b"d"] for _, f in r.xrange(keys.stream("a"))] == [b"one", b"three"]
    finally:
        close_embedded(url)


def test_a_corrupt_record_stops_replay_there(tmp_path: Path) -> None:
    d = tmp_path / "store"
    log = StreamLog(d)
    log.append(b"hm:{a}:events", b"1-0", [b"d", b"x"])
    log.append(b"hm:{a}:events", b"2-0", [b"d", b"y"])
    log.close()
    data = bytearray((d / LOG_NAME).read_bytes())
    data[-1] ^= 0xFF  # flip a bit of the last record's payload: its CRC no longer matches
    (d / LOG_NAME).write_bytes(bytes(data))
    log = StreamLog(d)
    try:
        with capture_logs() as logs:
            assert [r.entry_id for r in log.load()] == [b"1-0"]
        assert [e["dropped_bytes"] for e in logs if e["event"] == "embedded_log_torn_tail"]
    finally:
        log.close()


def test_one_process_at_a_time(tmp_path: Path) -> None:
    url = _url(tmp_path)
    connect(url)
    try:
        with pytest.raises(StoreError, match="in use"):
            StreamLog(tmp_path / "store")
        # another process is refused too
        import subprocess
        import sys

        code = ("import sys; from hivemind_memory.projections.store.connection import connect\n"
                "try:\n    connect(sys.argv[1])\nexcept Exception as e:\n"
                "    print(type(e).__name__, e); sys.exit(3)\n")
        got = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                             timeout=60, check=False, env={**os.environ})
        assert got.returncode == 3 and "StoreLocked" in got.stdout  # a StoreError
    finally:
        close_embedded(url)


def test_demo_on_memory_path_twice(tmp_path: Path) -> None:
    """``demo --store memory://PATH``: the second run replays the first run's log; its
    events are applied once, so the answers are the same."""
    import subprocess

    from tests.support import HIVEMIND

    outs = []
    for _ in range(2):
        got = subprocess.run([*HIVEMIND, "demo", "--store", "memory://demo-data"],
                             capture_output=True, text=True, timeout=120, check=False,
                             cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        outs.append(got.stdout)
    assert "events" in outs[0].splitlines()[0]  # "hivemind demo: N events, ..."
    assert outs[0] == outs[1]  # the same notes, dead letters and answers, byte for byte
    assert (tmp_path / "demo-data" / LOG_NAME).stat().st_size > 0


def test_only_source_streams_are_logged_and_every_stream_kind_is_classified(
        tmp_path: Path) -> None:
    """A user's flow over the SDK writes every kind of stream: the sources come back from
    the log entry for entry; the derived ones (dead letters, changes, RQ's results) are not
    in it. A new stream kind fails here until ``keys`` says which it is."""
    from hivemind_memory import Memory
    from hivemind_memory.projections.store.logfile import check, scan
    from tests.support.crashlog import source_kinds_known, stream_keys

    url = _url(tmp_path)
    with Memory(url, ns="a", agent="alice") as mem:
        nid = mem.remember("Deploys happen on Tuesdays", embedding=[0.1, 0.9])
        # a dead letter: the SDK refuses such a write, a raw append (the operator's) does not
        raw = mem._t.client  # type: ignore[attr-defined]
        raw.append([used("never-seen", "u-ghost", ns="a")])
        got = mem.recall("deploys", budget=100, embedding=[0.2, 0.8])  # audit, qembeddings
        mem.used(*got.note_ids)
        mem.query("tuesdays", 100, config={"min_relevance": 0.01})  # a second config
        assert got.note_ids == [nid]
        r = connect(url)
        before = {k: r.xrange(k) for k in stream_keys(r)}
    close_embedded(url)
    kinds = {k.partition(b"}:")[2].decode() for k in before if k.startswith(b"hm:{")}
    assert kinds == source_kinds_known(), kinds  # every kind: a new one must be classified
    assert any(k.startswith(b"rq:results:") for k in before)
    found = check(scan((tmp_path / "store" / LOG_NAME).read_bytes()))
    assert not found.problems and found.derived_records == 0

    r = connect(url)
    try:
        after = {k: r.xrange(k) for k in stream_keys(r)}
        assert after == {k: v for k, v in before.items() if keys.is_source_stream(k)}
        assert {k.partition(b"}:")[2] for k in after} == {b"events", b"audit", b"configs",
                                                          b"qembeddings", b"digest_key"}
    finally:
        close_embedded(url)



def test_a_write_that_fails_part_way_is_cut_back_and_retried_by_the_next_one(
        tmp_path: Path) -> None:
    """A real failed write (the file size limit, as a full disk would): the caller gets
    ``StoreError``, the file keeps no torn record, and the next write brings the record the
    server already holds to the file, in order."""
    import subprocess
    import sys

    code = (
        "import resource, signal, sys\n"
        "from hivemind_memory.events.errors import StoreError\n"
        "from hivemind_memory.projections.store import keys\n"
        "from hivemind_memory.projections.store.connection import close_embedded, connect\n"
        "url, log = sys.argv[1], sys.argv[2]\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, no signal\n"
        "r = connect(url)\n"
        "r.xadd(keys.stream('a'), {b'd': b'before'})\n"
        "import os\n"
        "size = os.path.getsize(log)\n"
        "hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, hard))\n"
        "try:\n"
        "    r.xadd(keys.stream('a'), {b'd': b'x' * 200})\n"
        "    sys.exit('no error')\n"
        "except StoreError as exc:\n"
        "    print('refused:', exc)\n"
        "assert os.path.getsize(log) == size, 'a torn record stayed'\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))\n"
        "r.xadd(keys.stream('a'), {b'd': b'after'})\n"
        "close_embedded(url)\n")
    url = _url(tmp_path)
    got = subprocess.run([sys.executable, "-c", code, url, str(tmp_path / "store" / LOG_NAME)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "refused: cannot write the embedded store's log" in got.stdout
    r = connect(url)
    try:
        assert [f[b"d"] for _, f in r.xrange(keys.stream("a"))] == [b"before", b"x" * 200,
                                                                    b"after"]
    finally:
        close_embedded(url)


def test_a_rewrite_whose_queued_records_cannot_be_written_fails_as_an_append_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An erasure's rewrite first writes the records queued before it: a failed write is
    a ``StoreError`` naming the log, and a log that could not even be cut back refuses every
    later write (the file would have a hole), as for an append (``StreamLog._flush``)."""
    from hivemind_memory.projections.store.embedded import stream_log_of

    url = _url(tmp_path)
    r = connect(url)
    try:
        r.xadd(keys.stream("a"), {b"d": b"before"})
        slog = stream_log_of(r)
        assert slog is not None
        with slog.ordering:
            seq = slog.queue(keys.stream("a").encode(), b"9999999999999-0", [b"d", b"queued"])

        def no_space(*_: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(StreamLog, "_write", lambda self, chunk, last: no_space())
        monkeypatch.setattr(os, "ftruncate", lambda fd, size: no_space())
        with pytest.raises(StoreError, match="cannot write the embedded store's log"):
            slog.rewrite(lambda key, fields: None)
        monkeypatch.undo()
        with pytest.raises(StoreError, match="could not be cut back"):
            slog.sync(seq)
        with pytest.raises(StoreError, match="could not be cut back"):
            slog.rewrite(lambda key, fields: None)
    finally:
        close_embedded(url)


def test_a_write_after_the_store_was_closed_is_refused_not_sent_to_a_reused_descriptor(
        tmp_path: Path) -> None:
    """A thread still writing after its store was released (a worker its owner stopped
    waiting for) gets ``StoreError``: the log's descriptor number, free again, may already
    be another file's, which must not receive the record."""
    from hivemind_memory.projections.store.embedded import stream_log_of

    url = _url(tmp_path)
    r = connect(url)
    slog = stream_log_of(r)
    assert slog is not None
    fd = slog._fd
    close_embedded(url)
    opened = [os.open(tmp_path / f"other{i}", os.O_WRONLY | os.O_CREAT) for i in range(2)]
    try:
        assert fd in opened  # the lowest free numbers (the log's and its lock's), reused
        with slog.ordering:
            seq = slog.queue(keys.stream("a").encode(), b"1-1", [b"d", b"late"])
        with pytest.raises(StoreError, match="is closed"):
            slog.sync(seq)
    finally:
        for o in opened:
            os.close(o)
    assert [(tmp_path / f"other{i}").read_bytes() for i in range(2)] == [b"", b""]
