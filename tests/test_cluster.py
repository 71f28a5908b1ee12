"""Clusters: a real LocalCluster's worker environment, and a scheduler and workers
started by hand with the `dask scheduler` / `dask worker` commands."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import await_replacement, start_scheduler

from workbench.config import ConfigError, RunConfig
from workbench.execution.cluster import connect, make_cluster, workers_of
from workbench.execution.engine import run
from workbench.maths.backend import GPUUnavailable

pytestmark = pytest.mark.cluster


def _worker_env():
    import threadpoolctl
    return {"malloc": os.environ.get("MALLOC_TRIM_THRESHOLD_"), "omp": os.environ.get("OMP_NUM_THREADS"),
            "kind": os.environ.get("WORKBENCH_WORKER_KIND"),
            "blas": [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]}


def test_local_cluster_workers_have_tuned_environment_and_client_env_is_untouched(client):
    before = dict(os.environ)
    envs = client.run(_worker_env)
    assert len(envs) == 2
    for env in envs.values():
        assert env["malloc"] is None          # Dask's nanny default would be 65536
        assert env["omp"] == "1"              # one BLAS thread per worker, whatever the cores (util.blas)
        assert env["kind"] == "cpu"
    for w in workers_of(client):
        assert w["address"].startswith("tls://127.0.0.1:")   # loopback, and authenticated (test_cluster_tls)
    assert dict(os.environ) == before


def test_every_run_sets_its_workers_blas_threads_by_the_one_rule_and_counts_its_own_processes(client):
    """One rule for every entry point (util.blas): a worker computes with `blas_threads` BLAS
    threads, 1 unless the run asks, on a cluster kept between runs too (the 1-worker run of
    issue 48 computed on 2 threads, its 2-worker run on 1 each); the summary says what the
    loops ran with. And the run's own processes (this one, the worker processes) are never
    "other processes": the workers' loop CPU is inside the run's share."""
    base = RunConfig(algorithm="sync_sgd", dataset="digits", batch_size=32, steps=30, seed=0)
    one = run(base.replace(cpus=1), cluster=client).summary
    two = run(base.replace(cpus=2, blas_threads=2), cluster=client).summary
    again = run(base.replace(cpus=2), cluster=client).summary
    assert [w["blas_threads"] for w in one["machine"]["workers"]] == [1] and one["blas_threads"] == 1
    assert [w["blas_threads"] for w in two["machine"]["workers"]] == [2, 2] and two["blas_threads"] == 2
    assert [w["blas_threads"] for w in again["machine"]["workers"]] == [1, 1]   # the run's count, not the last one
    for s in (one, two, again):
        m = s["machine"]
        loops = sum(w["process_cpu_s"] for w in m["workers"])
        assert m["our_cores"] * m["wall_s"] >= 0.95 * loops - 0.01, m      # the workers are the run's
        assert m["cores"] <= (os.cpu_count() or 1)


def test_each_worker_gets_its_share_of_the_memory(client):
    from distributed.system import MEMORY_LIMIT

    from workbench.execution.preflight import beside_workers
    limits = [w["memory_limit"] for w in workers_of(client)]
    assert limits == [(MEMORY_LIMIT - beside_workers()) // 2] * 2   # what lives beside them set aside first


_ONE_CPU_CLUSTER = """
import os, sys
os.sched_setaffinity(0, {0})                      # one CPU, as Binder gives (Dask reads the affinity)
from dask.system import CPU_COUNT
from distributed.system import MEMORY_LIMIT
from workbench.execution.cluster import close_client, make_cluster, workers_of
client = make_cluster(cpus=2, gpus=0, quiet=True)
try:
    print(CPU_COUNT, MEMORY_LIMIT, *[w["memory_limit"] for w in workers_of(client)])
finally:
    close_client(client)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")
