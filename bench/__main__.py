"""``python -m bench abstention|batch|core|profile|ranking|query|scale|writes|all [...]``:
benchmarks that print figures (never shipped). ``all`` runs ``core`` (ingest, projection,
replay, each beside its baseline) and ``query`` at 1k/10k/100k notes (in-worker latency,
index load, RSS, end to end and batch vs the RQ no-op job), after a header naming the
machine and the date; ``batch`` runs a batch the three ways users do (``hivemind batch``,
HTTP, the SDK) beside the no-op job; ``profile`` times (and with ``--cprofile`` profiles)
the worker's query path in process; ``writes`` times ``remember`` with each ``duplicates``
mode and its near-duplicate check; ``abstention`` measures rules that would give a question
with nothing relevant a short context."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import UTC, datetime

from bench import (
    abstention,
    batch,
    core,
    fit_calibration,
    profile,
    quality,
    query,
    ranking,
    scale,
    scale_cpu,
    shards,
    writes,
)


def all_(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench all")
    ap.add_argument("--events", type=int, default=1_000_000,
                    help="events of the ingest/projection/replay run (default 1,000,000)")
    ap.add_argument("--sizes", default="10000,1000,100000",
                    help="notes per namespace; the end-to-end and batch steps use the first")
    ap.add_argument("--quick", action="store_true",
                    help="scaled down: 20,000 events, sizes 500,2000, few queries")
    args = ap.parse_args(argv)
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"machine: {platform.node()} {platform.machine()} {cpu}, {os.cpu_count()} cores; "
          f"{platform.python_implementation()} {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.1f}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    if args.quick:
        code = core.main(["--events", "20000"])
        return code or query.main(["--sizes", "500,2000", "--queries", "20", "--common", "3",
                                   "--e2e", "10", "--batch", "40", "--batch-chunk1", "10",
                                   "--noop", "40"])
    code = core.main(["--events", str(args.events)])
    common = ",".join("10" if int(n) < 50_000 else "6" for n in args.sizes.split(","))
    return code or query.main(["--sizes", args.sizes, "--common", common])


COMMANDS = {"abstention": abstention.main, "batch": batch.main, "core": core.main,
            "ranking": ranking.main, "profile": profile.main,
            "query": query.main, "all": all_, "quality": quality.main,
            "fit": fit_calibration.main, "scale": scale.main, "scale-cpu": scale_cpu.main,
            "shards": shards.main, "writes": writes.main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m bench {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        return 2
    return int(COMMANDS[argv[0]](argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
