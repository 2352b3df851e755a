"""Fixtures of the system tests: a server on a real socket over a fresh embedded store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.frontdoor import Live, start_live


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """``serve`` in this process (the test tokens), on ``memory://`` under ``tmp_path``."""
    srv = start_live(f"memory://{tmp_path / 'store'}", max_body=64 * 1024)
    yield srv
    srv.stop()
