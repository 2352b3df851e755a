"""LangGraph: hivemind as a ``BaseStore`` (``pip install 'hivemind-memory[langgraph]'``), over the
public SDK only.

::

    from hivemind_memory import Memory
    from hivemind_memory.integrations.langgraph import HivemindStore

    store = HivemindStore(Memory("http://localhost:8080", ns="team-a", token="..."))
    store.put(("memories", "alice"), "food", {"text": "likes pizza"})
    store.get(("memories", "alice"), "food").value          # read your writes
    store.search(("memories",), query="what does alice eat")  # ranked by hivemind

How items map to notes (lossless and reversible): every item of a store is one live note of the
``Memory``'s namespace. Its note id spells the item's namespace and key:
``<root>.<label>.<label>.:<key>:<version>``, where each label and the key keep the characters
``A-Z a-z 0-9 _ -`` and write every other byte of their UTF-8 as ``@`` and two hex digits
(``.`` ``:`` and ``@`` included, so the separators never occur inside a part), each label ends
with ``.``, and ``version`` is a time-ordered stamp of the item's creation (stores written by
releases that could not revise notes also hold ``-2``, ``-3`` ... versions, read as before).
A writer whose token may not see every note (``serve --tokens`` without ``admin``) chooses
only ids of its own space, so each id then ends with ``@@`` and its agent
(``Memory.id_suffix``; ``events.noteids``). ``decode_note_id`` inverts it. A note
id holds at most 128 characters: an item whose encoded namespace and key do not fit is refused
(``ValueError``). The note's text is the item's value as JSON, which is what hivemind ranks.

- ``get``/``search``/``list_namespaces`` read the notes by id prefix (``Memory.notes``,
  ``POST .../read``), so they see every write made before them (read-your-writes, no worker
  wait); within one ``batch`` reads see the state before the batch's puts, as LangGraph's
  in-memory store does.
- ``put`` on an existing key is a revision of its note (``Memory.revise``: same id, uses and
  tier kept; ``as_of`` before the put answers the old value).
- ``search(query=...)`` is hivemind's ranking: the notes that best fill ``search_budget``
  tokens, restricted to the namespace prefix on the server (``id_prefix``), best score first.
  Each value's top-level scalar fields (strings up to 1 KiB, at most 32 keys of the metadata
  key charset) are stored as the note's ``metadata``, so a ``filter`` on them is applied by
  the server before ranking and packing (the budget goes to matching items only); a filter
  the server cannot express (nested values, other operators) is applied to what comes back,
  and every result is checked against the filter again. Without a query the items are listed
  in namespace-then-key order.
- ``memory`` may be a ``Memory`` or an ``AsyncMemory``; ``abatch`` (every ``a*`` method)
  runs the batch in a worker thread, never blocking the event loop.
- Stricter than LangGraph: ``scope="private"`` items are seen only by their agent; only an
  item's author (or an ``admin`` token) may update or delete it (``NotAllowed``); ``ttl`` is
  not supported; ``index=`` (an embedder of the user's) is refused with a ``ValueError``:
  hivemind ranks every value with its own relevance (lexical and its configured embedder).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("LangGraph is not installed: pip install 'hivemind-memory[langgraph]'"
                      ) from exc

from hivemind_memory import AsyncMemory, Memory, Note, NoteExists, UnknownNote
from hivemind_memory.api_stub.tool_spec import METADATA_LIMITS

MAX_ID = 128
"""Longest note id."""
OWNER_MARK = "@@"
"""What separates a note id from the agent whose id space it is in (``Memory.id_suffix``)."""
PAGE = 1000
"""Notes one read returns at most."""
WRITE_ATTEMPTS = 5
"""A put that loses a race with another writer of the same key reads again this many times."""
_KEEP = re.compile(r"[A-Za-z0-9_-]")
_ROOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}\Z")


# -- the mapping ------------------------------------------------------------------------------
def encode_part(s: str) -> str:
    """A label or key in the note id charset: ``A-Z a-z 0-9 _ -`` kept, every other byte of its
    UTF-8 as ``@XX``."""
    return "".join(c if _KEEP.fullmatch(c) else "".join(f"@{b:02X}" for b in c.encode())
                   for c in s)


def decode_part(s: str) -> str:
    """The inverse of ``encode_part``."""
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] == "@":
            out.append(int(s[i + 1:i + 3], 16))
            i += 3
        else:
            out += s[i].encode()
            i += 1
    return out.decode()


def namespace_prefix(root: str, namespace: tuple[str, ...]) -> str:
    """The id prefix of every item in ``namespace`` or below it."""
    return root + "." + "".join(encode_part(label) + "." for label in namespace)


def item_prefix(root: str, namespace: tuple[str, ...], key: str) -> str:
    """The id prefix of every version of one item."""
    return f"{namespace_prefix(root, namespace)}:{encode_part(key)}:"


@dataclass(frozen=True)
class ItemId:
    """A note id read as an item: where it is, and which version."""

    namespace: tuple[str, ...]
    key: str
    stamp: str
    """The item's creation stamp (µs since the epoch, hex, then random hex)."""
    version: int

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(int(self.stamp[:14], 16) / 1e6, UTC)


