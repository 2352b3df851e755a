"""Tokens files: what they grant, and errors that name the entry and the key."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hivemind_memory.api_stub.server.tokens import OPEN_GRANT, TokenTable, load_tokens
from hivemind_memory.events.errors import ConfigError

SECRET = "a-long-enough-secret-1"


def test_sha256_entries_and_grants(tmp_path: Path) -> None:
    f = tmp_path / "tokens.toml"
    f.write_text(f"""
[[token]]
secret_sha256 = "{hashlib.sha256(SECRET.encode()).hexdigest().upper()}"
ns = ["team-a", "team-b"]
agent = "alice"
rights = ["query"]

[[token]]
secret = "another-secret-000002"
ns = ["*"]
agent = "ops"
rights = ["admin", "write"]
""")
    t = load_tokens(f)
    g = t.lookup(SECRET)
    assert g is not None and g.agent == "alice"
    assert g.may("team-a", "query") and g.may("team-b", "query")
    assert not g.may("team-c", "query") and not g.may("team-a", "write")
    ops = t.lookup("another-secret-000002")
    assert ops is not None and ops.may("anything", "admin") and not ops.may("x", "query")
    assert t.lookup("another-secret-00000") is None and t.lookup("") is None
    assert OPEN_GRANT.may("x", "admin") and OPEN_GRANT.agent == ""


@pytest.mark.parametrize(("body", "message"), [
    ('[[token]]\nsecret = "short"\nns = ["a"]\nagent = "x"\nrights = ["query"]',
     "at least 16"),
    (f'[[token]]\nsecret = "{SECRET}"\nsecret_sha256 = "{"0" * 64}"\nns = ["a"]\n'
     'agent = "x"\nrights = ["query"]', "exactly one of"),
    ('[[token]]\nsecret_sha256 = "xyz"\nns = ["a"]\nagent = "x"\nrights = ["query"]',
     "64 hex"),
    (f'[[token]]\nsecret = "{SECRET}"\nns = []\nagent = "x"\nrights = ["query"]', "ns must"),
    (f'[[token]]\nsecret = "{SECRET}"\nns = ["Bad NS"]\nagent = "x"\nrights = ["query"]',
     "ns must"),
    (f'[[token]]\nsecret = "{SECRET}"\nns = ["a"]\nagent = "bad agent"\nrights = ["query"]',
     "agent must"),
    (f'[[token]]\nsecret = "{SECRET}"\nns = ["a"]\nagent = "x"\nrights = ["read"]',
     "rights must"),
    (f'[[token]]\nsecret = "{SECRET}"\nns = ["a"]\nagent = "x"\nrights = ["query"]\n'
     'scope = "y"', "unknown key"),
    (f'[[token]]\nsecret = "{SECRET}"\nns = ["a"]\nagent = "x"\nrights = ["query"]\n'
     f'[[token]]\nsecret = "{SECRET}"\nns = ["b"]\nagent = "y"\nrights = ["query"]',
     "token #2: the same secret"),
    ("", r"no \[\[token\]\] entries"),
    ("[[token]\n", "tokens file"),
    ('[server]\nport = 1', "unknown table"),
])
def test_bad_files_name_entry_and_key(tmp_path: Path, body: str, message: str) -> None:
    f = tmp_path / "tokens.toml"
    f.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_tokens(f)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_tokens(tmp_path / "nope.toml")


def test_table_is_searchable_in_any_order() -> None:
    t = TokenTable.from_entries([
        {"secret": f"secret-number-{i:06d}", "ns": ["a"], "agent": f"agent{i}",
         "rights": ["query"]} for i in range(50)])
    for i in (0, 17, 49):
        g = t.lookup(f"secret-number-{i:06d}")
        assert g is not None and g.agent == f"agent{i}"
