"""``hivemind query`` and ``hivemind batch``: the client side only (no worker, no ranking
code imported), so a batch's process starts fast and spends its time moving the worker's
bytes: results are written as they are, in input order, as each job's answers land."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import QueryRequest, is_error_json, parse_request
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import QueryError
from hivemind_memory.worker.cli.args import fail, progress, warn_unknown_namespaces
from hivemind_memory.worker.cli.output import print_result


def _client(s: Settings) -> Client:
    return Client.connect(s)


def cmd_query(args: argparse.Namespace, s: Settings) -> int:
    c = _client(s)
    warn_unknown_namespaces([args.ns], c.namespaces())
    req: dict[str, Any] = {"ns": args.ns, "text": args.text, "budget": args.budget,
                           "agent": args.agent, "explain": args.explain}
    if args.as_of is not None:
        req["as_of"] = args.as_of
    [body] = c.batch_results(c.submit_batch([req]), args.timeout)
    return print_result(body, args.json)


def cmd_batch(args: argparse.Namespace, s: Settings) -> int:
    c = _client(s)
    try:
        fh = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        return fail(f"cannot read {args.file}: {exc.strerror or exc}")
    reqs: list[QueryRequest | QueryError] = []
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = msgspec.json.decode(line)
                if not isinstance(obj, dict):
                    raise QueryError("invalid_request", "a query must be a JSON object")
                reqs.append(parse_request(obj))
            except msgspec.DecodeError as exc:
                reqs.append(QueryError("invalid_request", f"line {lineno}: malformed JSON: {exc}"))
            except QueryError as exc:
                reqs.append(QueryError(exc.code, f"line {lineno}: {exc.message}"))
    asked = [q.ns for q in reqs if isinstance(q, QueryRequest)]
    if asked:  # nothing to warn about: no round trip for the known namespaces
        warn_unknown_namespaces(asked, c.namespaces())
    ids = c.submit_batch(reqs)
    failed = 0
    bar = progress(len(ids), "batch", unit="q", minimum=100)
    out = sys.stdout.buffer
    done = 0
    for run in c.batch_result_runs(ids, args.timeout):
        # the worker's bytes as they are (no decode, no re-encode), a run at a time, flushed
        # so a reader sees each job's answers as they land
        out.write(b"\n".join(run) + b"\n")
        out.flush()
        failed += sum(is_error_json(body, qid)
                      for body, qid in zip(run, ids[done:done + len(run)], strict=True))
        done += len(run)
        bar.update(len(run))
    bar.close()
    print(f"batch: {len(ids)} queries, {len(ids) - failed} answered, {failed} error(s)",
          file=sys.stderr)
    return 1 if failed else 0
