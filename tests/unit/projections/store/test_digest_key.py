"""The ``redacted`` digest of erased content gives nothing back without the store's secret:
a 6-digit door code cannot be found by guessing from the digest alone, and the secret is made
once per store, the same for every erasure (and kept by a ``memory://PATH`` store)."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import fakeredis
import msgspec

from hivemind_memory.events.schema import content_digest
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import close_embedded, connect
from hivemind_memory.projections.store.eventdigest import DIGEST_KEY_BYTES, digest_key


def test_a_six_digit_code_cannot_be_guessed_from_the_digest() -> None:
    r = fakeredis.FakeRedis()
    key = digest_key(r)
    secret_text = "the door code is 482913"
    digest = content_digest(secret_text, None, key)
    scheme, _, hexdigest = digest.partition(":")
    assert scheme == "hmac-sha256"
    # guessing all 10**6 codes the way the old, unkeyed digest allowed finds nothing
    found = [c for c in range(10**6) if hashlib.sha256(
        msgspec.json.encode([f"the door code is {c:06d}", None])).hexdigest() == hexdigest]
    assert found == []
    # with the key, the same guess finds it: the digest is of that content, keyed
    guess = hmac.new(key, msgspec.json.encode([secret_text, None]), hashlib.sha256)
    assert guess.hexdigest() == hexdigest
    assert content_digest(secret_text, None, b"another store's key") != digest


def test_the_secret_is_made_once_and_kept(tmp_path: Path) -> None:
    r = fakeredis.FakeRedis()
    first = digest_key(r)
    assert len(first) == DIGEST_KEY_BYTES and digest_key(r) == first
    assert digest_key(fakeredis.FakeRedis()) != first  # another store, another secret
    url = f"memory://{tmp_path / 'store'}"
    made = digest_key(connect(url))
    close_embedded(url)
    again = connect(url)
    try:
        assert again.xlen(keys.DIGEST_KEY) == 1 and digest_key(again) == made
    finally:
        close_embedded(url)