def decode_note_id(root: str, note_id: str) -> ItemId | None:
    """The item a note id names, or None if it is not one of ``root``'s (an ``@@AGENT``
    ending, the id space of a restricted writer, is not part of the item)."""
    if not note_id.startswith(root + "."):
        return None
    note_id = note_id.partition(OWNER_MARK)[0]  # parts write "@" as "@40": never "@@"
    try:
        labels, key, version = note_id[len(root) + 1:].split(":")
        if not labels.endswith(".") and labels:
            return None
        stamp, _, n = version.partition("-")
        return ItemId(tuple(decode_part(p) for p in labels.split(".")[:-1]), decode_part(key),
                      stamp, int(n) if n else 1)
    except (ValueError, UnicodeDecodeError):
        return None


def note_id_of(root: str, namespace: tuple[str, ...], key: str, stamp: str,
               version: int = 1, suffix: str = "") -> str:
    """The note id of one version of an item (``ValueError`` if it cannot fit); ``suffix``:
    the writer's id space (``Memory.id_suffix``: ``@@AGENT`` for a restricted token)."""
    nid = (item_prefix(root, namespace, key) + stamp + (f"-{version}" if version > 1 else "")
           + suffix)
    if len(nid) > MAX_ID:
        raise ValueError(f"namespace {namespace!r} and key {key!r} need a {len(nid)}-character "
                         f"note id; hivemind's ids hold at most {MAX_ID}")
    return nid


def new_stamp() -> str:
    """A time-ordered creation stamp: µs since the epoch (14 hex) and 4 random hex."""
    return f"{time.time_ns() // 1000:014x}{secrets.token_hex(2)}"


# -- the revision strategy (one switch) -------------------------------------------------------
def revise_note(memory: Memory, current: Note, text: str, scope: str,
                metadata: dict[str, Any] | None = None) -> None:
    """Put on an existing key: the new value as a revision of the key's note
    (``Memory.revise``): the note keeps its id, uses and tier, and an answer as of before the
    put still shows the old value (``scope`` stays the note's; a note's scope never changes).
    A key whose note was forgotten meanwhile is ``UnknownNote``: the caller reads again."""
    memory.revise(current.note_id, text, metadata=metadata or {})


# -- the store --------------------------------------------------------------------------------
def _value(note: Note) -> dict[str, Any] | None:
    try:
        v = json.loads(note.text)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None


_META_KEY = re.compile(METADATA_LIMITS[0])
_SERVER_OPS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in"})


def _scalar(v: Any) -> bool:
    if isinstance(v, str):
        return len(v.encode()) <= METADATA_LIMITS[2]
    return isinstance(v, bool | int) or (isinstance(v, float) and math.isfinite(v))


def metadata_of(value: Mapping[str, Any]) -> dict[str, Any]:
    """The note metadata of an item's value: its top-level scalar fields that fit (a metadata
    key, a string of at most 1 KiB), the first 32 of them."""
    out = {k: v for k, v in value.items() if _META_KEY.match(k) and _scalar(v)}
    return dict(list(out.items())[:METADATA_LIMITS[1]])


