"""No code runs from the queue: a job naming anything but hivemind's two job functions (or a
callback, or carrying a pickle) is refused before its function is imported, logged, and moved
to the failed registry without running; the worker carries on with real work.

Reproduction: a JSON job naming ``os.system('touch pwned')`` on ``hivemind-query``
or ``hivemind-project``, then ``hivemind worker --burst``, created the file.
"""

from __future__ import annotations

import os
import pickle
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rq import Callback, Queue
from rq.job import Job
from rq.registry import FailedJobRegistry

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.jobs import SafeJob
from hivemind_memory.api_stub.protocol.serializer import JSONSerializer
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import JobRefused
from tests.support import HIVEMIND, RedisProc
from tests.support.factories import created

pytestmark = pytest.mark.redis_server

EVIL_MODULE = '''
import os
open(os.environ["EVIL_MARK"] + ".imported", "w").write("imported")
def cb(*a, **k):
    open(os.environ["EVIL_MARK"] + ".called", "w").write("called")
'''


class _Boom:
    """Unpickling this runs ``touch``: what a pickle payload can do to a pickle worker."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.target}",))


def test_jobs_outside_the_allowlist_never_run_and_land_in_failed(
        redis_server: RedisProc, tmp_path: Path) -> None:
    r = redis_server.client()
    r.flushall()
    (tmp_path / "evilmod_hm8.py").write_text(EVIL_MODULE)
    mark = tmp_path / "mark"
    targets = {name: tmp_path / f"pwned-{name}" for name in
               ("system-query", "system-project", "check_call", "pickle-func", "pickle-reduce")}
    refused: dict[str, list[str]] = {jobs.QUERY_QUEUE: [], jobs.PROJECT_QUEUE: []}

    def js(name: str) -> Queue:
        return Queue(name, connection=r, serializer=JSONSerializer)

    # JSON jobs (the project's own serializer) naming arbitrary functions, on both queues
    refused[jobs.QUERY_QUEUE].append(
        js(jobs.QUERY_QUEUE).enqueue("os.system", f"touch {targets['system-query']}").id)
    refused[jobs.PROJECT_QUEUE].append(
        js(jobs.PROJECT_QUEUE).enqueue("os.system", f"touch {targets['system-project']}").id)
    refused[jobs.QUERY_QUEUE].append(js(jobs.QUERY_QUEUE).enqueue(
        "subprocess.check_call", ["touch", str(targets["check_call"])]).id)
    # a module whose mere import has an effect: refused before anything is imported
    refused[jobs.QUERY_QUEUE].append(js(jobs.QUERY_QUEUE).enqueue("evilmod_hm8.cb").id)
    # an allowed function with a callback naming anything else
    refused[jobs.PROJECT_QUEUE].append(js(jobs.PROJECT_QUEUE).enqueue(
        jobs.PROJECT_JOB, "cbns", on_success=Callback("evilmod_hm8.cb"),
        on_failure=Callback("evilmod_hm8.cb")).id)
    # pickle: a job enqueued with RQ's default serializer, and one whose payload runs code
    # when unpickled
    pq = Queue(jobs.QUERY_QUEUE, connection=r)
    refused[jobs.QUERY_QUEUE].append(
        pq.enqueue("os.system", f"touch {targets['pickle-func']}").id)
    boom = pq.enqueue("os.system", "true")
    r.hset(boom.key, "data", pickle.dumps(_Boom(str(targets["pickle-reduce"]))))
    refused[jobs.QUERY_QUEUE].append(boom.id)

    # and real work behind them, which must still be done
    s = Settings(redis_url=redis_server.url)
    c = Client(r, settings=s)
    c.append([created("n1", text="alpha beta")])
    qid = c.submit_query("t", "alpha", 100)

    env = {**os.environ, "HIVEMIND_REDIS_URL": redis_server.url, "EVIL_MARK": str(mark),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([*HIVEMIND, "worker", "--burst"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for name, target in targets.items():
        assert not target.exists(), f"{name}: the queued job ran"
    assert not Path(f"{mark}.imported").exists(), "a job's module was imported"
    assert not Path(f"{mark}.called").exists(), "a job's callback ran"
    for qname, ids in refused.items():
        failed = FailedJobRegistry(qname, connection=r, serializer=JSONSerializer,
                                   job_class=SafeJob)
        assert sorted(failed.get_job_ids()) == sorted(ids), qname
    assert done.stderr.count('"job_refused"') == sum(len(v) for v in refused.values()), done.stderr
    assert [n["note_id"] for n in c.result(qid, timeout=5)["notes"]] == ["n1"]
    r.flushall()


def test_safe_job_refuses_before_import_and_never_retries(redis_server: RedisProc) -> None:
    r = redis_server.client()
    r.flushall()
    q = Queue(jobs.QUERY_QUEUE, connection=r, serializer=JSONSerializer, job_class=SafeJob)
    from rq import Retry

    bad = q.enqueue("os.system", "true", retry=Retry(max=3))
    job = SafeJob.fetch(bad.id, connection=r, serializer=JSONSerializer)
    assert job.refusal() is not None and "os.system" in job.refusal()  # type: ignore[operator]
    with pytest.raises(JobRefused, match="refused without running"):
        _ = job.func
    assert job.should_retry is False
    good = q.enqueue(jobs.QUERY_JOB, [], retry=Retry(max=3))
    gjob = SafeJob.fetch(good.id, connection=r, serializer=JSONSerializer)
    assert gjob.refusal() is None and gjob.should_retry is True
    assert gjob.func.__name__ == "answer_queries"
    # a plain RQ Job would have resolved it: the refusal is SafeJob's doing
    assert Job.fetch(bad.id, connection=r, serializer=JSONSerializer).func is os.system
    r.flushall()


def test_the_in_process_worker_refuses_jobs_outside_the_allowlist(tmp_path: Path) -> None:
    """``serve``/``mcp``/the SDK on ``memory://`` drain their queues with the in-process
    worker: it is a ``HivemindWorker`` like the others, so a JSON job naming ``os.system``
    lands in the failed registry without running, and real work still gets done."""
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.projections.store.readmodel import read_notes
    from hivemind_memory.worker.inprocess import start_embedded

    url = f"memory://{tmp_path / 'store'}"
    store = connect(url)
    target = tmp_path / "pwned"
    q = Queue(jobs.QUERY_QUEUE, connection=store, serializer=JSONSerializer)
    evil = q.enqueue("os.system", f"touch {target}")
    worker = start_embedded(Settings(redis_url=url), store)
    try:
        client = Client(store, settings=Settings(redis_url=url))
        client.append([created("n1", ns="inproc", text="real work")])
        worker.kick()
        assert client.wait_projected("inproc", 10.0)
        assert set(read_notes(store, "inproc")) == {"n1"}
        assert evil.id in FailedJobRegistry(jobs.QUERY_QUEUE, connection=store,
                                            serializer=JSONSerializer).get_job_ids()
    finally:
        worker.stop()
    assert not target.exists()
