"""Elastic membership (issue 47, item 3): with `elastic: true` the synchronous family goes on
when a worker is lost and takes in workers that join, at the next step or round.

Oracles: the global batch stays B through every change and is re-split over who is there,
so sync_sgd's trajectory is single-process SGD's on B (the lr rule needs no change, and
this checks it holds), to float rounding; every step of every remaining worker is in the
records once (a round a worker was lost in runs again); the simulator's elastic run is
deterministic. Real processes for the last test: an external cluster that loses a worker
to SIGKILL and gains one started by hand.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import workbench as wb
from workbench.config import ConfigError, RunConfig
from workbench.execution.transports.threads import ThreadTransport


def _events(result, kind):
    return [e for e in result.events if e["event"] == kind]


def _each_step_once(result, workers):
    counts = result.steps.groupby(["worker", "step"]).size()
    assert (counts == 1).all()
    total = result.summary["total_steps_planned"]
    for w in workers:
        assert sorted(result.steps[result.steps.worker == w]["step"]) == list(range(total))


@pytest.mark.parametrize("scaling", ["none", "linear"])
def test_sync_sgd_losing_a_worker_follows_sgd_on_the_same_batch(scaling):
    cfg = RunConfig(algorithm="sync_sgd", cpus=3, steps=90, batch_size=48, eval_every=30, elastic=True,
                    momentum=0.9, lr=0.05, lr_scaling=scaling, base_batch=16, warmup="gradual", warmup_epochs=0.5)
    r = wb.run(cfg, cluster=ThreadTransport(fail={1: 40}), progress=False)
    assert r.status == "completed" and r.summary["steps"] == 90
    lost, regrouped = _events(r, "worker_lost"), _events(r, "regrouped")
    assert [int(e["worker"]) for e in lost] == [1] and len(regrouped) == 1
    assert regrouped[0]["message"].startswith("step 40: 3 -> 2 workers (ids [0, 1, 2] -> [0, 2]); the global batch "
                                              "of 48 re-split into slices of 24; lr unchanged")
    assert r.summary["membership"] == [{"step": 0, "workers": [0, 1, 2], "why": "start"},
                                       {"step": 40, "workers": [0, 2], "why": "lost"}]
    _each_step_once(r, [0, 2])
    ref = wb.run(cfg.replace(algorithm="sgd", cpus=1, elastic=False), progress=False)
    mine = r.steps[r.steps.worker == 0].set_index("step")
    theirs = ref.steps.set_index("step")
    np.testing.assert_array_equal(mine["lr"].to_numpy(), theirs["lr"].to_numpy())   # the rule saw one batch size
    np.testing.assert_allclose(mine["loss"].to_numpy(), theirs["loss"].to_numpy(), rtol=1e-5)
    np.testing.assert_allclose(r.params, ref.params, rtol=1e-4, atol=1e-6)   # sums split 3 then 2 ways: rounding


@pytest.mark.parametrize("algorithm, extra", [
    ("local_sgd", {"tau": 4}), ("post_local_sgd", {"tau": 4}), ("diloco", {"tau": 5}),
    ("sync_sgd", {"compression": "topk", "compression_ratio": 0.1}),
], ids=["local_sgd", "post_local_sgd", "diloco", "sync_sgd-topk"])
def test_the_family_goes_on_from_its_last_boundary(algorithm, extra):
    """A lost worker's round runs again: no step twice, none missing, for the survivors."""
    cfg = RunConfig(algorithm=algorithm, cpus=3, steps=80, batch_size=48, eval_every=20, elastic=True, **extra)
    r = wb.run(cfg, cluster=ThreadTransport(fail={2: 33}), progress=False)
    assert r.status == "completed", r.events
    (regrouped,) = _events(r, "regrouped")
    step = r.summary["membership"][1]["step"]
    assert 0 < step <= 33 and regrouped["message"].startswith(f"step {step}: 3 -> 2 workers")
    _each_step_once(r, [0, 1])
    assert (r.steps[r.steps.worker == 2]["step"] < step).all()   # the lost worker's rows past the boundary: gone
    assert all(np.isfinite(r.params))


def test_too_few_workers_fails_the_run_saying_so():
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=60, batch_size=32, elastic=True, min_workers=2)
    r = wb.run(cfg, cluster=ThreadTransport(fail={1: 20}), progress=False)
    assert r.status == "failed"
    (few,) = _events(r, "too_few_workers")
    assert "1 worker(s) left at step 20, fewer than min_workers (2)" in few["message"]


def test_without_elastic_a_lost_worker_still_fails_the_run():
    r = wb.run(RunConfig(algorithm="sync_sgd", cpus=3, steps=60, batch_size=48), cluster=ThreadTransport(fail={1: 20}),
               progress=False)
    assert r.status == "failed" and not _events(r, "regrouped")


