"""The MCP tools from the SDK's own client: in process, over stdio (the README's config), and
over streamable HTTP at ``/mcp`` of ``serve`` (token auth)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.api_stub.server.mcp import build_server, fixed_resolver
from hivemind_memory.api_stub.server.tokens import TokenTable
from tests.support import HIVEMIND
from tests.support.docs import README, fenced, section
from tests.support.frontdoor import OPS, start_live


def _readme_mcp_config() -> dict[str, Any]:
    blocks = fenced(section(README, "Quick start"), "json")
    cfg: dict[str, Any] = json.loads(blocks[0])["mcpServers"]
    return cfg


def _readme_tokens() -> TokenTable:
    """The README's tokens file, plus an operator token to read back what the tools wrote."""
    import tomllib

    (block,) = fenced(section(README, "Quick start"), "toml")
    entries = tomllib.loads(block)["token"]
    ops = {"secret": OPS, "ns": ["*"], "agent": "ops", "rights": ["admin", "query"]}
    return TokenTable.from_entries([*entries, ops])


def _text(res: Any) -> str:
    return "".join(c.text for c in res.content if getattr(c, "type", "") == "text")


async def _exercise(client: Client) -> None:
    """remember / recall / used / forget as an agent would call them."""
    tools = await client.list_tools()
    names = {t.name for t in tools.tools}
    assert names == {"remember", "recall", "used", "forget", "revise"}
    remember = next(t for t in tools.tools if t.name == "remember")
    assert {"text", "kind", "scope", "note_id", "supersedes", "duplicates"} <= \
        set(remember.input_schema["properties"])
    _check_tools_read_well(tools.tools)

    r1 = await client.call_tool("remember", {"text": "Deploys happen on Tuesdays after lunch"})
    assert not r1.is_error, _text(r1)
    nid = r1.structured_content["result"] if isinstance(r1.structured_content, dict) \
        else _text(r1)
    r2 = await client.call_tool("remember", {"text": "Scratch: try deploys with canary",
                                             "kind": "scratch", "note_id": "canary-idea@@alice"})
    assert not r2.is_error and "canary-idea@@alice" in _text(r2)

    got = await client.call_tool("recall", {"query": "when do deploys happen", "budget": 200})
    assert not got.is_error, _text(got)
    out = got.structured_content
    assert isinstance(out, dict)
    ids = [n["note_id"] for n in out["notes"]]
    assert nid in ids and "canary-idea@@alice" in ids
    assert "Deploys happen on Tuesdays after lunch" in out["context"]
    # each note of the context under its header: the id `used` takes, and the day
    [mine] = [n for n in out["notes"] if n["note_id"] == nid]
    assert f"[{nid} | {mine['created_at'][:10]}]\nDeploys happen" in out["context"]
    assert mine["tier"] == "short" and mine["created_at"].endswith("Z")
    assert out["used_tokens"] <= out["budget"] == 200
    assert all(0 < n["score"] <= 1 for n in out["notes"])

    u = await client.call_tool("used", {"note_ids": [nid]})
    assert not u.is_error and "1" in _text(u)

    # a near-duplicate is told, with the id to revise instead; a revision keeps the id
    twin_text = await client.call_tool("remember", {
        "text": "Deploys happen on Tuesdays after lunch, UTC", "note_id": "deploy-twin@@alice"})
    assert not twin_text.is_error
    assert _text(twin_text).startswith("deploy-twin@@alice; existing notes say nearly the same: "
                                       f"{nid} (overlap 0.80)"), _text(twin_text)
    # the very same words (case and spacing aside) are not stored again: the answer names it
    same = await client.call_tool("remember", {"text": " deploys happen on  TUESDAYS after lunch"})
    assert not same.is_error
    assert _text(same) == f"{nid}; not stored again: you already wrote this very text as {nid}"
    rv = await client.call_tool("revise", {"note_id": nid,
                                           "text": "Deploys happen on Wednesdays after lunch"})
    assert not rv.is_error and _text(rv) == f"revised {nid}"
    after = await client.call_tool("recall", {"query": "when do deploys happen", "budget": 200})
    assert "Deploys happen on Wednesdays after lunch" in after.structured_content["context"]
    assert "Deploys happen on Tuesdays after lunch\n" not in after.structured_content["context"]
    f0 = await client.call_tool("forget", {"note_id": "deploy-twin@@alice"})
    assert not f0.is_error
    nobody = await client.call_tool("revise", {"note_id": "no-such-note", "text": "x"})
    assert nobody.is_error and "no note 'no-such-note'" in _text(nobody)
    f = await client.call_tool("forget", {"note_id": "canary-idea@@alice"})
    assert not f.is_error
    again = await client.call_tool("recall", {"query": "deploys canary", "budget": 200})
    assert [n["note_id"] for n in again.structured_content["notes"]] == [nid]

    # errors in the tool's own terms: the argument, what it must be; no other layer's words
    for tool, args, says in (
            ("remember", {"text": "x", "note_id": "bad id with spaces"},
             "remember: note_id 'bad id with spaces' is not a valid note id: a note id is 1 to "
             "128 characters of A-Z a-z 0-9 _ . : @ -, starting with a letter or digit"),
            ("remember", {"text": ""}, "remember: text must not be empty"),
            ("remember", {"text": "x", "kind": "big"},
             "remember: kind must be one of 'note' or 'scratch', got 'big'"),
            ("recall", {"query": "x", "budget": 0}, "recall: budget must be 1 to 1000000, got 0"),
            ("used", {"note_ids": []}, "used: note_ids must hold 1 to 1000 items")):
        bad = await client.call_tool(tool, args)
        assert bad.is_error and _text(bad) == says
    big = await client.call_tool("remember", {"text": "é" * 40_000})  # 80,000 bytes
    assert big.is_error and _text(big) == \
        "text is 80000 bytes of UTF-8, at most 65536 allowed"

    # writes that would never apply are errors, told before the tool returns
    twin = await client.call_tool("remember", {"text": "again", "note_id": "canary-idea@@alice"})
    assert twin.is_error and _text(twin) == (
        "note 'canary-idea@@alice' already exists in namespace 'team-a' (ids are never reused, "
        "even after forgetting); nothing was recorded")
    ghost = await client.call_tool("used", {"note_ids": [nid, "no-such-note"]})
    assert ghost.is_error and "no-such-note" in _text(ghost)
    gone = await client.call_tool("forget", {"note_id": "canary-idea@@alice"})  # forgotten already
    assert gone.is_error and "no note 'canary-idea@@alice'" in _text(gone)


