"""The ``hivemind`` command line: ``run`` is the console script's entry point, ``main`` holds
the parsers and the dispatch, each command's body lives in a module of its own."""

from __future__ import annotations

from hivemind_memory.worker.cli.collector import without_collector


def run() -> int:
    """Entry point of the ``hivemind`` console script: ``main.main``, its module (the parsers,
    redis-py) loaded ``without_collector``, as ``main`` loads the command's own."""
    with without_collector():
        from hivemind_memory.worker.cli.main import main
    return main()
