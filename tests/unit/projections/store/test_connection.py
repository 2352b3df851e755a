"""Connections chosen on purpose: waits honour their own timeout whatever the socket timeout,
a Redis restart costs a retry not an error, ACL and TLS URLs work, no secret is ever shown.

Reproduction: redis-py 8's 5 s socket timeout made ``hivemind query --timeout 30``
exit 2 after ~7 s with ``Redis error: TimeoutError``; ``Client.query(..., timeout=12)``
with no worker raised redis's TimeoutError after 59 s (its retries) instead of
``QueryTimeout`` at 12 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import ConfigError, QueryTimeout, StoreError
from hivemind_memory.projections.store.connection import (
    SOCKET_TIMEOUT_S,
    connect,
    redact_url,
)
from tests.support import HIVEMIND, RedisProc
from tests.support.beats import silent_worker, wait_for_workers
from tests.support.factories import created

SECRET = "s3cr3t-Pw_9f1e"


def test_redact_hides_every_password_form() -> None:
    assert redact_url(f"redis://hm:{SECRET}@h:1/0") == "redis://hm:***@h:1/0"
    assert redact_url(f"rediss://:{SECRET}@h") == "rediss://:***@h"
    assert redact_url(f"redis://{SECRET}@h") == "redis://***@h"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert redact_url("memory://x") == "memory://x"


@pytest.mark.redis_server
def test_waits_honour_their_timeout_whatever_the_socket_timeout(
        redis_server: RedisProc) -> None:
    r = redis_server.client()
    r.flushall()
    # redis-py's own default client (5 s socket timeout): the wait must still last 12 s
    assert r.connection_pool.connection_kwargs.get("socket_timeout") == 5
    c = Client(r, settings=Settings(redis_url=redis_server.url))
    c.append([created("n1", text="alpha")])
    env = {**os.environ, "HIVEMIND_REDIS_URL": redis_server.url}
    beat = silent_worker(r)  # the shard is served: the waits run to their end
    beat.__enter__()
    cli = subprocess.Popen([*HIVEMIND, "query", "alpha", "--ns", "t", "--budget", "10",
                            "--timeout", "12"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    with pytest.raises(QueryTimeout, match=r"no result within 12s"):
        c.query("t", "alpha", 10, timeout=12)  # a worker's heartbeat, but no answer
    took = time.monotonic() - t0
    assert 11.5 <= took <= 15, took  # its own deadline, not 5 s (socket) nor 59 s (retries)
    out, err = cli.communicate(timeout=30)
    assert cli.returncode == 1, err
    assert "error [timeout]" in out, out
    assert "Redis error" not in err and "TimeoutError" not in err, err
    beat.__exit__(None, None, None)
    r.flushall()


@pytest.mark.redis_server
def test_batch_waits_its_whole_timeout(redis_server: RedisProc, tmp_path: Path) -> None:
    r = redis_server.client()
    r.flushall()
    f = tmp_path / "q.jsonl"
    f.write_text('{"ns":"t","text":"alpha","budget":10}\n{"ns":"t","text":"beta","budget":9}\n')
    t0 = time.monotonic()
    with silent_worker(r):  # the shard is served, by a worker that answers nothing
        done = subprocess.run([*HIVEMIND, "batch", str(f), "--timeout", "7"],
                              env={**os.environ, "HIVEMIND_REDIS_URL": redis_server.url},
                              capture_output=True, text=True, timeout=60, check=False)
    took = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    assert "Redis error" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all('"code":"timeout"' in x for x in lines), lines
    assert 6.5 <= took <= 20, took
    r.flushall()


@pytest.mark.redis_server
def test_client_reconnects_after_redis_restarts(
        redis_factory: Callable[..., RedisProc]) -> None:
    rp = redis_factory()  # AOF, appendfsync always
    r = connect(rp.url)
    assert r.connection_pool.connection_kwargs["socket_timeout"] == SOCKET_TIMEOUT_S
    r.set("k", b"v")
    rp.stop(sig_kill=True)
    rp.start()
    assert r.get("k") == b"v"  # the dropped connection is replaced, the command retried
    c = Client(r, settings=Settings(redis_url=rp.url))
    c.append([created("n1")])
    rp.stop()
    rp.start()
    assert c.append([created("n2")])
    assert r.xlen("hm:{t}:events") == 2


def _acl_server(redis_factory: Callable[..., RedisProc]) -> RedisProc:
    rp = redis_factory(appendonly=False)
    admin = rp.client()
    admin.execute_command("ACL", "SETUSER", "hm", "on", f">{SECRET}", "~*", "&*", "+@all")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    admin.close()
    return rp


@pytest.mark.redis_server
def test_acl_user_url_works_end_to_end_and_no_secret_is_shown(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = _acl_server(redis_factory)
    url = f"redis://hm:{SECRET}@127.0.0.1:{rp.port}/0"
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=rp.port).ping()  # the default user is off: auth is really needed
    f = tmp_path / "e.jsonl"
    import json

    f.write_text(json.dumps(created("n1", text="alpha beta")) + "\n")
    env = {**os.environ, "HIVEMIND_REDIS_URL": url}
    outs = []
    worker = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_workers(redis.Redis.from_url(url))
        for args in (["ingest", str(f)],
                     ["query", "alpha", "--ns", "t", "--budget", "50", "--json"]):
            done = subprocess.run([*HIVEMIND, *args], env=env, capture_output=True, text=True,
                                  timeout=60, check=False)
            assert done.returncode == 0, done.stderr
            outs.append(done.stdout + done.stderr)
        assert '"note_id":"n1"' in outs[-1]
    finally:
        worker.terminate()
        outs.append(worker.communicate(timeout=30)[0])
    assert worker.returncode == 0, outs[-1]
    bad = f"redis://hm:wrong-{SECRET}@127.0.0.1:{rp.port}/0"
    done = subprocess.run([*HIVEMIND, "notes", "--ns", "t"],
                          env={**os.environ, "HIVEMIND_REDIS_URL": bad},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "cannot connect to redis://hm:***@127.0.0.1" in done.stderr, done.stderr
    outs.append(done.stdout + done.stderr)
    with pytest.raises(StoreError) as info:
        connect(bad)
    outs.append(str(info.value) + repr(info.value.__cause__) + repr(info.value.__context__))
    for text in outs:
        assert SECRET not in text, text


def _tls_files(tmp_path: Path) -> tuple[Path, Path] | None:
    if shutil.which("openssl") is None:
        return None
    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    done = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", str(key), "-out", str(cert), "-days", "1",
                           "-subj", "/CN=127.0.0.1"], capture_output=True, check=False)
    return (key, cert) if done.returncode == 0 else None


@pytest.mark.redis_server
def test_rediss_url_works(tmp_path: Path) -> None:
    from tests.support import free_port, need_binary

    need_binary()
    files = _tls_files(tmp_path)
    if files is None:
        pytest.skip("openssl not available to make a test certificate")
    key, cert = files
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(port),
                             "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                             "--tls-auth-clients", "no", "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_cert_reqs=none"
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:  # e.g. a build without TLS support
                pytest.skip("this redis-server cannot serve TLS")
            try:
                r = connect(url)
                break
            except StoreError:
                assert time.monotonic() < deadline, "TLS redis-server did not start"
                time.sleep(0.05)  # waiting for an external process to open its port
        c = Client(r, settings=Settings(redis_url=url))
        assert c.append([created("n1")])
        assert r.xlen("hm:{t}:events") == 1
        r.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("url", ["redis+cluster://alice:s3cret-pw@h1:7000,h2",
                                 "redis+cluster://:s3cret-pw@h1:port",
                                 "rediss+cluster://alice:s3cret-pw@"])
def test_a_bad_cluster_url_is_named_without_its_password(url: str) -> None:
    from hivemind_memory.projections.store.cluster import parse_cluster_url

    with pytest.raises(ConfigError) as err:
        parse_cluster_url(url)
    assert "s3cret-pw" not in str(err.value)
    assert ":***@" in str(err.value) and "must be host:port" in str(err.value)


def test_a_cluster_rq_url_is_named_without_its_password() -> None:
    with pytest.raises(ConfigError) as err:
        Settings(rq_url="redis+cluster://alice:s3cret-pw@h1:7000").check_urls()
    assert "s3cret-pw" not in str(err.value) and "alice:***@h1:7000" in str(err.value)


@pytest.mark.redis_server
def test_a_new_connection_names_the_client_without_reading_package_metadata(
        redis_server: RedisProc, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py 8 reads its version from the installed package's metadata for every new
    connection (~15 ms a connection) unless the client is given it: hivemind gives it, from
    ``redis.__version__``, the version the server is told (``CLIENT SETINFO``)."""
    import importlib.metadata

    def looked_up(name: str) -> str:
        raise AssertionError(f"importlib.metadata.version({name!r}) at connection time")

    r = connect(redis_server.url)  # the first connection
    monkeypatch.setattr(importlib.metadata, "version", looked_up)
    assert connect(redis_server.url).ping()  # a new client, a new connection
    if hasattr(redis, "driver_info"):  # redis-py 8 (5-7 read it once, at import)
        info = r.connection_pool.connection_kwargs["driver_info"]
        assert (info.name, info.lib_version) == ("redis-py", redis.__version__)
        kept = r.connection_pool.get_connection()
        try:
            assert kept.driver_info.lib_version == redis.__version__
        finally:
            r.connection_pool.release(kept)
