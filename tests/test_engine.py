"""The engine: the parallel algorithms against the reference, on threads and on a real
Dask cluster of worker processes; stop, divergence and lost workers."""
import os
import signal
import threading
import time

import numpy as np
import pytest
from conftest import await_replacement

from workbench.config import RunConfig
from workbench.execution.engine import run, run_threads


def reference(cfg, steps):
    """sgd on one worker (itself checked against a plain loop in test_reference)."""
    return run_threads(cfg.replace(algorithm="sgd", steps=steps)), None


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_sync_sgd_on_threads_follows_single_process_sgd(workers, tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=workers, steps=25)
    ref, _ = reference(cfg, 25)
    got = run_threads(cfg)
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    # every worker saw the same global loss as the single process, step by step
    losses = got.steps[got.steps.worker == 0].sort_values("step")["loss"].to_numpy()
    np.testing.assert_allclose(losses, ref.steps["loss"].to_numpy(), rtol=1e-5)


def test_sync_sgd_with_speed_split_still_follows_sgd(tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=40, split="speed")
    ref, _ = reference(cfg, 40)
    got = run_threads(cfg)
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    assert any(e["event"] == "rebalanced" for e in got.events)


@pytest.mark.parametrize("algorithm", ["async_sgd", "async_msgd", "hogwild_sgd"])
def test_async_algorithms_with_one_worker_are_plain_sgd(algorithm, tiny):
    momentum = 0.9 if algorithm == "async_msgd" else 0.0
    cfg = tiny(algorithm=algorithm, cpus=1, steps=20, lr=0.05, momentum=momentum)
    ref, _ = reference(cfg, 20)
    got = run_threads(cfg)
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-6)


def test_async_sgd_records_staleness(tiny):
    got = run_threads(tiny(algorithm="async_sgd", cpus=2, steps=60))
    stale = got.steps["staleness"]
    assert stale.min() >= 0 and stale.max() <= 2 * 60
    assert got.summary["status"] == "completed"


def test_threads_stop_request_ends_run_as_stopped(tiny):
    seen = []
    got = run_threads(tiny(algorithm="sync_sgd", cpus=2, epochs=500),
                      on_record=seen.extend, should_stop=lambda: len(seen) > 20)
    assert got.status == "stopped"
    assert 0 < len(got.steps) < 500 * 22 * 2


# ---------------------------------------------------------------- on a real Dask cluster

@pytest.mark.cluster
def test_dask_sync_sgd_follows_reference_and_is_deterministic(client, tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=30)
    ref, _ = reference(cfg, 30)
    a = run(cfg, cluster=client)
    b = run(cfg, cluster=client)
    assert a.status == b.status == "completed"
    assert a.summary["comm"] == "shm"
    np.testing.assert_allclose(a.params, ref.params, rtol=0, atol=1e-5)
    assert np.array_equal(a.params, b.params)                       # bitwise repeatable
    assert a.steps.sort_values(["step", "worker"])["loss"].tolist() == b.steps.sort_values(["step", "worker"])["loss"].tolist()
    one = run(cfg.replace(cpus=1), cluster=client)
    np.testing.assert_allclose(one.params, ref.params, rtol=0, atol=1e-5)


@pytest.mark.cluster
def test_dask_portable_allreduce_matches_shared_memory(client, tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=10, comm="dask")
    a = run(cfg, cluster=client)
    b = run(cfg.replace(comm="shm"), cluster=client)
    assert a.summary["comm"] == "dask"
    assert np.array_equal(a.params, b.params)


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sync_sgd", "async_sgd", "async_msgd", "hogwild_sgd"])
def test_dask_each_algorithm_reaches_90_percent_on_digits(client, algorithm):
    cfg = RunConfig(algorithm=algorithm, cpus=2, epochs=8, dataset="digits", model="mlp", batch_size=64,
                    lr=0.1 if algorithm != "async_msgd" else 0.05, seed=0)
    result = run(cfg, cluster=client)
    assert result.status == "completed", result.summary.get("errors")
    assert result.summary["final_test_accuracy"] >= 0.90
    assert set(result.steps["worker"]) == {0, 1}
    # every worker ran every planned step on its half of the global batch (n_train 1437 / 64: 22 steps an epoch)
    assert result.summary["samples"] == 8 * 22 * 64


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["async_sgd", "async_msgd"])
def test_dask_parameter_server_as_an_actor(client, algorithm):
    # comm="dask" forces the portable path: the server is a Dask actor, not shared memory
    cfg = RunConfig(algorithm=algorithm, cpus=2, epochs=8, comm="dask", dataset="digits", model="mlp",
                    batch_size=64, lr=0.05, seed=0)
    result = run(cfg, cluster=client)
    assert result.summary["server"] == "actor"
    assert result.status == "completed" and result.summary["final_test_accuracy"] >= 0.90
    on_shm = run(cfg.replace(comm="auto", steps=5), cluster=client)
    assert on_shm.summary["server"] == "shm"


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sync_sgd", "async_sgd"])
def test_dask_stop_request_keeps_records_and_cluster_reusable(client, algorithm, tiny):
    seen, asked = [], {}

    def should_stop():
        # ask once training has run for a second, and remember when
        steps = [r for r in seen if r["kind"] == "step"]
        if steps and max(r["time"] for r in steps) > 1.0:
            asked.setdefault("at", time.time())
            return True
        return False

    result = run(tiny(algorithm=algorithm, cpus=2, epochs=5000), cluster=client,
                 on_record=lambda recs: seen.extend(recs), should_stop=should_stop)
    assert result.status == "stopped"
    assert time.time() - asked["at"] < 30           # a hang guard (the 2 s of docs/usage.md is no test on a busy machine)
    assert len(result.steps) > 10
    # every step was streamed live, in binned batches: totals match the whole table
    live = [r for r in seen if r["kind"] == "step"]
    assert 0 < len(live) <= len(result.steps)
    assert sum(r["samples"] for r in live) == result.steps["samples"].sum()
    again = run(tiny(algorithm="sync_sgd", cpus=2, steps=5), cluster=client)
    assert again.status == "completed"


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sync_sgd", "async_sgd"])
def test_dask_absurd_lr_diverges_with_step_and_lr(client, algorithm, tiny):
    result = run(tiny(algorithm=algorithm, cpus=2, steps=400, momentum=0.0, lr=1e5),
                 cluster=client)
    assert result.status == "diverged"
    event = [e for e in result.events if e["event"] == "diverged"][0]
    assert "at step" in event["message"] and "lr 100000" in event["message"]


