"""Async all the way and metadata filters in the three adapters: each takes an
``AsyncMemory`` (LangChain's async retriever and tools, LangGraph's async store, LlamaIndex's
async retriever and memory block) and applies a filter on the server, before the budget is
spent; LangGraph's ``index=`` is refused with a clear error."""

from __future__ import annotations

import uuid

import pytest

from tests.adapters.conftest import framework

framework("langchain_core")
framework("langgraph")
framework("llama_index.core")

from hivemind_memory import AsyncMemory, Memory  # noqa: E402
from hivemind_memory.integrations import langchain as lc  # noqa: E402
from hivemind_memory.integrations import llamaindex as li  # noqa: E402
from hivemind_memory.integrations.langgraph import HivemindStore  # noqa: E402


def _tag() -> str:
    return uuid.uuid4().hex[:8]


async def test_langchain_retriever_and_tools_over_an_async_memory(memory: Memory) -> None:
    amem = AsyncMemory.of(memory)
    tag = _tag()
    tools = {t.name: t for t in lc.memory_tools(amem)}
    said = await tools["remember"].ainvoke({
        "text": f"the {tag} canary deploy runs at noon", "metadata": {"batch": tag, "n": 1},
        "duplicates": "ignore"})
    assert said.startswith("n-")
    await tools["remember"].ainvoke({"text": f"the {tag} canary deploy runs at dusk",
                                     "metadata": {"batch": tag, "n": 2},
                                     "duplicates": "ignore"})
    r = lc.HivemindRetriever(memory=amem, budget=500, filter={"batch": tag})
    docs = await r.ainvoke(f"{tag} canary deploy")
    assert sorted(d.metadata["n"] for d in docs) == [1, 2]
    assert sorted(d.metadata["n"] for d in r.invoke(f"{tag} canary deploy")) == [1, 2]
    one = await r.ainvoke(f"{tag} canary deploy", filter={"batch": tag, "n": {"$gt": 1}})
    assert [d.metadata["n"] for d in one] == [2]
    content = await tools["recall"].ainvoke({"query": f"{tag} canary", "budget": 300,
                                             "filter": {"n": 1, "batch": tag}})
    assert "noon" in content and "dusk" not in content


async def test_langgraph_filters_on_the_server_before_the_budget(memory: Memory) -> None:
    store = HivemindStore(AsyncMemory.of(memory), root=f"t{_tag()}", search_budget=60)
    for i in range(8):  # long, strongly matching items of another colour fill the budget
        await store.aput(("docs",), f"red{i}", {"colour": "red", "text": "rocket launch " * 6})
    await store.aput(("docs",), "blue", {"colour": "blue", "text": "a rocket launch", "n": 3})
    got = await store.asearch(("docs",), query="rocket launch", filter={"colour": "blue"})
    assert [i.key for i in got] == ["blue"]
    assert [i.key for i in await store.asearch(("docs",), query="rocket launch",
                                               filter={"n": {"$gte": 3}})] == ["blue"]
    assert await store.asearch(("docs",), query="rocket launch",
                               filter={"n": {"$gt": 3}}) == []
    # a nested filter the server cannot express still applies to what comes back
    nested = HivemindStore(AsyncMemory.of(memory), root=f"t{_tag()}")
    await nested.aput(("docs",), "deep", {"meta": {"colour": "blue"}, "text": "rocket"})
    await nested.aput(("docs",), "flat", {"meta": {"colour": "red"}, "text": "rocket"})
    assert [i.key for i in await nested.asearch(("docs",), query="rocket",
                                                filter={"meta": {"colour": "blue"}})] == ["deep"]
    await store.aput(("docs",), "blue", {"colour": "green", "text": "a rocket launch"})
    assert await store.asearch(("docs",), query="rocket launch",
                               filter={"colour": "blue"}) == []  # revised metadata


def test_langgraph_refuses_index(memory: Memory) -> None:
    with pytest.raises(ValueError, match="does not take index="):
        HivemindStore(memory, index={"dims": 3, "embed": lambda xs: [[0.0] * 3 for _ in xs]})


async def test_llamaindex_retriever_and_block_over_an_async_memory(memory: Memory) -> None:
    from llama_index.core.base.llms.types import ChatMessage

    amem = AsyncMemory.of(memory)
    tag = _tag()
    await amem.remember(f"{tag} backups run hourly", metadata={"tag": tag},
                        duplicates="ignore")
    await amem.remember(f"{tag} backups run daily", duplicates="ignore")
    r = li.HivemindRetriever(amem, budget=300, filter={"tag": tag})
    got = await r.aretrieve(f"{tag} backups")
    assert [n.node.metadata["tag"] for n in got] == [tag]
    assert [n.node.text for n in r.retrieve(f"{tag} backups")] == [f"{tag} backups run hourly"]
    block = li.HivemindMemoryBlock(name="team", memory=amem, budget=300)
    await block._aput([ChatMessage(role="user", content=f"{tag} restores take an hour")])
    ctx = await block._aget([ChatMessage(role="user", content=f"{tag} restores")])
    assert f"{tag} restores take an hour" in ctx


