"""Schemathesis, driven by the server's own ``/openapi.json``, over a real socket: valid and
invalid inputs for every operation; no answer is a 500, every 2xx/4xx body matches the
document. ``HIVEMIND_FUZZ_EXAMPLES`` raises the examples per operation and mode (default 25)."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.support.frontdoor import OPS, Live, start_live

EXAMPLES = int(os.environ.get("HIVEMIND_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    srv = start_live(f"memory://{tmp_path_factory.mktemp('fuzz') / 'store'}")
    yield srv
    srv.stop()


def _schema(live: Live) -> Any:
    with urllib.request.urlopen(live.base + "/openapi.json", timeout=30) as resp:
        doc = json.loads(resp.read())
    schema = schemathesis.openapi.from_dict(doc)
    return schema


def _operations(live: Live) -> list[Any]:
    return [r.ok() for r in _schema(live).get_all_operations()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_operation_answers_500(live: Live, mode: GenerationMode, tmp_path: Path) -> None:
    ops = _operations(live)
    assert {op.label for op in ops} >= {
        "POST /v1/ns/{ns}/events", "POST /v1/ns/{ns}/query", "POST /v1/ns/{ns}/queries",
        "GET /v1/ns/{ns}/results/{query_id}", "GET /v1/ns/{ns}/notes", "GET /v1/ns/{ns}/audit",
        "GET /v1/ns/{ns}/dead", "GET /v1/ns/{ns}/status", "GET /v1/ns/{ns}/notes/{note_id}",
        "POST /v1/ns/{ns}/audit/reproduce"}
    seen: dict[str, set[int]] = {}
    for op in ops:
        if mode is GenerationMode.NEGATIVE and op.label in ("GET /healthz", "GET /readyz"):
            continue  # no input to make invalid
        _fuzz(live, op, mode, seen.setdefault(op.label, set()))
    # the fuzzer got past validation somewhere (not only 4xx everywhere)
    if mode is GenerationMode.POSITIVE:
        assert 200 in seen["POST /v1/ns/{ns}/events"]
        assert 200 in seen["POST /v1/ns/{ns}/query"]
    assert all(max(codes) < 500 for codes in seen.values()), seen


def _fuzz(live: Live, op: Any, mode: GenerationMode, statuses: set[int]) -> None:
    """Run one operation's cases; every response passes the checks; record the statuses."""
    checks = [not_a_server_error]
    if mode is GenerationMode.POSITIVE:
        checks.append(response_schema_conformance)

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        resp = case.call_and_validate(base_url=live.base,
                                      headers={"Authorization": f"Bearer {OPS}"},
                                      checks=checks, timeout=60)
        statuses.add(resp.status_code)

    run()