def test_on_one_cpu_two_workers_each_get_half_the_memory_not_all_of_it():
    # Dask's "auto" limit is memory * min(1, threads / cores): on one CPU each worker would get
    # all of it, and the container is killed before Dask pauses anyone
    proc = subprocess.run([sys.executable, "-c", _ONE_CPU_CLUSTER], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpus, total, *limits = map(int, proc.stdout.split())
    assert cpus == 1
    from workbench.execution.preflight import beside_workers
    assert limits == [(total - beside_workers(jupyter=False)) // 2] * 2   # the kernel beside them set aside


@pytest.mark.slow
def test_a_one_worker_cluster_computes_on_one_blas_thread_as_each_of_two_does():
    # issue 48: a 1-worker local cluster started its worker with cores // 1 = 2 BLAS threads, a
    # 2-worker one with 1 each, so "2 workers against 1" compared different things (the dashboard's
    # Run said 9.1x where a sweep on one 2-worker cluster said 0.43x)
    import contextlib

    from conftest import local_client
    with contextlib.contextmanager(local_client)(1) as one:
        assert list(one.run(_worker_env).values())[0]["omp"] == "1"
        s = run(RunConfig(algorithm="sync_sgd", dataset="digits", cpus=1, batch_size=32, steps=20), cluster=one).summary
    assert s["blas_threads"] == 1 and [w["blas_threads"] for w in s["machine"]["workers"]] == [1]


@pytest.mark.slow
def test_a_nanny_brings_its_killed_worker_back_whatever_the_lost_worker_timeout(client):
    # distributed's SpecCluster closes the nanny of a worker name that is absent
    # lost-worker-timeout after its removal (15 s; a restart under load, or a second kill within
    # 15 s of a first, outlasts it): the cluster kept one worker fewer for good. With 0 s its
    # timer fires before any replacement can register, so a stock cluster always loses it here.
    import dask
    victim = workers_of(client)[1]
    nanny = next(n for n in client.cluster.workers.values() if n.worker_address == victim["address"])
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "0s"}):
        os.kill(victim["pid"], signal.SIGKILL)
        await_replacement(client, 2, gone=victim["address"])
    assert nanny in client.cluster.workers.values() and nanny.status.name == "running"
    fresh = [w for w in workers_of(client) if w["name"] == victim["name"]]
    assert len(fresh) == 1 and fresh[0]["pid"] != victim["pid"]
    assert nanny.worker_address == fresh[0]["address"]
    assert run(RunConfig(algorithm="sync_sgd", cpus=2, steps=3, dataset="digits"), cluster=client).status == "completed"


def test_make_cluster_leaves_client_environ_alone():
    before = dict(os.environ)
    c = make_cluster(cpus=1, gpus=0, quiet=True)
    try:
        assert dict(os.environ) == before
    finally:
        cluster = c.cluster
        c.close()
        cluster.close()


def test_gpus_without_a_gpu_is_a_clear_error():
    with pytest.raises(GPUUnavailable, match="gpus: .*pip install"):
        make_cluster(gpus=1, cpus=0)


def test_gpus_auto_falls_back_to_cpu_with_a_note(capsys):
    c = make_cluster(gpus="auto", cpus=1)
    try:
        assert len(c.nthreads()) == 1
        assert "no GPU" in capsys.readouterr().err
    finally:
        cluster = c.cluster
        c.close()
        cluster.close()


def test_run_asking_more_workers_than_the_cluster_has_fails_before_starting(client):
    with pytest.raises(ConfigError, match="cpus: at most the 2 CPU worker"):
        run(RunConfig(algorithm="sync_sgd", cpus=3, steps=2), cluster=client)


def test_session_cluster_is_reused_across_runs():
    from workbench.execution.cluster import close_session, session_client
    try:
        a = session_client(1, 0)
        b = session_client(1, 0)
        assert a is b
    finally:
        close_session()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def hand_started_cluster(tmp_path_factory):
    """`dask scheduler` and two `dask worker` processes, as a user would start them."""
    bindir = Path(sys.executable).parent
    log = tmp_path_factory.mktemp("dask")
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": ""}
    scheduler, address = start_scheduler(log, stdout=open(log / "s.log", "w"), stderr=subprocess.STDOUT, env=env)
    procs = [scheduler]
    for i in range(2):
        procs.append(subprocess.Popen([str(bindir / "dask"), "worker", address, "--nthreads", "1",
                                       "--name", f"hand-{i}", "--host", "127.0.0.1", "--no-dashboard"],
                                      stdout=open(log / f"w{i}.log", "w"), stderr=subprocess.STDOUT, env=env))
    try:
        client = None
        for _ in range(60):
            try:
                client = connect(address)
                break
            except ConfigError:
                time.sleep(0.5)
        assert client is not None, "scheduler did not come up"
        client.wait_for_workers(2, timeout=60)
        yield client
        client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(20)


