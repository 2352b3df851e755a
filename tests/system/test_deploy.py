"""``deploy/`` is exercised: every file parses, every ``hivemind`` command it names exists with
those flags, and the behaviours the guide claims hold (the config Redis starts with, the OOM
message, the settings table, the metric names, the hardening score)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import yaml

from hivemind_memory.api_stub.protocol.jobs import parse_shards
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store.log import append
from hivemind_memory.worker.cli.main import build_parser
from hivemind_memory.worker.loop import SWEEP_INTERVAL_S
from hivemind_memory.worker.ops import metrics
from tests.support import HIVEMIND, IN_CI, RedisProc, free_port, need_binary
from tests.support.factories import created, ev, jsonl

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GUIDE = DEPLOY / "README.md"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def check_command(argv: list[str], where: str) -> None:
    """``argv`` (after ``hivemind``) parses with the real parser."""
    assert argv, f"{where}: an empty hivemind command"
    assert argv[0] in subcommands(), f"{where}: hivemind {argv[0]} does not exist"
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"{where}: hivemind {shlex.join(argv)}: {err.getvalue()}") from exc


# --- systemd units ---------------------------------------------------------------------------

def unit(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file, continuation lines joined, repeats kept."""
    out: list[tuple[str, str, str]] = []
    section = ""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not key=value: {line!r}"
        out.append((section, key.strip(), value.strip()))
    return out


def values(path: Path, key: str) -> list[str]:
    return [v for _, k, v in unit(path) if k == key]


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_units_parse_and_their_hivemind_commands_exist(path: Path) -> None:
    sections = {s for s, _, _ in unit(path)}
    assert sections == {"Unit", "Service", "Install"}
    [exec_start] = values(path, "ExecStart")
    argv = shlex.split(exec_start.replace("%i", "1"))
    if argv[0].endswith("/hivemind"):
        check_command(argv[1:], path.name)
        assert values(path, "User") == ["hivemind"]
        assert values(path, "EnvironmentFile") == ["/etc/hivemind/hivemind.env"]
    else:
        assert argv[0] == "/usr/bin/redis-server" and argv[1] == "/etc/hivemind/redis.conf"