def _kill_rank_1_midrun(client, cfg):
    from workbench.execution.cluster import workers_of
    victim = workers_of(client)[1]
    progress = threading.Event()

    def on_record(records):
        if any(r["kind"] == "step" and r["worker"] == 1 for r in records):
            progress.set()       # the victim has trained and reported: kill it mid-run

    box = {}
    t = threading.Thread(target=lambda: box.setdefault("result", run(cfg, cluster=client, on_record=on_record)))
    t.start()
    assert progress.wait(60)
    time.sleep(0.3)
    os.kill(victim["pid"], signal.SIGKILL)
    t.join(240)
    await_replacement(client, 2, gone=victim["address"])  # the nanny brings a fresh worker back
    return box["result"], victim


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["async_sgd", "easgd"])
def test_dask_async_goes_on_without_a_lost_worker(client, tmp_path, algorithm, tiny):
    # easgd serves workers in strict turn order: the lost rank's turns must be given up
    cfg = tiny(algorithm=algorithm, cpus=2, epochs=400)   # long enough to be killed mid-run
    result, victim = _kill_rank_1_midrun(client, cfg)
    assert result.status == "completed"
    lost = [e for e in result.events if e["event"] == "worker_lost"]
    assert lost and victim["address"] in lost[0]["message"]
    steps0 = result.steps[result.steps.worker == 0]["step"].max()
    steps1 = result.steps[result.steps.worker == 1]["step"].max()
    assert steps0 + 1 == result.summary["total_steps_planned"]   # the survivor finished the run
    assert steps1 < steps0
    result.save(tmp_path / "run")


@pytest.mark.cluster
@pytest.mark.slow
def test_dask_sync_fails_naming_the_lost_worker_and_keeps_records(client, tmp_path, tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=2, epochs=5000)
    result, victim = _kill_rank_1_midrun(client, cfg)
    assert result.status == "failed"
    lost = [e for e in result.events if e["event"] == "worker_lost"]
    assert lost and victim["name"] in lost[0]["message"]
    assert len(result.steps) > 0
    path = result.save(tmp_path / "run")
    assert (path / "steps.csv").read_text().count("\n") == len(result.steps) + 1
    after = run(tiny(algorithm="sync_sgd", cpus=2, steps=5), cluster=client)
    assert after.status == "completed"


