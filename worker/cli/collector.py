"""The cyclic garbage collector set aside while a command's modules load (``run``, ``main``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def without_collector() -> Iterator[None]:
    """The block without the cyclic garbage collector; after it, every object so far frozen
    (``gc.freeze``: never traversed by a collection again) and the collector as it was. A
    command's imports (redis-py, RQ, msgspec: ~400 modules) build objects that live as long
    as the process: the collections their allocations set off free nothing, and re-enabling
    the collector without the freeze would only defer them to its next pass."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
