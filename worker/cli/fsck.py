"""``hivemind fsck --store memory://PATH [--repair [--drop-unreadable]] [--json]``: check the
log of an embedded store (framing, CRC, entry-id order within each stream) and repair what
can be repaired without losing an acknowledged record: each stream's records put back in id
order, exact duplicates once, a torn tail cut, derived records of older versions dropped.
The old file is kept beside the new one (``streams.log.before-fsck-N``). Unreadable bytes
between records held records that are gone: only ``--drop-unreadable`` lets a repair leave
them out. Exit 0 clean (as found, or after the repair), 1 problems left, 2 usage error or no
store there (or the store is open in another process). The work is in ``store.logfile``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from hivemind_memory.projections.store.embedded import is_persistent
from hivemind_memory.projections.store.logfile import fsck
from hivemind_memory.projections.store.urls import redact_url
from hivemind_memory.worker.cli.args import fail
from hivemind_memory.worker.cli.output import print_fsck


def cmd_fsck(args: argparse.Namespace) -> int:
    url: str = args.store
    if not is_persistent(url):
        why = ("memory:// keeps nothing on disk" if url == "memory://" else
               f"{redact_url(url)} is not an embedded store")
        return fail(f"fsck checks the log of an embedded store kept on disk: --store "
                    f"memory://PATH ({why})")
    if args.drop_unreadable and not args.repair:
        return fail("--drop-unreadable goes with --repair")
    rep = fsck(Path(url[len("memory://"):]).expanduser(), repair=args.repair,
               drop_unreadable=args.drop_unreadable)
    if args.json:
        obj = {"ok": rep.ok, "openable": (rep.after or rep.found).openable,
               **msgspec.to_builtins(rep)}
        sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")
    else:
        print_fsck(rep)
    return 0 if rep.ok else 1
