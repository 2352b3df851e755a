"""LangChain: hivemind as a retriever and as the agent's memory tools
(``pip install 'hivemind-memory[langchain]'``).

::

    from hivemind_memory import Memory
    from hivemind_memory.integrations.langchain import HivemindRetriever, memory_tools

    mem = Memory("http://localhost:8080", ns="team-a", token="...")
    docs = HivemindRetriever(memory=mem, budget=500).invoke("when do we deploy?")
    tools = memory_tools(mem)   # remember, recall, used, revise, forget: bind them to a model

The retriever takes a token budget instead of ``k``: hivemind packs the notes that are most
useful together into the budget (``budget=`` on ``invoke`` overrides it for one call). Each
``Document`` has the note id as ``id`` and its score, date, tier, size and uses in
``metadata``. The tools validate their arguments with the same bounds and words as the MCP
tools, and answer errors to the model (``ToolException``) in those words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("LangChain is not installed: pip install 'hivemind-memory[langchain]'"
                      ) from exc
from pydantic import ConfigDict, Field, ValidationError

from hivemind_memory import AsyncMemory, HivemindError, Memory, Recall
from hivemind_memory.api_stub.tool_spec import (
    DESCRIPTIONS,
    ForgetArgs,
    RecallArgs,
    RememberArgs,
    ReviseArgs,
    UsedArgs,
    arguments_message,
    remembered_message,
    tool_message,
)


def documents(got: Recall) -> list[Document]:
    """The notes of a recall as Documents, in context order."""
    return [Document(page_content=n.text, id=n.note_id,
                     metadata={**n.metadata, "note_id": n.note_id, "score": n.score,
                               "created_at": n.created_at, "tier": n.tier, "tokens": n.tokens,
                               "uses": n.uses})
            for n in got.notes]


def _sync(memory: Memory | AsyncMemory) -> Memory:
    """The synchronous face of ``memory``."""
    return memory.sync if isinstance(memory, AsyncMemory) else memory


class HivemindRetriever(BaseRetriever):
    """The notes that best fill a token budget for the query, packed and ordered by hivemind
    (strongest at the edges). Private notes are returned only to their author."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory | AsyncMemory
    """Whose notes, as whom: the agent of the ``Memory`` (its token over HTTP); an
    ``AsyncMemory`` is awaited by ``ainvoke``."""
    budget: int = Field(default=1000, ge=1, le=1_000_000)
    """Tokens the returned notes may take together."""
    id_prefix: str = ""
    """Only notes whose id starts with this."""
    filter: dict[str, Any] | None = None
    """Only notes whose metadata matches it (``Memory.query``; ``filter=`` on ``invoke``
    replaces it for one call)."""

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                budget: int | None = None,
                                filter: dict[str, Any] | None = None) -> list[Document]:
        got = _sync(self.memory).recall(query, budget or self.budget, id_prefix=self.id_prefix,
                                        filter=filter or self.filter)
        return documents(got)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun,
                                       budget: int | None = None,
                                       filter: dict[str, Any] | None = None) -> list[Document]:
        if isinstance(self.memory, AsyncMemory):
            got = await self.memory.recall(query, budget or self.budget,
                                           id_prefix=self.id_prefix,
                                           filter=filter or self.filter)
        else:
            got = await asyncio.to_thread(self.memory.recall, query, budget or self.budget,
                                          id_prefix=self.id_prefix,
                                          filter=filter or self.filter)
        return documents(got)


def _guarded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with hivemind's errors as ``ToolException`` in the tools' words (LangChain hands
    those to the model instead of raising)."""
    def call(**kw: Any) -> Any:
        try:
            return fn(**kw)
        except HivemindError as exc:
            raise ToolException(tool_message(exc)) from exc

    call.__name__ = name
    return call


def _in_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a coroutine function run in a worker thread (what ``AsyncMemory`` does for
    each call), so a tool's ``ainvoke`` never blocks the event loop."""
    async def acall(**kw: Any) -> Any:
        return await asyncio.to_thread(fn, **kw)

    acall.__name__ = fn.__name__
    return acall


def memory_tools(memory: Memory | AsyncMemory) -> list[BaseTool]:
    """``remember``, ``recall``, ``used``, ``revise`` and ``forget`` over ``memory`` (a
    ``Memory`` or an ``AsyncMemory``), as LangChain tools with a synchronous and an async
    implementation each (``invoke`` and ``ainvoke``). ``remember`` answers the new id and the
    notes that already say nearly the same; ``recall`` answers the context (each note under
    ``[note id | date]``) and keeps the Documents as the tool message's artifact."""
    memory = _sync(memory)

    def remember(text: str, kind: str = "note", scope: str = "shared",
                 note_id: str | None = None, supersedes: list[str] | None = None,
                 duplicates: str = "report", metadata: dict[str, Any] | None = None,
                 expires_at: str | None = None) -> str:
        got = memory.remember(text, kind=kind, scope=scope,  # type: ignore[arg-type]
                              note_id=note_id, supersedes=supersedes or (),
                              duplicates=duplicates,  # type: ignore[arg-type]
                              metadata=metadata, expires_at=expires_at)
        dups = None if got.duplicates is None else [(d.note_id, d.overlap)
                                                     for d in got.duplicates]
        return remembered_message(str(got), dups, got.superseded, got.duplicate_of,
                                  got.duplicates_unchecked)

    def recall(query: str, budget: int = 1000, filter: dict[str, Any] | None = None
               ) -> tuple[str, list[Document]]:
        got = memory.recall(query, budget, filter=filter)
        return got.context or "(no notes matched)", documents(got)

    def used(note_ids: list[str]) -> str:
        return f"recorded {memory.used(*note_ids)} use(s)"

    def forget(note_id: str) -> str:
        memory.forget(note_id)
        return f"forgot {note_id}"

    def revise(note_id: str, text: str, expected_version: int | None = None,
               metadata: dict[str, Any] | None = None) -> str:
        memory.revise(note_id, text, expected_version=expected_version, metadata=metadata)
        return f"revised {note_id}"

    def invalid(tool: str) -> Callable[[ValidationError], str]:
        return lambda exc: arguments_message(tool, exc)

    specs: list[tuple[str, Callable[..., Any], type[Any], str]] = [
        ("remember", remember, RememberArgs, "content"),
        ("recall", recall, RecallArgs, "content_and_artifact"),
        ("used", used, UsedArgs, "content"),
        ("revise", revise, ReviseArgs, "content"),
        ("forget", forget, ForgetArgs, "content"),
    ]
    return [StructuredTool.from_function(
        func=_guarded(name, fn), coroutine=_in_thread(_guarded(name, fn)), name=name,
        description=DESCRIPTIONS[name], args_schema=schema,
        response_format=fmt,  # type: ignore[arg-type]
        handle_tool_error=True, handle_validation_error=invalid(name))
        for name, fn, schema, fmt in specs]


__all__ = ["HivemindRetriever", "documents", "memory_tools"]
