"""The LlamaIndex adapter over a real ``serve`` and the embedded store: the retriever (nodes
with the note id, score, date and tier, within a token budget) and the memory block inside
LlamaIndex's own chat ``Memory`` (messages leaving the short-term memory become notes; the
latest messages recall them)."""

from __future__ import annotations

from tests.adapters.conftest import framework

framework("llama_index.core")  # the [llamaindex] extra

from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.memory import Memory as ChatMemory  # noqa: E402

from hivemind_memory import Memory  # noqa: E402
from hivemind_memory.integrations.llamaindex import (  # noqa: E402
    HivemindMemoryBlock,
    HivemindRetriever,
    _chunks,
)


def test_the_retriever_answers_scored_nodes_within_the_budget(memory: Memory) -> None:
    r = HivemindRetriever(memory, budget=500)
    got = r.retrieve("when do deploys happen")
    by_id = {n.node.node_id: n for n in got}
    assert "deploys@@alice" in by_id and "staging-db@@alice" not in by_id
    n = by_id["deploys@@alice"]
    assert n.node.get_content() == "Deploys happen on Tuesdays after 14:00 UTC."
    assert n.score is not None and 0 < n.score <= 1
    assert n.node.metadata["created_at"].endswith("Z") and n.node.metadata["tier"] == "short"
    tight = HivemindRetriever(memory, budget=20).retrieve("deploys")
    assert 1 <= len(tight) < len(r.retrieve("deploys"))
    assert sum(x.node.metadata["tokens"] for x in tight) <= 20


async def test_the_retriever_async(memory: Memory) -> None:
    r = HivemindRetriever(memory, budget=100)
    assert [n.node.node_id for n in await r.aretrieve("deploys")] == [
        n.node.node_id for n in r.retrieve("deploys")]


async def test_the_memory_block_in_a_chat_memory(memory: Memory) -> None:
    block = HivemindMemoryBlock(name="team_memory", memory=memory, budget=300)
    chat = ChatMemory.from_defaults(
        session_id="s1", token_limit=60, chat_history_token_ratio=0.5, token_flush_size=20,
        memory_blocks=[block], tokenizer_fn=lambda s: s.split())
    try:
        await _converse(chat, memory)
    finally:  # the chat memory's own store (SQLite in memory) is closed
        engine = chat.sql_store._async_engine
        if engine is not None:
            await engine.dispose()


async def _converse(chat: ChatMemory, memory: Memory) -> None:
    # recall: what the team wrote down, for the latest messages, in the system message
    await chat.aput(ChatMessage(role="user", content="how do I roll back a deploy?"))
    got = await chat.aget()
    system = got[0]
    assert system.role.value == "system" and "<team_memory>" in str(system.content)
    assert "[deploy-rollback@@alice | " in str(system.content)
    # messages pushed out of the short-term memory are kept as notes, then recalled
    for i in range(6):
        await chat.aput(ChatMessage(role="assistant" if i % 2 else "user",
                                    content=f"turn {i}: the zebra migration runs on cobalt "
                                            "hosts in batches of ten"))
    await chat.aget()  # a get flushes what is over the limit into the blocks
    kept = memory.recall("zebra migration cobalt", budget=500)
    assert kept.notes and "zebra migration" in kept.notes[0].text
    assert kept.notes[0].text.startswith(("user: ", "assistant: "))  # one note per flush


def test_a_long_flush_is_cut_between_characters() -> None:
    text = "é" * 40_000  # 80,000 bytes
    parts = _chunks(text, 30_001)
    assert "".join(parts) == text and all(len(p.encode()) <= 30_001 for p in parts)