def test_thread_workers_run_blas_on_one_thread_and_give_the_setting_back():
    """A worker thread is one core, as a Dask worker process is: BLAS runs one thread while
    the run lasts (two threads each running OpenBLAS's default of one per core made sgd
    10-18x slower on a loaded machine), and the caller's setting is back afterwards."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"}

    if not blas_threads():
        pytest.skip("no BLAS library that threadpoolctl can see")
    seen: list[set[int]] = []

    def should_stop() -> bool:      # polled by the client while the workers run
        seen.append(blas_threads())
        return False

    config = RunConfig(algorithm="sync_sgd", dataset="digits", cpus=2, batch_size=32, steps=40, seed=0)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):      # the caller's own setting
        result = run_threads(config, should_stop=should_stop)
        after = blas_threads()
    assert result.summary["status"] == "completed" and result.summary["blas_threads"] == 1
    assert seen and all(s == {1} for s in seen), seen
    assert after == {3}
    # sgd runs in this process on the same transport
    sgd = run(config.replace(algorithm="sgd", cpus=1))
    assert sgd.summary["blas_threads"] == 1
    # the one rule's knob: a run that asks for more gets them, and the caller's setting back
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        asked = run_threads(config.replace(blas_threads=2))
        assert blas_threads() == {3}
    assert asked.summary["blas_threads"] == 2
    assert [w["blas_threads"] for w in asked.summary["machine"]["workers"]] == [2, 2]


def test_an_interrupt_after_should_stop_asked_stops_waiting_for_the_loops(monkeypatch):
    # A sweep takes the first Ctrl-C as a stop request (should_stop, `api.interrupt_stops`) and
    # raises the second: inside a run, that second one is the run's first interrupt, and it
    # only asked again for a stop already asked. It now counts as asked again: the client
    # stops waiting for loops that do not end (before, it took a third).
    from types import SimpleNamespace

    from workbench.execution import engine
    from workbench.execution.engine import _Monitor
    from workbench.execution.transports.base import Progress
    from workbench.results.collect import Collector

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    monkeypatch.setattr(engine, "STOP_GRACE_S", 1e6)   # no deadline: only an interrupt cancels

    class Stuck:   # loops that ignore the stop request; they end on their own after 400 polls
        def __init__(self):
            self.stops, self.cancelled, self.polls = [], False, 0

        def live_rows(self):
            return {}

        def poll(self):
            self.polls += 1
            if self.stops and self.polls == 3:
                os.kill(os.getpid(), signal.SIGINT)   # delivered before this call returns
            return Progress()

        def pending(self):
            return not self.cancelled and self.polls < 400

        def request_stop(self, why):
            self.stops.append(why)

        def finish(self):
            return Progress()

        def cancel(self):
            self.cancelled = True

    def raising(signum, frame):
        raise KeyboardInterrupt("SIGINT")

    setup = SimpleNamespace(size=1, spec=SimpleNamespace(sync=True), t0_wall=time.time())
    loops = Stuck()
    monitor = _Monitor(setup, loops, Collector(), should_stop=lambda: True)
    old = signal.signal(signal.SIGINT, raising)
    try:
        monitor.watch()
    finally:
        signal.signal(signal.SIGINT, old)
    assert loops.stops == ["stop requested"]
    assert loops.cancelled and loops.polls < 400


def test_an_interrupt_in_the_client_loop_is_a_stop_request_and_loses_no_batch():
    # The CLI turns SIGTERM and SIGHUP into KeyboardInterrupt, as Python turns Ctrl-C and
    # Jupyter's "interrupt the kernel": raised inside the client's loop, it landed between two
    # bytecodes, and the batches the loop had taken off the queue were lost (an evaluation's
    # record went missing from a run stopped by SIGTERM and resumed: tests/test_resume.py).
    # Here a real SIGINT, handled by a handler that raises, arrives while the collector takes
    # the first of three batches: all three reach it, the loops are asked to stop, the run
    # ends stopped, and the handler in place before the loop is back after it.
    from types import SimpleNamespace

    from workbench.execution.engine import _Monitor
    from workbench.execution.transports.base import Progress
    from workbench.results.collect import Collector

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")

    class Loops:   # the transport: its loops end once asked to stop
        def __init__(self):
            self.stops, self.cancelled = [], False

        def live_rows(self):
            return {}

        def poll(self):
            return Progress(results={0: {"status": "stopped", "params": None}}) if self.stops else Progress()

        def pending(self):
            return not self.stops

        def request_stop(self, why):
            self.stops.append(why)

        def finish(self):
            return Progress()

        def cancel(self):
            self.cancelled = True

    class Collecting(Collector):
        def add_live(self, payload):
            if payload["records"] and payload["records"][0]["step"] == 199:
                os.kill(os.getpid(), signal.SIGINT)   # delivered before this call returns
            super().add_live(payload)

    def raising(signum, frame):
        raise KeyboardInterrupt("SIGINT")

    setup = SimpleNamespace(size=1, spec=SimpleNamespace(sync=True), t0_wall=time.time())
    loops, collector = Loops(), Collecting()
    monitor = _Monitor(setup, loops, collector, should_stop=None)
    for step in (199, 399, 599):
        monitor.records.put({"kind": "live", "rank": 0, "started": None, "rows": None, "done": step == 599,
                             "records": [{"kind": "eval", "worker": "0", "step": step, "epoch": 1.0, "time": 0.1,
                                          "train_loss": 1.0, "test_loss": 1.0, "test_accuracy": 0.5}]})
    old = signal.signal(signal.SIGINT, raising)
    try:
        status, _, _ = monitor.watch()
        assert signal.getsignal(signal.SIGINT) is raising
    finally:
        signal.signal(signal.SIGINT, old)
    assert collector.evals.frame()["step"].tolist() == [199, 399, 599]
    assert loops.stops == ["KeyboardInterrupt"] and not loops.cancelled
    assert status == "stopped"
    assert [e["message"] for e in collector.rows["event"] if e["event"] == "stop_requested"] == \
        ["KeyboardInterrupt (SIGINT)"]