def server_filter(flt: dict[str, Any] | None) -> dict[str, Any] | None:
    """``flt`` if the server can apply it (metadata keys, scalar values, its operators),
    else None (then it is applied to what comes back only)."""
    if not flt:
        return None
    for k, v in flt.items():
        if not _META_KEY.match(k):
            return None
        if isinstance(v, dict):
            if not v or any(op not in _SERVER_OPS or not _scalar(x) for op, x in v.items()):
                return None
        elif not _scalar(v):
            return None
    return flt


def _matches(value: dict[str, Any], flt: dict[str, Any] | None) -> bool:
    """LangGraph's filter rule: every key's value matches (``_compare``)."""
    return not flt or all(_compare(value.get(k), v) for k, v in flt.items())


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: bool(a == b), "$ne": lambda a, b: bool(a != b),
    "$gt": lambda a, b: float(a) > float(b), "$gte": lambda a, b: float(a) >= float(b),
    "$lt": lambda a, b: float(a) < float(b), "$lte": lambda a, b: float(a) <= float(b)}


def _compare(got: Any, want: Any) -> bool:
    """A filter value against an item's (as LangGraph's stores compare them): operators
    (``$eq $ne $gt $gte $lt $lte``), nested objects key by key, lists element by element,
    anything else by equality."""
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            unknown = set(want) - set(_OPS)
            if unknown:
                raise ValueError(f"unsupported filter operator(s): {sorted(unknown)}")
            return all(_OPS[k](got, v) for k, v in want.items())
        return isinstance(got, dict) and all(_compare(got.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return isinstance(got, list | tuple) and len(got) == len(want) and all(
            _compare(g, w) for g, w in zip(got, want, strict=True))
    return bool(got == want)


def _ns_matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    """A namespace against a prefix or suffix condition (``*`` matches any one label)."""
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    part = ns[:len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path):]
    return all(p in ("*", n) for n, p in zip(part, path, strict=True))


class HivemindStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are notes of one hivemind namespace (see the
    module docstring for the mapping and where it is stricter than LangGraph)."""

    def __init__(self, memory: Memory | AsyncMemory, *, root: str = "lg",
                 search_budget: int = 2000, scope: Literal["shared", "private"] = "shared",
                 index: Any = None) -> None:
        if index is not None:
            raise ValueError(
                "HivemindStore does not take index=: hivemind ranks every value with its own "
                "relevance (lexical, and the embedder of its worker's config), so a "
                "LangGraph embedder would be ignored; leave index unset")
        if not _ROOT.match(root):
            raise ValueError(f"root {root!r} must be 1 to 32 of A-Z a-z 0-9 _ -, starting with "
                             "a letter or digit")
        self.memory = memory.sync if isinstance(memory, AsyncMemory) else memory
        self.root = root
        self.search_budget = search_budget
        """Tokens the items of one ``search(query=...)`` may take together (hivemind packs the
        most useful that fit, then ``limit`` and ``offset`` apply)."""
        self.scope = scope

    # -- reads ---------------------------------------------------------------------------------
    def _notes(self, prefix: str) -> list[Note]:
        out: list[Note] = []
        after = ""
        while True:
            page = self.memory.notes(prefix, after=after, limit=PAGE)
            out += page
            if len(page) < PAGE:
                return out
            after = page[-1].note_id

    def _live(self, namespace: tuple[str, ...], key: str) -> list[Note]:
        """The item's live notes, newest version last (two only after a race of creators)."""
        notes = [n for n in self._notes(item_prefix(self.root, namespace, key))
                 if (i := decode_note_id(self.root, n.note_id)) is not None
                 and i.namespace == namespace and i.key == key]
        return sorted(notes, key=lambda n: self._order(n))

    def _order(self, n: Note) -> tuple[str, int]:
        i = decode_note_id(self.root, n.note_id)
        return ("", 0) if i is None else (i.stamp, i.version)

    def _item(self, n: Note, cls: type[Item] = Item, score: float | None = None
              ) -> Item | None:
        i = decode_note_id(self.root, n.note_id)
        value = _value(n)
        if i is None or value is None:
            return None
        updated = n.revised_at or n.created_at
        # a revised note keeps its creation; a forgotten-and-recreated version names the first
        created = n.created_at if i.version == 1 else min(i.created_at, updated)
        if cls is SearchItem:
            return SearchItem(i.namespace, i.key, value, created, updated, score)
        return Item(value=value, key=i.key, namespace=i.namespace, created_at=created,
                    updated_at=updated)

    def _get(self, op: GetOp) -> Item | None:
        live = self._live(op.namespace, op.key)
        return self._item(live[-1]) if live else None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = namespace_prefix(self.root, op.namespace_prefix)
        out: list[SearchItem] = []
        if op.query:
            # the ranked notes themselves, not a rendered context: no headers in the costs
            res = self.memory.query(op.query, self.search_budget, id_prefix=prefix,
                                    filter=server_filter(op.filter))
            ranked = sorted(res["notes"], key=lambda r: -float(r["score"]))
            by_id = {n.note_id: n for n in self.memory.read_notes(
                [r["note_id"] for r in ranked])}
            for r in ranked:
                note = by_id.get(r["note_id"])
                item = None if note is None else self._item(note, SearchItem, r["score"])
                if isinstance(item, SearchItem) and _matches(item.value, op.filter):
                    out.append(item)
        else:
            for note in self._notes(prefix):
                item = self._item(note, SearchItem)
                if isinstance(item, SearchItem) and _matches(item.value, op.filter):
                    out.append(item)
        return out[op.offset:op.offset + op.limit]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        known: set[tuple[str, ...]] = set()
        start: tuple[str, ...] = ()
        for cond in op.match_conditions or ():  # a literal prefix narrows the read
            if cond.match_type == "prefix" and "*" not in cond.path:
                start = tuple(cond.path)
        for note in self._notes(namespace_prefix(self.root, start)):
            i = decode_note_id(self.root, note.note_id)
            if i is not None:
                known.add(i.namespace)
        spaces = [ns for ns in known
                  if all(_ns_matches(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            spaces = sorted({ns[:op.max_depth] for ns in spaces})
        else:
            spaces = sorted(spaces)
        return spaces[op.offset:op.offset + op.limit]

    # -- writes --------------------------------------------------------------------------------
    def _put(self, op: PutOp) -> None:
        for attempt in range(WRITE_ATTEMPTS):
            live = self._live(op.namespace, op.key)
            try:
                if op.value is None:
                    for n in live:
                        self.memory.forget(n.note_id)
                    return
                text = json.dumps(op.value, ensure_ascii=False)
                meta = metadata_of(op.value)
                if not live:
                    self.memory.remember(text, scope=self.scope, note_id=note_id_of(
                        self.root, op.namespace, op.key, new_stamp(),
                        suffix=self.memory.id_suffix()), duplicates="ignore",
                        metadata=meta or None)
                    return
                for stale in live[:-1]:  # a race of two creators left two versions
                    self.memory.forget(stale.note_id)
                revise_note(self.memory, live[-1], text, self.scope, meta)
                return
            except (NoteExists, UnknownNote):
                if attempt == WRITE_ATTEMPTS - 1:
                    raise

    # -- the BaseStore interface ---------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Reads first, on the state before the batch; then its puts, the last one per item
        winning (as LangGraph's in-memory store does)."""
        ops = list(ops)
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._namespaces(op))
            elif isinstance(op, PutOp):
                note_id_of(self.root, op.namespace, op.key, new_stamp(),  # fits, or ValueError
                           suffix=self.memory.id_suffix())
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise ValueError(f"unknown operation {type(op).__name__}")
        for op in puts.values():
            self._put(op)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))


__all__ = [
    "HivemindStore",
    "ItemId",
    "decode_note_id",
    "decode_part",
    "encode_part",
    "item_prefix",
    "namespace_prefix",
    "note_id_of",
    "revise_note",
]