def test_runs_on_hand_started_scheduler_and_workers(hand_started_cluster):
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=20, batch_size=64, lr=0.1)
    on_shm = run(cfg, cluster=hand_started_cluster)
    via_dask = run(cfg.replace(comm="dask"), cluster=hand_started_cluster)
    assert on_shm.status == via_dask.status == "completed"
    assert {w["name"] for w in on_shm.summary["workers"]} == {"hand-0", "hand-1"}
    assert np.array_equal(on_shm.params, via_dask.params)
    ps = run(cfg.replace(algorithm="async_sgd"), cluster=hand_started_cluster)
    assert ps.status == "completed"


def test_connect_to_nothing_is_a_clear_error():
    with pytest.raises(ConfigError, match="scheduler: a reachable Dask scheduler"):
        connect(f"tcp://127.0.0.1:{_free_port()}")


# ------------------------------------------- GPU workers' kind (no GPU here: the logic alone)
class _FakeCUDACluster:
    """What dask-cuda's LocalCUDACluster.new_worker_spec does to `env`: replaces it."""
    def new_worker_spec(self):
        return {0: {"options": {"env": {"CUDA_VISIBLE_DEVICES": "0,1"}, "nthreads": 1}}}


def test_dask_cuda_workers_are_tagged_gpu_after_dask_cuda_writes_their_env():
    from workbench.execution.cluster import WORKER_KIND_ENV, gpu_tagging
    spec = gpu_tagging(_FakeCUDACluster)().new_worker_spec()
    assert spec[0]["options"]["env"] == {"CUDA_VISIBLE_DEVICES": "0,1", WORKER_KIND_ENV: "gpu"}
    assert spec[0]["options"]["nthreads"] == 1
    assert gpu_tagging(_FakeCUDACluster) is gpu_tagging(_FakeCUDACluster)   # one class per base


def _fake_worker(plugins):
    from types import SimpleNamespace
    return SimpleNamespace(address="tls://127.0.0.1:4000", name="w", plugins=plugins,
                           state=SimpleNamespace(total_resources={}), memory_manager=None)


