"""Lua scripts: each a .lua file in ``lua/`` (its header documents KEYS and ARGV), loaded once
and registered per client."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from redis.commands.core import Script

from hivemind_memory.projections.store.types import Store

_PACKAGE = "hivemind_memory.projections.store"
"""The package whose ``lua/`` folder holds the scripts."""


@cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return (files(_PACKAGE) / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def script(r: Store, name: str) -> Script:
    """The registered script object for client ``r`` (EVALSHA with EVAL fallback)."""
    cache_attr = "_hivemind_scripts"
    reg: dict[str, Script] | None = getattr(r, cache_attr, None)
    if reg is None:
        reg = {}
        setattr(r, cache_attr, reg)
    if name not in reg:
        reg[name] = r.register_script(source(name))
    return reg[name]
