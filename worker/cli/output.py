"""How the CLI prints things for people: results, and Redis errors without protocol noise."""

from __future__ import annotations

import sys
from typing import IO

import msgspec
import redis


def redis_message(exc: redis.RedisError) -> str:
    """A Redis error for people: the server's words, without the pipelined command bytes."""
    text = str(exc)
    _, sep, tail = text.partition(" caused error: ")
    return f"{type(exc).__name__}: {tail if sep else text}"


def print_result(body: bytes, as_json: bool, out: IO[str] | None = None) -> int:
    """Print a result (JSON, or a readable listing); 1 if it is an error object."""
    out = out or sys.stdout
    obj = msgspec.json.decode(body)
    if as_json:
        out.write(body.decode() + "\n")
        return 1 if "error" in obj else 0
    if "error" in obj:
        out.write(f"error [{obj['error']['code']}] {obj['error']['message']}\n"
                  f"query_id {obj['query_id']}\n")
        return 1
    out.write(f"query {obj['query_id']}  ns={obj['ns']}  as_of={obj['as_of']}\n")
    for i, n in enumerate(obj["notes"], start=1):
        first = (n["text"].splitlines() or [""])[0][:72]
        out.write(f"{i:>3}. {n['note_id']:<20} {n['tier']:<9} score={n['score']:.4f} "
                  f"tokens={n['tokens']:<6} {first}\n")
    out.write(f"used {obj['used']} / {obj['budget']} tokens, {len(obj['notes'])} note(s), "
              f"method {obj['method']}\n")
    for c in obj.get("candidates") or []:
        out.write(f"   {'*' if c['chosen'] else ' '} {c['note_id']:<20} rel={c['relevance']:.4f} "
                  f"rec={c['recency']:.4f} score={c['score']:.4f} cost={c['cost']} "
                  f"tier={c['tier']} uses={c['uses']} age={c['age_days']:.1f}d\n")
    return 0
