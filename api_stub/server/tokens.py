"""Bearer tokens that bind identity: who the caller is (agent), where (namespaces), what (rights).

A TOML file of ``[[token]]`` entries::

    [[token]]
    secret_sha256 = "9f86d0...15d6"      # hex SHA-256 of the secret (or: secret = "...")
    ns = ["team-a"]                      # namespaces, "*" = all
    agent = "alice"                      # every event and query of this token is alice's
    rights = ["write", "query"]          # any of write, query, admin, metrics

The secret itself never needs to be in the file (``secret_sha256``); a plain ``secret`` is
accepted for local use. Look-up hashes the presented secret and compares digests in constant
time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hivemind_memory.events.errors import ConfigError
from hivemind_memory.events.schema import ID_PATTERN, NS_PATTERN

Right = Literal["write", "query", "admin", "metrics"]
RIGHTS: tuple[Right, ...] = ("write", "query", "admin", "metrics")
"""``metrics``: may read ``/metrics`` (every namespace's counts, no note), whatever ``ns``
says; nothing else. ``admin`` in every namespace (``ns = ["*"]``) may too."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token may do, and as whom."""

    agent: str
    namespaces: frozenset[str]
    rights: frozenset[str]

    def may(self, ns: str, right: Right) -> bool:
        """True if the token may use ``right`` on namespace ``ns``."""
        return right in self.rights and ("*" in self.namespaces or ns in self.namespaces)


@dataclass(frozen=True, slots=True)
class TokenTable:
    """Every token of a tokens file, by the SHA-256 of its secret."""

    by_digest: dict[str, Grant]

    def lookup(self, secret: str) -> Grant | None:
        """The grant of ``secret`` (None if unknown)."""
        digest = hashlib.sha256(secret.encode()).hexdigest()
        found: Grant | None = None
        for known, grant in self.by_digest.items():  # constant time over the table
            if hmac.compare_digest(known, digest):
                found = grant
        return found

    @classmethod
    def from_entries(cls, entries: Iterable[dict[str, object]],
                     where: str = "tokens") -> TokenTable:
        """Validate ``[[token]]`` entries; ``ConfigError`` names the entry and the key."""
        table: dict[str, Grant] = {}
        for i, e in enumerate(entries, start=1):
            at = f"{where}: token #{i}"
            unknown = set(e) - {"secret", "secret_sha256", "ns", "agent", "rights"}
            if unknown:
                raise ConfigError(f"{at}: unknown key(s) {sorted(unknown)}")
            secret, digest = e.get("secret"), e.get("secret_sha256")
            if (secret is None) == (digest is None):
                raise ConfigError(f"{at}: give exactly one of secret, secret_sha256")
            if secret is not None:
                if not isinstance(secret, str) or len(secret) < 16:
                    raise ConfigError(f"{at}: secret must be a string of at least 16 characters")
                digest = hashlib.sha256(secret.encode()).hexdigest()
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest.lower()):
                raise ConfigError(f"{at}: secret_sha256 must be 64 hex digits")
            agent = e.get("agent")
            if not isinstance(agent, str) or not re.match(ID_PATTERN, agent):
                raise ConfigError(f"{at}: agent must match {ID_PATTERN}")
            nss = e.get("ns")
            if (not isinstance(nss, list) or not nss
                    or not all(isinstance(n, str) and (n == "*" or re.match(NS_PATTERN, n))
                               for n in nss)):
                raise ConfigError(f'{at}: ns must be a non-empty list of namespaces or "*"')
            rights = e.get("rights")
            if (not isinstance(rights, list) or not rights
                    or not all(r in RIGHTS for r in rights)):
                raise ConfigError(f"{at}: rights must be a non-empty list of {list(RIGHTS)}")
            if digest.lower() in table:
                raise ConfigError(f"{at}: the same secret appears twice")
            table[digest.lower()] = Grant(agent, frozenset(nss), frozenset(rights))
        return cls(table)


def bearer_secret(authorization: str | None) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header value (None without one)."""
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[7:].strip()


def load_tokens(path: str | Path) -> TokenTable:
    """Read a tokens file (``ConfigError`` if missing, malformed or empty)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"tokens file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"tokens file {path}: {exc}") from exc
    unknown = set(data) - {"token"}
    if unknown:
        raise ConfigError(f"tokens file {path}: unknown table(s) {sorted(unknown)}")
    entries = data.get("token")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"tokens file {path}: no [[token]] entries")
    return TokenTable.from_entries(entries, where=f"tokens file {path}")


OPEN_GRANT = Grant(agent="", namespaces=frozenset({"*"}), rights=frozenset(RIGHTS))
"""The identity of every caller of a loopback server started without ``--tokens``: all rights;
the agent is then whatever the request names (a trusted, single-user setup)."""