def test_a_worker_started_by_dask_cuda_is_a_gpu_worker_without_our_variable(monkeypatch):
    from workbench.execution.cluster import WORKER_KIND_ENV, describe_worker
    monkeypatch.delenv(WORKER_KIND_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    rmm = type("RMMSetup", (), {"__module__": "dask_cuda.plugins"})()
    mine = type("Mine", (), {"__module__": "somebody.else"})()
    assert describe_worker(_fake_worker({"RMMSetup-1": rmm}))["kind"] == "gpu"
    assert describe_worker(_fake_worker({"RMMSetup-1": rmm}))["device"] == "1"
    assert describe_worker(_fake_worker({"mine": mine}))["kind"] == "cpu"
    assert describe_worker(_fake_worker({}))["kind"] == "cpu"


def test_the_mixed_cluster_keeps_dask_info_lines_out_of_the_output(capfd):
    """The GPU + CPU cluster (a SpecCluster) is as quiet as LocalCluster: on the H200 its
    scheduler and workers printed ~60 INFO lines around one short run."""
    from distributed import Client

    from workbench.execution.cluster import _mixed_cluster, close_client, workers_of
    cluster = _mixed_cluster(0, 1, 1, "auto")
    c = Client(cluster, set_as_default=False, security=cluster.security)
    try:
        c.wait_for_workers(1, timeout=60)
        assert [w["kind"] for w in workers_of(c)] == ["cpu"]
    finally:
        close_client(c)
        cluster.close()
    err = capfd.readouterr().err
    assert " - INFO - " not in err, err[:2000]


@pytest.mark.slow
def test_the_gpu_checks_every_algorithm_table_on_cpu_workers():
    """The GPU check's second table with CPU workers on both sides (its logic, here): every
    algorithm completes, and those whose maths is timing-independent repeat the reference."""
    from workbench.bench.gpucheck import VARIANTS, every_algorithm
    from workbench.config.registry import specs
    from workbench.execution.cluster import close_client
    c = make_cluster(gpus=0, cpus=3, quiet=True)
    try:
        table = every_algorithm(c, c, gpu=False, steps=12)
    finally:
        close_client(c)
    assert len(table) == len(specs()) - 1 + len(VARIANTS)          # all but sgd (in-process)
    assert table["passed"].all(), table.to_string()
    same = table[table["timing_independent"]]
    assert set(same["algorithm"].str.split().str[0]) >= {"sync_sgd", "cgdp", "ltfb", "diloco", "dpsgd"}
    assert (same["max_abs_diff"] < 1e-6).all(), same.to_string()   # same machine, same maths


def _record(exc):
    import logging
    import sys
    try:
        raise exc
    except BaseException:
        return logging.LogRecord("distributed.client", logging.ERROR, __file__, 1, "%s", (exc,), sys.exc_info())


def test_the_cli_log_filter_shortens_dask_lines_and_leaves_a_cancelled_task_to_the_runs_filter():
    # Dask logs a coroutine cancelled as its client closes (the reconnect to a lost scheduler)
    # as an ERROR with no message; the CLI printed it as "(CancelledError)" beside its own line.
    # The rule that leaves it out is the library's (`_NoCancelled`, around every run and close):
    # the CLI's own filter leaves such a record whole for it, whichever filter comes first.
    import asyncio

    from workbench.execution.cluster import _NoCancelled, _NoTracebacks
    cancelled = _record(asyncio.CancelledError())
    assert _NoTracebacks().filter(cancelled) is True and cancelled.exc_info is not None
    assert _NoCancelled().filter(cancelled) is False
    kept = _record(OSError("connection refused"))
    assert _NoCancelled().filter(kept) is True
    assert _NoTracebacks().filter(kept) is True
    assert kept.exc_info is None and kept.getMessage() == "connection refused (OSError: connection refused)"


def test_wb_run_leaves_out_dasks_cancelled_task_line_during_the_run_only():
    """`wb.run` in Python or a notebook gets the filter the CLI had alone: Dask's
    "distributed.client - ERROR -  (CancelledError)" is not written while a run goes (nor while
    a client closes, `close_client`), and the handlers are as they were once it ends (no
    global change to logging). A line logged from the run's own thread (its record callback)
    stands for Dask's; an OSError's line goes through."""
    import asyncio
    import logging

    import workbench as wb
    from workbench.config import RunConfig

    class Catch(logging.Handler):
        def __init__(self):
            super().__init__()
            self.seen = []

        def emit(self, record):
            self.seen.append(type(record.exc_info[1]).__name__ if record.exc_info else record.getMessage())

    log = logging.getLogger("distributed.client")
    catch = Catch()
    log.addHandler(catch)
    before = (list(log.filters), list(catch.filters))
    logged = []

    def on_record(batch):
        if not logged:
            logged.append(True)
            log.error("", exc_info=_record(asyncio.CancelledError()).exc_info)
            log.error("", exc_info=_record(OSError("refused")).exc_info)
    try:
        cfg = RunConfig(algorithm="sync_sgd", cpus=2, dataset="digits", model="softmax", batch_size=32, steps=30, seed=0)
        wb.run(cfg, cluster="threads", on_record=on_record, progress=False)
        assert logged and catch.seen == ["OSError"], catch.seen
        assert (list(log.filters), list(catch.filters)) == before
        log.error("", exc_info=_record(asyncio.CancelledError()).exc_info)   # after the run: as Dask's logging says
        assert catch.seen == ["OSError", "CancelledError"]
    finally:
        log.removeHandler(catch)
