"""The ``hivemind`` command loads its modules without the cyclic garbage collector, freezes
what they built, and runs the command with the collector as it was before."""

from __future__ import annotations

import argparse
import gc
import importlib
import types
from collections.abc import Iterator
from typing import Any

import pytest

from hivemind_memory.worker import cli
from hivemind_memory.worker.cli import main as cli_main


@pytest.fixture
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()  # the test process's objects back in the collector's generations
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_without_collector_restores_the_state_it_found(collector: None, enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    gc.unfreeze()
    with cli.without_collector():
        inside = gc.isenabled()
        built = [[i] for i in range(1000)]  # tracked objects made inside the block
    assert inside is False
    assert gc.isenabled() is enabled
    assert gc.get_freeze_count() >= len(built)  # set aside: no collection traverses them
    young = {id(o) for o in gc.get_objects(0)}
    assert not any(id(b) in young for b in built)


def test_without_collector_restores_it_when_the_block_raises(collector: None) -> None:
    gc.enable()
    with pytest.raises(ImportError), cli.without_collector():
        assert not gc.isenabled()
        raise ImportError("a command module that does not load")
    assert gc.isenabled()


def test_run_imports_without_and_runs_the_command_with_the_collector(
        collector: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run``'s import of ``main`` and ``_dispatch``'s import of the command's module happen
    with the collector off; the command's body (a long batch, a worker) runs with it on."""
    gc.enable()
    seen: dict[str, bool] = {}

    def imported(name: str) -> Any:
        seen["importing " + name] = gc.isenabled()

        def cmd_demo(args: argparse.Namespace) -> int:
            seen["running"] = gc.isenabled()
            return 7
        return types.SimpleNamespace(cmd_demo=cmd_demo)

    monkeypatch.setattr(importlib, "import_module", imported)
    monkeypatch.setattr(cli_main, "main", lambda: (seen.setdefault("main", gc.isenabled()),
                                                   cli_main._dispatch(
                                                       argparse.Namespace(cmd="demo")))[1])
    assert cli.run() == 7
    assert seen == {"main": True, "importing hivemind_memory.worker.cli.commands": False,
                    "running": True}

