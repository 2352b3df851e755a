"""The TypeScript client (``api_stub/ts``): its types are the ones ``/openapi.json`` generates
(``src/openapi.ts`` is checked against a running server's document), it compiles strictly, and
its Node tests (``node --test``) pass against a real ``hivemind serve`` they start."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path

from tests.support import HIVEMIND
from tests.support.frontdoor import start_live
from tests.support.node import ROOT, bin_of, ts_package

UPDATE = "UPDATE_OPENAPI_TS"
"""Set to 1 to rewrite ``src/openapi.ts`` from the server's document instead of failing."""


def test_the_types_are_generated_from_the_servers_openapi(tmp_path: Path) -> None:
    live = start_live(f"memory://{tmp_path / 'store'}")
    try:
        with urllib.request.urlopen(live.base + "/openapi.json", timeout=30) as resp:
            (tmp_path / "openapi.json").write_bytes(resp.read())
    finally:
        live.stop()
    out = tmp_path / "openapi.ts"
    subprocess.run([str(bin_of("openapi-typescript")), str(tmp_path / "openapi.json"),
                    "--default-non-nullable", "false", "--empty-objects-unknown", "-o", str(out)],
                   cwd=ts_package(), check=True, capture_output=True, timeout=120)
    committed = ts_package() / "src" / "openapi.ts"
    if os.environ.get(UPDATE) == "1":
        committed.write_text(out.read_text())
    assert out.read_text() == committed.read_text(), (
        f"api_stub/ts/src/openapi.ts is not what /openapi.json generates: run "
        f"{UPDATE}=1 .venv/bin/python -m pytest {Path(__file__).relative_to(ROOT)}")


def test_the_node_tests_pass_against_a_real_serve() -> None:
    got = subprocess.run(["npm", "test"], cwd=ts_package(), capture_output=True, text=True,
                         timeout=300, check=False,
                         env={**os.environ, "HIVEMIND": " ".join(HIVEMIND)})
    assert got.returncode == 0, got.stdout[-4000:] + got.stderr[-2000:]
    assert "# fail 0" in got.stdout and "# pass 0" not in got.stdout, got.stdout[-2000:]
