"""LlamaIndex: hivemind as a retriever and as a memory block of ``llama_index.core.memory.Memory``
(``pip install 'hivemind-memory[llamaindex]'``).

::

    from llama_index.core.memory import Memory as ChatMemory

    from hivemind_memory import Memory
    from hivemind_memory.integrations.llamaindex import HivemindMemoryBlock, HivemindRetriever

    mem = Memory("http://localhost:8080", ns="team-a", token="...")
    nodes = HivemindRetriever(mem, budget=500).retrieve("when do we deploy?")
    chat = ChatMemory.from_defaults(session_id="s1", memory_blocks=[HivemindMemoryBlock(
        name="team_memory", memory=mem, budget=500)])

The retriever answers the notes that best fill a token budget (not a top-k), each as a
``TextNode`` whose id is the note id, with the note's score and its date, tier, size and uses
in ``metadata``. The memory block recalls, for the latest messages, what the team wrote down
(the context, each note under ``[note id | date]``), and keeps the messages that leave the
chat's short-term memory as notes (one note per flush).
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import BaseMemoryBlock
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("LlamaIndex is not installed: pip install 'hivemind-memory[llamaindex]'"
                      ) from exc
from pydantic import Field

from hivemind_memory import AsyncMemory, Memory, Recall

NOTE_BYTES = 60 * 1024
"""A flush of messages longer than this (UTF-8) is kept as several notes (a note holds at most
64 KiB)."""


def nodes(got: Recall) -> list[NodeWithScore]:
    """The notes of a recall as scored nodes, in context order."""
    return [NodeWithScore(node=TextNode(id_=n.note_id, text=n.text, metadata={
        **n.metadata, "note_id": n.note_id, "created_at": n.created_at, "tier": n.tier,
        "tokens": n.tokens, "uses": n.uses}), score=n.score) for n in got.notes]


class HivemindRetriever(BaseRetriever):
    """The notes that best fill ``budget`` tokens for the query, packed and ordered by hivemind.
    ``id_prefix``: only among notes whose id starts with it; ``filter``: only notes whose
    metadata matches it (``Memory.query``). ``memory`` may be a ``Memory`` or an
    ``AsyncMemory`` (``aretrieve`` then awaits it)."""

    def __init__(self, memory: Memory | AsyncMemory, budget: int = 1000, id_prefix: str = "",
                 filter: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.memory, self.budget, self.id_prefix = memory, budget, id_prefix
        self.filter = filter

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        sync = self.memory.sync if isinstance(self.memory, AsyncMemory) else self.memory
        return nodes(sync.recall(query_bundle.query_str, self.budget, id_prefix=self.id_prefix,
                                 filter=self.filter))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if isinstance(self.memory, AsyncMemory):
            return nodes(await self.memory.recall(query_bundle.query_str, self.budget,
                                                  id_prefix=self.id_prefix, filter=self.filter))
        return await asyncio.to_thread(self._retrieve, query_bundle)


def _text(messages: list[ChatMessage]) -> str:
    return "\n".join(f"{m.role.value}: {m.content}" for m in messages if m.content)


def _chunks(text: str, limit: int = NOTE_BYTES) -> list[str]:
    """``text`` in pieces of at most ``limit`` bytes of UTF-8, cut between characters."""
    out: list[str] = []
    data = text.encode()
    while data:
        cut = min(limit, len(data))
        while cut < len(data) and (data[cut] & 0xC0) == 0x80:  # not inside a character
            cut -= 1
        out.append(data[:cut].decode())
        data = data[cut:]
    return out


class HivemindMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory shared by a team of agents, as a block of a LlamaIndex ``Memory``."""

    memory: Memory | AsyncMemory = Field(
        description="The hivemind memory (namespace and agent), synchronous or async.")
    budget: int = Field(default=500, ge=1, le=1_000_000,
                        description="Tokens the recalled notes may take.")
    last_messages: int = Field(default=3, ge=1,
                               description="How many of the latest messages make the query.")
    kind: Literal["note", "scratch"] = Field(
        default="note", description="The kind of the notes flushed messages become.")
    scope: Literal["shared", "private"] = Field(
        default="shared", description="Who may recall the notes flushed messages become.")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any
                    ) -> str:
        query = _text(list(messages or [])[-self.last_messages:]).strip()
        if not query:
            return ""
        if isinstance(self.memory, AsyncMemory):
            got = await self.memory.recall(query[-16_000:], self.budget)
        else:
            got = await asyncio.to_thread(self.memory.recall, query[-16_000:], self.budget)
        return got.context

    async def _aput(self, messages: list[ChatMessage]) -> None:
        for piece in _chunks(_text(messages)):
            if not piece.strip():
                continue
            if isinstance(self.memory, AsyncMemory):
                await self.memory.remember(piece, kind=self.kind, scope=self.scope)
            else:
                await asyncio.to_thread(self.memory.remember, piece, kind=self.kind,
                                        scope=self.scope)


__all__ = ["HivemindMemoryBlock", "HivemindRetriever", "nodes"]
