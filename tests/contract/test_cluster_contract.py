"""The projection, query and erasure contract suites, run unchanged on a real 3-master Redis Cluster
(RQ on a plain Redis beside it): every test function of both suites, with ``store`` bound to
the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.contract import test_erasure_contract, test_projection_contract, test_query_contract

pytestmark = [pytest.mark.redis_server, pytest.mark.redis_cluster]

for _suite in (test_projection_contract, test_query_contract, test_erasure_contract):
    for _name, _fn in vars(_suite).items():
        if _name.startswith("test_") and callable(_fn):
            globals()[_name] = _fn


@pytest.fixture
def store(cluster_store: Any) -> Iterator[Any]:
    """The contract suites' store, here a Redis Cluster."""
    yield cluster_store