HARDENING = {"NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "ProtectSystem": "strict",
             "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
             "PrivateUsers": "yes", "RestrictSUIDSGID": "yes", "UMask": "0077",
             "SystemCallArchitectures": "native", "MemoryDenyWriteExecute": "yes"}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_units_are_hardened_to_the_score_they_state(path: Path, tmp_path: Path) -> None:
    for k, v in HARDENING.items():
        assert v in values(path, k), f"{path.name}: {k}={v} missing"
    stated = re.search(r"systemd-analyze security: ([0-9.]+) (\w+)", path.read_text())
    assert stated, f"{path.name} does not state its exposure score"
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if IN_CI:
            pytest.fail("systemd-analyze not found (CI=true)")
        pytest.skip("systemd-analyze not installed")
    name = path.name.replace("@.", "@1.")
    shutil.copy(path, tmp_path / name)
    r = subprocess.run([tool, "security", "--offline=true", "--no-pager", name], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    got = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", r.stdout)
    assert got, r.stdout + r.stderr
    assert (got[1], got[2]) == (stated[1], stated[2]), f"{path.name}: tool says {got[0]}"
    assert float(got[1]) <= 2.0


def test_worker_unit_metrics_port_per_instance_as_the_guide_says() -> None:
    [exec_start] = values(DEPLOY / "systemd" / "hivemind-worker@.service", "ExecStart")
    assert "--metrics-port 910%i" in exec_start
    # the instance names the shard; the example env file's count says which instances exist
    assert "--shards %i" in exec_start
    env = (DEPLOY / "systemd" / "hivemind.env.example").read_text()
    m = re.search(r"^HIVEMIND_SHARDS=(\d+)$", env, re.M)
    assert m and "systemctl enable --now hivemind-worker@0 hivemind-worker@1" in \
        GUIDE.read_text() and int(m[1]) == 2
    for k in range(int(m[1])):
        args = build_parser().parse_args(shlex.split(exec_start.replace("%i", str(k)))[1:])
        assert parse_shards(args.shards, int(m[1])) == (k,)
    assert "127.0.0.1:910<instance>" in GUIDE.read_text()
    args = build_parser().parse_args(["worker"])
    assert args.metrics_host == "127.0.0.1" and args.sweep_every == SWEEP_INTERVAL_S == 60


# --- compose -----------------------------------------------------------------------------------

def compose() -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_compose_has_redis_with_aof_serve_and_a_worker_per_shard() -> None:
    svc = compose()["services"]
    assert {"redis", "serve", "worker-0", "worker-1", "cli"} <= set(svc)
    r = svc["redis"]
    assert r["command"][:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in r["volumes"]
    assert "ports" not in r  # not published on the host
    workers = sorted(n for n in svc if n.startswith("worker"))
    shards = int(compose()["x-hivemind-env"]["HIVEMIND_SHARDS"])
    given = []
    for name in workers:
        args = build_parser().parse_args(list(svc[name]["command"]))
        given += list(parse_shards(args.shards, shards))
    assert sorted(given) == list(range(shards))  # every shard has its worker, once
    for name in ("serve", *workers):
        check_command(list(svc[name]["command"]), f"compose {name}")
        assert svc[name]["environment"]["HIVEMIND_REDIS_URL"] == "redis://redis:6379/0"
        assert svc[name]["restart"] == "always"
    assert svc["cli"]["entrypoint"] == ["hivemind"]
    assert (DEPLOY / "Dockerfile").read_text().count('ENTRYPOINT ["hivemind"]') == 1


def test_compose_env_names_only_settings_that_exist() -> None:
    env = compose()["x-hivemind-env"]
    for var in env:
        assert var in settings_vars(), var


# --- every hivemind command in the guide and the files ------------------------------------------

def snippets(text: str) -> list[str]:
    """The parts of a file that are commands: fenced code blocks, `backtick spans`, and
    comment lines that start with a shell command (compose's usage lines)."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            out.append(line.split(" # ")[0])
            continue
        out += re.findall(r"`([^`]+)`", line)
        bare = line.lstrip("#").strip()
        if bare.startswith("docker compose"):
            out.append(bare)
    return out


def commands_in(text: str) -> list[list[str]]:
    """Every ``hivemind ...`` command in the file's command snippets, as argv after it."""
    found: list[list[str]] = []
    for snip in snippets(text):
        for m in re.finditer(r"(?:^\s*|/bin/|&&\s*|;\s*|\|\s*)hivemind\s+([a-z][^|&;<>#]*)", snip):
            argv = [a for a in shlex.split(m[1]) if not a.startswith("$")]
            found.append(argv)
        m = re.search(r"compose .*run --rm (?:-T )?cli ([^<]*)", snip)
        if m:
            found.append(shlex.split(m[1]))
    return found


def test_every_hivemind_command_the_deploy_files_name_exists() -> None:
    files = [GUIDE, DEPLOY / "compose.yaml", DEPLOY / "redis.conf", *UNITS,
             DEPLOY / "systemd" / "hivemind.env.example"]
    total = 0
    for f in files:
        for argv in commands_in(f.read_text()):
            argv = [{"NS": "demo", "N": "1"}.get(a, a) for a in argv]
            if len(argv) == 1:  # a mention in prose (`hivemind replay`): the command exists
                assert argv[0] in subcommands(), f"{f.name}: {argv}"
            else:
                check_command(argv, f.name)
            total += 1
    assert total >= 15  # the guide shows ingest, query, status, replay, dead, worker, ...


# --- documented behaviours ---------------------------------------------------------------------

def settings_vars() -> dict[str, str]:
    src = (ROOT / "api_stub" / "protocol" / "settings.py").read_text()
    return dict(re.findall(r'"(HIVEMIND_[A-Z_]+)": \("(\w+)"', src))


def test_the_environment_table_matches_the_settings() -> None:
    table = dict(re.findall(r"^\| `(HIVEMIND_[A-Z_]+)` \| `?([^|`]*?)`? \|", GUIDE.read_text(),
                            re.M))
    read = settings_vars()
    assert set(table) <= set(read), set(table) - set(read)
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    for var, shown in table.items():
        d = defaults[read[var]]
        if d is None:
            assert shown.startswith("none")
        else:
            assert float(shown) == float(d) if isinstance(d, int | float) else shown == d, var
    example = (DEPLOY / "systemd" / "hivemind.env.example").read_text()
    for var in re.findall(r"^#?(HIVEMIND_[A-Z_]+)=", example, re.M):
        assert var in read, var


def test_every_metric_the_guide_names_is_exported() -> None:
    named = set(re.findall(r"`(hivemind_[a-z_]+)(?:\{[^}]*\})?`", GUIDE.read_text()))
    assert len(named) >= 10
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    append(r, [ev(created("n1"))])
    metrics.observe_query("t", True, 0.01)
    metrics.observe_index_load("t", full=True)
    metrics.BATCHES.labels("t").inc(0)
    metrics.FOLDED.labels("t").inc(0)
    metrics.watch_store(r, r)
    text = metrics.render().decode()
    exported = set(re.findall(r"^# TYPE (\w+) ", text, re.M))
    exported |= {n + "_total" for n in exported}
    assert named <= exported, named - exported


def test_redis_conf_is_what_the_guide_says_and_redis_starts_with_it(tmp_path: Path) -> None:
    need_binary()
    conf = (DEPLOY / "redis.conf").read_text()
    directives = dict(ln.split(None, 1) for ln in conf.splitlines()
                      if ln.strip() and not ln.startswith("#") and " " in ln)
    assert directives["appendonly"] == "yes" and directives["appendfsync"] == "everysec"
    assert directives["maxmemory-policy"] == "noeviction"
    assert "cluster-enabled" not in directives
    port = free_port()
    binary = shutil.which("redis-server")
    assert binary is not None
    p = subprocess.Popen([binary, str(DEPLOY / "redis.conf"), "--port", str(port), "--dir",
                          str(tmp_path), "--daemonize", "no"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c = redis.Redis(port=port)
    try:
        rp = RedisProc(port, tmp_path, appendonly=True)
        _wait_ping(c, p)
        got = {k: c.config_get(k)[k] for k in ("appendonly", "appendfsync",
                                              "maxmemory-policy", "timeout")}
        assert got == {"appendonly": "yes", "appendfsync": "everysec",
                       "maxmemory-policy": "noeviction", "timeout": "0"}
        assert rp.url.endswith(f":{port}/0")
    finally:
        c.close()
        p.terminate()
        p.wait(timeout=30)


def _wait_ping(c: redis.Redis, p: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            c.ping()
            return
        except redis.ConnectionError:
            assert p.poll() is None and time.monotonic() < deadline, "redis did not start"
            time.sleep(0.02)  # waiting for an external process to open its port


def test_ingest_at_maxmemory_stops_with_one_line_and_exit_2(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = redis_factory(appendonly=False)
    c = rp.client()
    c.config_set("maxmemory-policy", "noeviction")
    c.config_set("maxmemory", str(int(c.info("memory")["used_memory"]) + 200_000))
    f = tmp_path / "big.jsonl"
    f.write_text(jsonl([created(f"n{i}", text="x" * 2000) for i in range(2000)]))
    r = subprocess.run([*HIVEMIND, "ingest", str(f), "--no-schedule"],
                       env={**os.environ, "HIVEMIND_REDIS_URL": rp.url}, capture_output=True,
                       text=True, timeout=120, check=False)
    c.close()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    [line] = [ln for ln in r.stderr.splitlines() if ln.startswith("hivemind:")]
    assert line.startswith("hivemind: appended ") and "then the store failed" in line
    assert "OutOfMemoryError" in line and "re-running the whole file is safe" in line
    guide = " ".join(GUIDE.read_text().split())
    assert "hivemind: appended N event(s), then the store failed: ... OutOfMemoryError" in guide
    assert "exit status 2" in guide