def _check_tools_read_well(tools: list[Any]) -> None:
    """Every tool and every parameter is described in clean prose (no docstring indentation),
    with its bounds in the schema."""
    for t in tools:
        assert t.description and "\n" not in t.description and "  " not in t.description, t.name
        for name, prop in t.input_schema["properties"].items():
            desc = prop.get("description", "")
            assert len(desc) > 20 and "\n" not in desc, (t.name, name)
    props = {t.name: t.input_schema["properties"] for t in tools}
    budget = props["recall"]["budget"]
    assert (budget["minimum"], budget["maximum"], budget["default"]) == (1, 1_000_000, 1000)
    assert "tokens" in budget["description"]
    assert props["recall"]["query"]["maxLength"] == 16_384
    assert props["remember"]["text"]["minLength"] == 1
    assert props["remember"]["text"]["maxLength"] == 65_536
    assert props["forget"]["note_id"]["maxLength"] == 128
    assert props["used"]["note_ids"]["minItems"] == 1
    assert props["used"]["note_ids"]["items"]["pattern"].startswith("^[A-Za-z0-9]")


def _run(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.run(fn)


def test_tools_in_process(tmp_path: Path) -> None:
    mem = Memory(f"memory://{tmp_path / 'store'}", ns="team-a", agent="alice")
    server = build_server(fixed_resolver(mem))

    async def main() -> None:
        async with Client(server) as client:
            await _exercise(client)

    try:
        _run(main)
    finally:
        mem.close()


def test_tools_over_stdio_as_the_readme_configures_them(tmp_path: Path) -> None:
    cfg = _readme_mcp_config()["hivemind"]
    assert cfg["command"] == "hivemind"
    params = StdioServerParameters(command=HIVEMIND[0], args=[*HIVEMIND[1:], *cfg["args"]],
                                   cwd=str(tmp_path))

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            await _exercise(client)

    _run(main)
    assert (tmp_path / "hivemind-alice" / "streams.log").stat().st_size > 0


def test_tools_over_http_with_the_readme_token(tmp_path: Path) -> None:
    cfg = _readme_mcp_config()["hivemind-http"]
    live = start_live(f"memory://{tmp_path / 'store'}", tokens=_readme_tokens())
    url = cfg["url"].replace("http://localhost:8080", live.base)
    try:
        async def main() -> None:
            http = create_mcp_http_client(headers=cfg["headers"])
            async with http, Client(streamable_http_client(url, http_client=http),
                                    read_timeout_seconds=60) as client:
                await _exercise(client)

        _run(main)

        # what the tools wrote carries the token's agent
        from tests.support.frontdoor import call

        st, rows = call(live.base, "GET", "/v1/ns/team-a/notes",
                        token=OPS)
        assert st == 200 and rows and {r["agent"] for r in rows} == {"alice"}

        # no token, or an unknown one: refused before MCP
        for headers in ({}, {"Authorization": "Bearer not-a-token-at-all"}):
            resp = httpx.post(url, headers={**headers, "Accept": "application/json"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert resp.status_code == 401

        # a namespace the token does not have: the tool call fails, naming why
        async def wrong_ns() -> None:
            headers = {**cfg["headers"], "X-Hivemind-Ns": "team-b"}
            http = create_mcp_http_client(headers=headers)
            async with http, Client(streamable_http_client(url, http_client=http),
                                    read_timeout_seconds=60) as client:
                res = await client.call_tool("recall", {"query": "deploys"})
                assert res.is_error and "team-b" in _text(res)

        _run(wrong_ns)
    finally:
        live.stop()


@pytest.mark.parametrize("agent", ["", "bad agent"])
def test_mcp_command_needs_a_valid_agent(agent: str, tmp_path: Path) -> None:
    import subprocess

    got = subprocess.run([*HIVEMIND, "mcp", "--ns", "team-a", "--agent", agent,
                          "--redis-url", "memory://"], capture_output=True, text=True,
                         timeout=60, check=False, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert got.returncode == 2 and "agent" in got.stderr, (got.returncode, got.stderr)


def test_http_without_tokens_takes_the_agent_from_a_header(tmp_path: Path) -> None:
    """``serve`` without tokens (loopback, one trusted user): X-Hivemind-Agent names the
    agent, X-Hivemind-Ns the namespace."""
    live = start_live(f"memory://{tmp_path / 'open'}", tokens=None)
    try:
        async def main() -> None:
            for headers, ok in (({"X-Hivemind-Ns": "team-a"}, False),
                                ({"X-Hivemind-Ns": "team-a", "X-Hivemind-Agent": "al"}, True)):
                http = create_mcp_http_client(headers=headers)
                async with http, Client(streamable_http_client(live.base + "/mcp",
                                                               http_client=http),
                                        read_timeout_seconds=60) as client:
                    res = await client.call_tool("remember", {"text": "open mode note"})
                    assert res.is_error is not ok, _text(res)

        _run(main)
        from tests.support.frontdoor import call

        st, rows = call(live.base, "GET", "/v1/ns/team-a/notes")
        assert st == 200 and [r["agent"] for r in rows] == ["al"]
    finally:
        live.stop()


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside the task groups the client's transport raises through."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@pytest.mark.parametrize(("headers", "says"), [
    ({}, "missing token"),
    ({"Authorization": "Bearer not-a-token-at-all"}, "unknown token"),
    ({"Authorization": "Basic YWxpY2U6c2VjcmV0"}, "missing token"),
])
def test_a_refused_token_reaches_the_mcp_client_as_its_message(
        tmp_path: Path, headers: dict[str, str], says: str) -> None:
    """The official client over streamable HTTP: the gate's 401 carries a JSON-RPC error, so
    the client raises ``MCPError`` with the reason, not "Server returned an error response"."""
    from mcp import MCPError

    live = start_live(f"memory://{tmp_path / 'store'}")
    caught: list[BaseException] = []
    try:
        async def main() -> None:
            http = create_mcp_http_client(headers={**headers, "X-Hivemind-Ns": "team-a"})
            try:
                async with http, Client(streamable_http_client(live.base + "/mcp",
                                                               http_client=http),
                                        read_timeout_seconds=30) as client:
                    await client.list_tools()
            except Exception as exc:  # the client wraps it in its task groups
                caught.append(_leaf(exc))

        _run(main)
        raw = httpx.post(live.base + "/mcp", headers={**headers, "Accept": "application/json"},
                         json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert raw.status_code == 401 and raw.json()["error"]["message"].startswith(says)
        challenge = raw.headers["WWW-Authenticate"]
        assert challenge.startswith('Bearer realm="hivemind"')
        assert ('error="invalid_token"' in challenge) == ("Authorization" in headers)
    finally:
        live.stop()
    [err] = caught
    assert isinstance(err, MCPError), repr(err)
    assert says in str(err) and "Server returned an error response" not in str(err)
    assert err.error.data == {"status": 401, "code": "unauthorized"}


def test_the_inspector_cli_lists_and_calls_the_tools_with_a_bearer_token(tmp_path: Path) -> None:
    """The official MCP Inspector's CLI (pinned 2.12.0 in api_stub/ts's lock: 0.15 cannot send
    a bearer token) against ``serve``'s /mcp: the tools and their described parameters, a
    call, and an error in the tool's words."""
    import subprocess

    from tests.support.node import bin_of

    inspector = bin_of("mcp-inspector")
    live = start_live(f"memory://{tmp_path / 'store'}", tokens=_readme_tokens())
    cfg = _readme_mcp_config()["hivemind-http"]

    def cli(*args: str) -> tuple[int, Any]:
        got = subprocess.run(
            [str(inspector), "--cli", cfg["url"].replace("http://localhost:8080", live.base),
             "--transport", "http",
             *[a for k, v in cfg["headers"].items() for a in ("--header", f"{k}: {v}")], *args],
            capture_output=True, text=True, timeout=120, check=False)
        out = got.stdout
        return got.returncode, json.loads(out[:out.rindex("}") + 1]) if "{" in out else out

    try:
        rc, listed = cli("--method", "tools/list")
        assert rc == 0, listed
        tools = {t["name"]: t for t in listed["tools"]}
        assert set(tools) == {"remember", "recall", "used", "forget", "revise"}
        budget = tools["recall"]["inputSchema"]["properties"]["budget"]
        assert budget["minimum"] == 1 and "tokens" in budget["description"]
        rc, made = cli("--method", "tools/call", "--tool-name", "remember",
                       "--tool-arg", "text=Deploys happen on Tuesdays")
        assert rc == 0 and not made.get("isError"), made
        rc, bad = cli("--method", "tools/call", "--tool-name", "recall",
                      "--tool-arg", "query=deploys", "--tool-arg", "budget=0")
        assert bad["isError"] is True
        assert bad["content"][0]["text"] == "recall: budget must be 1 to 1000000, got 0"
    finally:
        live.stop()
