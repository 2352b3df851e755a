"""The house rules of the layout, checked on the code itself.

Layers point down only; within a layer nothing forms a cycle; the client never imports the
worker; only the store speaks Redis (imports redis, names keys, sends commands; RQ's own
records stay in the RQ adapters); the pure layers import neither Redis nor the clock; nothing
generic is importable from the product; benchmarks are not in the product. Imports inside
functions count too.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = "hivemind_memory"
ROOT_PACKAGE = "<root>"
"""How ``LAYERS`` names the package root, ``hivemind_memory`` itself."""

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("vocabulary", ("events",)),
    ("pure core", ("projections",)),
    ("storage", ("projections.store",)),
    ("wire protocol", ("api_stub.protocol",)),
    ("client and worker", ("api_stub", "worker")),
    ("entry points", ("worker.cli", "api_stub.server", ROOT_PACKAGE)),
    ("framework adapters", ("integrations",)),
]
"""Layer of a module: the longest matching prefix (relative to ``hivemind_memory``) wins.
The client side is the rest of ``api_stub`` (client, SDK); the servers sit above it and the
worker; so does the package root, which wires the SDK to the in-process worker."""
SIDES = {"api_stub": "client", "worker": "worker"}
"""Modules side by side in one layer that must not import each other."""
PURE_LAYERS = {"vocabulary", "pure core"}
IMPURE_IMPORTS = ("redis", "rq", "fakeredis", "time")
CLOCK_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today"),
               ("time", "time"), ("time", "monotonic"), ("time", "perf_counter")}


def package_dirs() -> dict[str, Path]:
    """Import name -> folder, from pyproject's package-dir (the single source of the layout)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in cfg["package-dir"].items()}


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg, folder in package_dirs().items():
        for f in folder.glob("*.py"):
            if f.stem == "__init__" and not f.read_text().strip():
                continue  # an empty package marker belongs to no layer
            name = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            out[name] = f
    return out


def _rel(module: str) -> str:
    return ROOT_PACKAGE if module == PKG else module.removeprefix(PKG + ".")