@pytest.mark.parametrize("algorithm", ["sync_sgd", "local_sgd", "diloco"])
def test_a_simulated_run_loses_and_gains_workers_deterministically(algorithm):
    """`fail_worker` and `join_worker` on the virtual clock: the joiner starts at a boundary
    at or after its time, from a member's state; the same config twice is the same run."""
    base = RunConfig(algorithm=algorithm, cpus=4, steps=160, batch_size=64, eval_every=40, tau=4, simulate=True,
                     jitter=0.1, elastic=True)
    span = wb.run(base.replace(elastic=False), progress=False).summary["wall_time_s"]
    cfg = base.replace(fail_worker=f"1@{0.3 * span!r}", join_worker=f"3@{0.6 * span!r}")
    a, b = wb.run(cfg, progress=False), wb.run(cfg, progress=False)
    assert a.status == "completed" and a.summary["sim_path"] == "per worker"
    whys = [(m["why"], m["workers"]) for m in a.summary["membership"]]
    assert whys == [("start", [0, 1, 2]), ("lost", [0, 2]), ("joined", [0, 2, 3])]
    joined = a.summary["membership"][2]["step"]
    (event,) = _events(a, "worker_joined")
    assert int(event["worker"]) == 3 and event["time"] >= 0.6 * span and f"joined at step {joined}" in event["message"]
    assert a.steps[a.steps.worker == 3]["step"].min() == joined
    _each_step_once(a, [0, 2])
    assert a.steps.equals(b.steps) and np.array_equal(a.params, b.params)


@pytest.mark.parametrize("changes, field", [
    ({"algorithm": "async_sgd", "elastic": True}, "elastic"),
    ({"algorithm": "sync_sgd", "min_workers": 2}, "min_workers"),
    ({"algorithm": "sync_sgd", "elastic": True, "min_workers": 3}, "min_workers"),
    ({"algorithm": "sync_sgd", "simulate": True, "cpus": 4, "join_worker": "2@1"}, "join_worker"),
    ({"algorithm": "sync_sgd", "simulate": True, "cpus": 4, "elastic": True, "join_worker": "0@1"}, "join_worker"),
    ({"algorithm": "sync_sgd", "elastic": True, "join_worker": "1@1"}, "join_worker"),
])
def test_elastic_settings_that_cannot_work_are_one_line(changes, field):
    with pytest.raises(ConfigError) as info:
        RunConfig(**changes)
    assert info.value.field == field and "\n" not in str(info.value)


# ------------------------------------------------------------------------------ an external cluster
@pytest.mark.slow
@pytest.mark.cluster
def test_an_external_cluster_loses_a_worker_and_gains_another(tmp_path):
    from test_signals import DASK, ENV, ExternalCluster
    cluster = ExternalCluster(workers=2)
    try:
        cfg = RunConfig(algorithm="sync_sgd", cpus=2, steps=100_000, batch_size=64, eval_every=10_000, elastic=True,
                        scheduler=cluster.address, out=str(tmp_path / "run"), checkpoint_every="none")
        seen = {"rows": 0}
        done = threading.Event()

        def on_record(batch):
            seen["rows"] += batch.n_steps

        def chaos():
            while seen["rows"] < 20:   # binned live rows: a few thousand steps
                time.sleep(0.05)
            os.killpg(cluster.workers[1].pid, signal.SIGKILL)       # no nanny: gone for good
            cluster.workers.append(subprocess.Popen(
                [DASK, "worker", cluster.address, "--nthreads", "1", "--name", "late", "--no-dashboard", "--host",
                 "127.0.0.1"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            done.set()

        threading.Thread(target=chaos, daemon=True).start()

        def stop():   # once the newcomer has run a while: enough seen
            s = seen.get("joined_at")
            return s is not None and time.time() - s > 3

        def watch(batch):
            on_record(batch)
            if any(r.get("event") == "worker_joined" for r in batch.records()) and "joined_at" not in seen:
                seen["joined_at"] = time.time()
        r = wb.run(cfg, on_record=watch, should_stop=stop, progress=False)
    finally:
        cluster.close()
    assert done.is_set() and r.status == "stopped", r.events
    kinds = [e["event"] for e in r.events if e["event"] in ("worker_lost", "regrouped", "worker_joined")]
    # the newcomer is taken in at a regroup of its own, or at the loss's when it is already there by then
    assert kinds in (["worker_lost", "regrouped", "worker_joined", "regrouped"],
                     ["worker_lost", "worker_joined", "regrouped"]), r.events
    members = [m["workers"] for m in r.summary["membership"]]
    assert members in ([[0, 1], [0], [0, 2]], [[0, 1], [0, 2]]), members
    names = {w["id"]: w["name"] for w in r.summary["workers"]}
    assert names == {0: "w0", 2: "late"}
    for e in r.events:
        if e["event"] in ("worker_lost", "regrouped", "worker_joined"):
            print(f"{e['time']:7.2f}s  {e['event']:<14} {e['message']}")
    counts = r.steps.groupby(["worker", "step"]).size()
    assert (counts == 1).all()
