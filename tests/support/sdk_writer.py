"""A process of SDK writers for the kill tests: ``python -m tests.support.sdk_writer URL SEED
THREADS WRITERS NOTES``. ``WRITERS`` ``Memory(URL)`` objects (namespaces ``n0``/``n1``), each
used by ``THREADS`` threads that remember ``NOTES`` notes each; a line ``ack NS NOTE_ID`` is
printed (and flushed) once ``remember`` returned, ``sent NS NOTE_ID`` before it is called.
The test kills the process at a random point and compares the log with these lines."""

from __future__ import annotations

import random
import sys
import threading

import structlog

from hivemind_memory import Memory

_out = threading.Lock()


def _say(word: str, ns: str, nid: str) -> None:
    with _out:
        sys.stdout.write(f"{word} {ns} {nid}\n")
        sys.stdout.flush()


def _work(mem: Memory, name: str, n: int, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(n):
        nid = f"{name}-{i}"
        _say("sent", mem.ns, nid)
        mem.remember(f"note {nid} about deploys and keys {rng.random()}", note_id=nid)
        _say("ack", mem.ns, nid)


def main(argv: list[str]) -> int:
    # the worker's log lines go to stderr: stdout carries only this protocol
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    url, seed, threads, writers, notes = argv[0], *map(int, argv[1:5])
    mems = [Memory(url, ns=f"n{m % 2}", agent=f"w{m}") for m in range(writers)]
    print("ready", flush=True)
    ts = [threading.Thread(target=_work, args=(m, f"w{j}t{t}", notes, seed * 100 + j * 10 + t))
          for j, m in enumerate(mems) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("done", flush=True)
    for m in mems:
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