def layer_of(module: str) -> tuple[int, str]:
    rel = _rel(module)
    best = (-1, "", "")
    for rank, (name, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (rel == p or rel.startswith(p + ".")) and len(p) > len(best[2]):
                best = (rank, name, p)
    assert best[0] >= 0, f"{module} belongs to no layer: add it to LAYERS"
    return best[0], best[1]


def side_of(module: str) -> str | None:
    rel = _rel(module)
    if layer_of(module)[1] != "client and worker":
        return None
    return next(s for p, s in SIDES.items() if rel == p or rel.startswith(p + "."))


def imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every module imported by ``path`` (absolute names), with the line, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    pkg = module if path.stem == "__init__" else module.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.append((base, node.lineno))
            # "from pkg import module" imports that module
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return out


def internal_edges() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for target, _line in imports(path, m):
            if target in mods and target != m:
                edges[m].add(target)
    return edges


def test_every_product_module_has_a_layer() -> None:
    mods = modules()
    assert len(mods) > 30
    for m in mods:
        layer_of(m)


def test_imports_point_down_only_and_sides_stay_apart() -> None:
    bad = []
    for m, targets in internal_edges().items():
        for t in targets:
            if layer_of(t)[0] > layer_of(m)[0]:
                bad.append(f"{m} ({layer_of(m)[1]}) imports {t} ({layer_of(t)[1]})")
            s, st = side_of(m), side_of(t)
            if s and st and s != st:
                bad.append(f"{m} ({s}) imports {t} ({st}): the sides must not import each other")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles() -> None:
    edges = internal_edges()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join([*stack[stack.index(t):], t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(cycles)


def test_pure_layers_touch_no_redis_and_no_clock() -> None:
    bad = []
    for m, path in modules().items():
        if layer_of(m)[1] not in PURE_LAYERS:
            continue
        for target, line in imports(path, m):
            if target.split(".")[0] in IMPURE_IMPORTS:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    (node.value.id, node.attr) in CLOCK_CALLS:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} reads the clock "
                           f"({node.value.id}.{node.attr})")
    assert not bad, "\n".join(bad)


def test_product_imports_only_its_own_root() -> None:
    """No product module imports a generic top-level name (events, worker, bench, tests...)."""
    generic = {"events", "projections", "worker", "api_stub", "bench", "tests"}
    bad = [f"{path.relative_to(ROOT)}:{line} imports {t}"
           for m, path in modules().items() for t, line in imports(path, m)
           if t.split(".")[0] in generic]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("target", ["hivemind_memory.worker.runtime",
                                    "hivemind_memory.api_stub.client"])
def test_the_layer_rule_would_catch_an_upward_import(target: str, tmp_path: Path) -> None:
    """The checker itself: a vocabulary module importing from above, even inside a
    function, is seen and ranks below its target."""
    f = tmp_path / "bad.py"
    mod, _, name = target.rpartition(".")
    f.write_text(f"def f():\n    from {mod} import {name}\n")
    found = [t for t, _ in imports(f, "hivemind_memory.events.bad")]
    assert target in found
    assert layer_of(target)[0] > layer_of("hivemind_memory.events.bad")[0]


def test_the_client_side_never_imports_the_worker() -> None:
    """Nothing of ``api_stub`` but its servers imports ``worker``: the SDK's embedded mode gets
    its in-process worker injected by the package root."""
    bad = [f"{path.relative_to(ROOT)}:{line} imports {t}"
           for m, path in modules().items()
           if side_of(m) == "client"
           for t, line in imports(path, m) if t.startswith(f"{PKG}.worker")]
    assert not bad, "\n".join(bad)
    assert side_of(f"{PKG}.api_stub.sdk") == side_of(f"{PKG}.api_stub.client") == "client"


def test_the_servers_and_the_root_sit_above_client_and_worker() -> None:
    top = layer_of(f"{PKG}.api_stub.server.http")[0]
    assert top == layer_of(f"{PKG}.api_stub.server.mcp")[0] == layer_of(PKG)[0]
    assert top > layer_of(f"{PKG}.api_stub.sdk")[0] == layer_of(f"{PKG}.worker.engine")[0]
    assert side_of(f"{PKG}.api_stub.server.http") is None


SERVER_WORKER_DOOR = f"{PKG}.worker.service"
"""The one worker module the servers may import: what only the worker knows."""


def server_reach(path: Path, module: str) -> list[str]:
    """Where a server module reaches around its doors: any ``projections.store`` module (the
    client is the door to the store) or a worker module but ``worker.service``."""
    out = []
    for t, line in imports(path, module):
        door = t == SERVER_WORKER_DOOR or t.startswith(SERVER_WORKER_DOOR + ".")
        if t.startswith(f"{PKG}.projections.store") or (
                t.startswith(f"{PKG}.worker.") and not door):
            out.append(f"{path.name}:{line} imports {t}")
    return out


def test_the_servers_go_through_the_client_and_the_worker_service() -> None:
    """``api_stub/server/*`` import no ``projections.store`` module and, of the worker, only
    ``worker.service``: the store is reached through ``Client``."""
    servers = {m: p for m, p in modules().items() if m.startswith(f"{PKG}.api_stub.server.")}
    assert f"{PKG}.api_stub.server.http" in servers and len(servers) > 5
    bad = [b for m, p in servers.items() for b in server_reach(p, m)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("line", [
    "from hivemind_memory.projections.store import results",
    "from hivemind_memory.projections.store.readmodel import read_notes",
    "from hivemind_memory.worker.ops import metrics",
    "from hivemind_memory.worker.ops.status import read_status",
    "import hivemind_memory.worker.audit.reproduce",
])
def test_the_server_rule_would_catch_a_reach_around(line: str, tmp_path: Path) -> None:
    f = tmp_path / "http.py"
    f.write_text(f"def f():\n    {line}\n")
    assert server_reach(f, f"{PKG}.api_stub.server.http")
    f.write_text("from hivemind_memory.worker.service import WorkerService\n"
                 "from hivemind_memory.projections.state import NoteRow\n")
    assert not server_reach(f, f"{PKG}.api_stub.server.http")


def test_the_side_rule_would_catch_the_sdk_importing_the_worker(tmp_path: Path) -> None:
    f = tmp_path / "sdk.py"
    f.write_text("def f():\n    from hivemind_memory.worker.inprocess import start_embedded\n")
    found = {t for t, _ in imports(f, f"{PKG}.api_stub.sdk")}
    assert f"{PKG}.worker.inprocess" in found
    assert side_of(f"{PKG}.api_stub.sdk") != side_of(f"{PKG}.worker.inprocess")


def test_the_typecheck_mirror_is_package_dir_exactly() -> None:
    """``.typecheck/hivemind_memory`` (what mypy and basedpyright read) resolves every import
    name of pyproject's package-dir to its folder, through relative symlinks that hold in any
    clone, and holds nothing else."""
    mirror = ROOT / ".typecheck" / PKG
    dirs = package_dirs()
    for name, folder in dirs.items():
        if name == PKG:
            init = mirror / "__init__.py"
            assert init.is_symlink() and init.resolve() == (folder / "__init__.py").resolve()
            continue
        assert mirror.joinpath(*name.split(".")[1:]).resolve() == folder.resolve(), name
    top = {name.split(".")[1] for name in dirs if name != PKG}
    assert {p.name for p in mirror.iterdir()} == top | {"__init__.py"}
    for p in mirror.iterdir():
        assert p.is_symlink() and not Path(p.readlink()).is_absolute(), p


def test_the_adapters_stand_on_the_public_face() -> None:
    """``integrations`` uses what a user of the package can import (the package root) and the
    tools' shared wording (``api_stub.tool_spec``), nothing internal."""
    allowed = {PKG, f"{PKG}.api_stub.tool_spec"}
    bad = [f"{path.relative_to(ROOT)}:{line} imports {t}"
           for m, path in modules().items() if _rel(m).startswith("integrations")
           for t, line in imports(path, m)
           if t.startswith(PKG) and not t.startswith(f"{PKG}.integrations")
           and t not in allowed and t.rpartition(".")[0] not in allowed]  # or a name of one
    assert not bad, "\n".join(bad)


def test_the_base_install_imports_no_framework() -> None:
    """The package and its ``integrations`` package import no framework: each adapter's module
    imports its own, and only when it is imported."""
    import subprocess
    import sys

    code = ("import sys, hivemind_memory, hivemind_memory.integrations; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'langchain_core', 'langgraph', 'llama_index'}))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert got.stdout.strip() == "[]"


STORE = "projections.store"
RQ_ADAPTERS = {f"{PKG}.api_stub.protocol.jobs", f"{PKG}.api_stub.protocol.job_erasure",
               f"{PKG}.worker.rqworker"}
"""Where RQ's own records (``rq:`` jobs, workers and queues, through RQ's ``Queue``, ``Job``
and ``Worker`` and their hashes) are read and written: the protocol's job adapters and the
worker's RQ worker. Every key of hivemind's own is the store's."""
REDIS_COMMANDS = frozenset({
    "xadd", "xrange", "xrevrange", "xlen", "xread", "xtrim", "xdel", "hget", "hset", "hsetnx",
    "hmget", "hgetall", "hlen", "hdel", "hincrby", "sadd", "srem", "smembers", "scard",
    "sismember", "sscan_iter", "mget", "mset", "setex", "setnx", "scan_iter", "zadd",
    "zrange", "zrem", "zcard", "evalsha", "execute_command", "expire", "pexpire", "incr",
    "incrby", "getdel", "lrange", "llen", "rpush", "lpush", "blpop", "dbsize", "flushdb",
    "flushall"})
"""Methods that are Redis commands by name alone (``get``/``set``/``delete`` are left out:
too many other things have them; the key-name rule catches their keys)."""


def _outside_store(m: str) -> bool:
    rel = _rel(m)
    return not (rel == STORE or rel.startswith(STORE + "."))


def redis_imports(path: Path, module: str) -> list[str]:
    """Imports of ``redis`` in ``path`` other than its exceptions (which anyone may catch)."""
    return [f"{line} imports {t}" for t, line in imports(path, module)
            if (t == "redis" or t.startswith("redis."))
            and not (t == "redis.exceptions" or t.startswith("redis.exceptions."))]


def _key_names() -> set[str]:
    """The names of ``store.keys`` that are or build key names: its functions and its string
    constants (its numbers, TTLs and intervals, are settings anyone may read)."""
    from hivemind_memory.projections.store import keys

    return {n for n, v in vars(keys).items()
            if not n.startswith("__") and (callable(v) or isinstance(v, str | bytes))}


def key_building(path: Path) -> list[str]:
    """Uses in ``path`` of ``store.keys``'s key names, and literal keys (``hm:...``)."""
    from hivemind_memory.projections.store.keys import PREFIX

    tree = ast.parse(path.read_text(), str(path))
    names = _key_names()
    aliases: set[str] = set()
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == f"{PKG}.{STORE}":
            aliases |= {a.asname or a.name for a in node.names if a.name == "keys"}
        elif isinstance(node, ast.ImportFrom) and node.module == f"{PKG}.{STORE}.keys":
            bad += [f"{node.lineno} imports keys.{a.name}" for a in node.names
                    if a.name in names or a.name == "*"]
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names
                        if a.name == f"{PKG}.{STORE}.keys" and a.asname}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(f"{PREFIX}:"):
            bad.append(f"{node.lineno} spells a key ({node.value!r})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr in names:
            bad.append(f"{node.lineno} uses keys.{node.attr}")
    return bad


def redis_commands(path: Path) -> list[str]:
    """Calls in ``path`` of methods named for a Redis command."""
    return [f"{node.lineno} calls .{node.func.attr}()"
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in REDIS_COMMANDS]


def test_only_the_store_imports_redis() -> None:
    """Outside ``projections/store/`` a module may import ``redis.exceptions`` (to catch a
    store's error), nothing else of redis: connections, pipelines and clusters are the
    store's."""
    bad = [f"{path.relative_to(ROOT)}:{b}" for m, path in modules().items()
           if _outside_store(m) for b in redis_imports(path, m)]
    assert not bad, "\n".join(bad)


def test_only_the_store_names_keys() -> None:
    """Key names are built in the store only: no module outside it uses a key name or key
    function of ``store.keys`` or spells a key."""
    bad = [f"{path.relative_to(ROOT)}:{b}" for m, path in modules().items()
           if _outside_store(m) for b in key_building(path)]
    assert not bad, "\n".join(bad)


def test_only_the_store_and_the_rq_adapters_send_redis_commands() -> None:
    bad = [f"{path.relative_to(ROOT)}:{b}" for m, path in modules().items()
           if _outside_store(m) and m not in RQ_ADAPTERS for b in redis_commands(path)]
    assert not bad, "\n".join(bad)


def test_the_store_rules_would_catch_redis_outside_it(tmp_path: Path) -> None:
    """The checkers themselves, on a module that breaks each rule once (and one that keeps
    them: catching a store's error)."""
    f = tmp_path / "bad.py"
    f.write_text("import redis\nfrom redis.cluster import RedisCluster\n"
                 "from redis.exceptions import RedisError\n"
                 "from hivemind_memory.projections.store import keys as k\n"
                 "from hivemind_memory.projections.store.keys import WORKERS, SWEEP_INTERVAL_S\n"
                 "def f(r):\n"
                 "    r.xlen(k.stream('a'))\n"
                 "    r.set('hm:{a}:x', 1, ex=k.SCHEDULE_TTL_SECONDS)\n")
    mod = f"{PKG}.worker.bad"
    assert [b.split()[0] for b in redis_imports(f, mod)] == ["1", "2", "2"]
    assert sorted(key_building(f)) == ["5 imports keys.WORKERS", "7 uses keys.stream",
                                       "8 spells a key ('hm:{a}:x')"]
    assert redis_commands(f) == ["7 calls .xlen()"]
    assert _outside_store(mod) and not _outside_store(f"{PKG}.{STORE}.log")


def unmapped_modules(design: str) -> list[str]:
    """Product modules that ``design``'s module map does not name: each folder's bullet
    (``- `folder/`: ...`` and its indented lines) must name each of its modules as
    ```name.py```."""
    import re

    bullets: dict[str, str] = {}
    for m in re.finditer(r"^- `([\w/]+/)`[^\n]*(?:\n  [^\n]*)*", design, re.M):
        bullets[m.group(1)] = bullets.get(m.group(1), "") + m.group(0)
    out = []
    for path in sorted(modules().values()):
        rel = path.relative_to(ROOT)
        if f"`{rel.name}`" not in bullets.get(rel.parent.as_posix() + "/", ""):
            out.append(rel.as_posix())
    return out


def test_the_module_map_names_every_module() -> None:
    """``docs/design.md``'s module map lists every product module under its folder."""
    design = (ROOT / "docs" / "design.md").read_text()
    assert unmapped_modules(design) == []
    # and the check can fail: a module dropped from its bullet is missed
    assert unmapped_modules(design.replace("`counters.py`", "`counter.py`")) == \
        ["projections/store/counters.py"]
