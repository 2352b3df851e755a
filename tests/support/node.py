"""Node for the tests that run it: the TypeScript client's package (``api_stub/ts``) with its
locked dependencies installed (``npm ci`` from the committed ``package-lock.json``). Without
node or npm a test skips on a laptop and fails under ``CI=true``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import IN_CI

ROOT = Path(__file__).resolve().parents[2]
TS = ROOT / "api_stub" / "ts"
"""The TypeScript client's npm package."""


def ts_package() -> Path:
    """``api_stub/ts`` with ``node_modules`` installed (``.ci/run`` installs them first; a
    checkout that has none gets ``npm ci``)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        what = " and ".join(missing)
        if IN_CI:
            pytest.fail(f"{what} not found (CI=true: the TypeScript tests must run)")
        pytest.skip(f"{what} not found")
    lock = TS / "node_modules" / ".package-lock.json"
    if not lock.exists() or lock.stat().st_mtime < (TS / "package-lock.json").stat().st_mtime:
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=TS, check=True,
                       capture_output=True, timeout=600)
    return TS


def bin_of(name: str) -> Path:
    """An installed npm package's command (``node_modules/.bin/NAME``)."""
    return ts_package() / "node_modules" / ".bin" / name
