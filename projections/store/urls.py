"""Store URLs as messages and logs may show them: never with a password. Every message that
names a store URL goes through ``redact_url`` (and an error text that may quote one, ``scrub``)."""

from __future__ import annotations

import re
from urllib.parse import unquote

_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^@/]*@)")

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
"""URL schemes that name a Redis Cluster (the second one with TLS; ``store.cluster``)."""


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (here, not in ``store.cluster``, so settings and
    ``connect`` can tell without loading the cluster code)."""
    return url.startswith(CLUSTER_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` without its password (``redis://user:***@host``), for logs and errors."""
    m = _USERINFO.match(url)
    if m is None:
        return url
    user, sep, _password = m.group("userinfo")[:-1].partition(":")
    shown = f"{user}:***@" if sep else "***@"  # no colon: redis-py may read it as a password
    return m.group("scheme") + shown + url[m.end():]


def scrub(text: str, url: str) -> str:
    """An error text with any credential of ``url`` replaced by ``***``."""
    m = _USERINFO.match(url)
    if m is None:
        return text
    user, sep, password = m.group("userinfo")[:-1].partition(":")
    secrets = {password, unquote(password)} if sep else {user, unquote(user)}
    text = text.replace(url, redact_url(url))
    for secret in sorted(secrets - {""}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
