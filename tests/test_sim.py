"""The simulated cluster (workbench.sim): real maths, virtual time, determinism, faults.

Oracles: single-process SGD (`sgd` on one worker) for the synchronous algorithms, the cost
formulas (`sim.costs`, `costmodel`) for the virtual step times, a second identical run
for determinism, and the engine's status rule for faults.
"""
from __future__ import annotations

import numpy as np
import pytest

from workbench.analysis.costmodel import ring_allreduce_time
from workbench.api import run
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import run_threads
from workbench.problem import Problem
from workbench.sim.clock import Scheduler
from workbench.sim.costs import make_costs

# A named CPU profile: the same virtual times in every process (the "local" profile is
# calibrated by timing this machine, so it differs from one process to the next).
CPU = "power8"


def sim(algorithm: str, cpus: int = 4, **kw) -> RunConfig:
    base = dict(algorithm=algorithm, cpus=cpus, batch_size=16 * max(cpus, 1), steps=24, seed=3, lr=0.05,
                simulate=True, cpu_device=CPU, eval_every=8)
    base.update(kw)
    return RunConfig(**base)


def costs_of(config: RunConfig):
    problem = Problem.from_config(config)
    data, model = problem.data, problem.model
    kinds = ["gpu"] * (config.gpus if isinstance(config.gpus, int) else 0) + ["cpu"] * config.cpus
    return make_costs(config, model, kinds, data), model


# ------------------------------------------------------------------------------ the clock
def test_scheduler_runs_workers_in_virtual_time_order():
    sched, log = Scheduler(), []

    def worker(delays):
        def body(proc):
            for d in delays:
                proc.charge(d)
                log.append((round(proc.now(), 9), proc.name))
        return body

    sched.spawn(worker([3.0, 3.0]), "slow")
    sched.spawn(worker([1.0, 1.0, 1.0, 4.0]), "fast")
    sched.run()
    assert [t for t, _ in log] == sorted(t for t, _ in log)
    # a tie goes to the worker already running (no switch is needed to keep time order)
    assert log == [(1.0, "fast"), (2.0, "fast"), (3.0, "fast"), (3.0, "slow"), (6.0, "slow"), (7.0, "fast")]


# ------------------------------------------------------------------------------ maths
@pytest.mark.parametrize("workers", [1, 3, 8])
def test_simulated_sync_sgd_follows_single_process_sgd(workers):
    config = sim("sync_sgd", cpus=workers, batch_size=48, momentum=0.9)
    ref = run_threads(config.replace(algorithm="sgd", simulate=False, cpu_device="local"))
    res = run(config)
    assert res.summary["status"] == "completed"
    np.testing.assert_allclose(res.params, ref.params, rtol=0, atol=2e-6)
    mine = res.steps[res.steps.worker == 0].loss.to_numpy()
    np.testing.assert_allclose(mine, ref.steps.loss.to_numpy()[:len(mine)], rtol=1e-5)


def test_simulated_cgdp_has_sync_sgds_trajectory():
    config = sim("cgdp", cpus=0, gpus=3, batch_size=48, device="p100", network="pcie3", momentum=0.9)
    res = run(config)
    ref = run_threads(RunConfig(**{**config.to_dict(), "algorithm": "sgd", "simulate": False, "gpus": 0,
                                       "cpus": 1, "device": None, "network": None, "cpu_device": "local"}))
    assert res.summary["status"] == "completed"
    np.testing.assert_allclose(res.params, ref.params, rtol=0, atol=2e-6)


@pytest.mark.parametrize("algorithm", ["async_sgd", "hogwild_sgd", "easgd", "async_easgd", "ltfb", "sync_easgd"])
def test_the_same_seed_gives_bitwise_the_same_run(algorithm):
    extra = {"trainers": 2, "round_size": 6} if algorithm == "ltfb" else {}
    config = sim(algorithm, jitter=0.3, **extra)
    a, b = run(config), run(config)
    assert a.summary["status"] == "completed"
    assert a.steps.equals(b.steps)
    assert a.evals.equals(b.evals)          # in time order, however the live batches arrived
    assert a.tournaments.equals(b.tournaments)
    np.testing.assert_array_equal(a.params, b.params)


def test_async_staleness_comes_from_the_timing():
    # Equal devices, no jitter: the P workers push in lock step, so between a worker's
    # fetch and its next push the other P-1 pushes land (after the first round).
    res = run(sim("async_sgd", cpus=4, steps=12))
    late = res.steps[res.steps.step >= 2]
    assert late.staleness.mean() == pytest.approx(3.0, abs=0.1)
    # Stragglers: staleness spreads out, and differs from the lock-step value.
    jit = run(sim("async_sgd", cpus=4, steps=12, jitter=0.5))
    assert jit.steps.staleness.nunique() > 2


# ------------------------------------------------------------------------------ virtual time
def test_sync_step_time_is_compute_plus_the_ring_allreduce():
    config = sim("sync_sgd", cpus=4, network="10GbE", eval_every=1000)   # (an evaluation's small exchange costs time)
    costs, model = costs_of(config)
    res = run(config)
    step_s = costs.compute(0, 16) + ring_allreduce_time(4, costs.nbytes(model.n_params + 2 + 2 * 4),
                                                       costs.network.alpha, costs.network.beta)
    times = res.steps[res.steps.worker == 0].time.to_numpy()
    np.testing.assert_allclose(np.diff(times), step_s, rtol=1e-9)
    # the run ends with the last step and the final evaluation's small exchange
    assert times[-1] < res.summary["wall_time_s"] < times[-1] + 2 * step_s
    assert res.summary["simulated"] is True and res.summary["network"] == "10GbE"
    assert res.summary["sim_wall_s"] > 0


def test_timing_model_charges_the_published_network():
    small = run(sim("sync_sgd", cpus=2, gpus=0, network="10GbE", steps=4))
    alex = run(sim("sync_sgd", cpus=2, gpus=0, network="10GbE", steps=4, timing_model="alexnet"))
    # AlexNet: ~61M parameters and ~1 GFLOP per sample against the digits MLP's ~10k.
    assert alex.summary["wall_time_s"] > 1000 * small.summary["wall_time_s"]
    np.testing.assert_array_equal(alex.params, small.params)   # the maths is the configured model's
    assert alex.summary["timing_model"] == "alexnet"


def test_parameter_server_serialises_requests():
    # One server: every push takes the gradient in, updates, sends the parameters out,
    # one request at a time, so throughput is capped at one push per server time
    # whatever P is (the SC'17 point about the original EASGD's master).
    config = sim("async_sgd", cpus=16, network="10GbE", timing_model="alexnet", steps=6)
    costs, _ = costs_of(config)
    per_push = 2 * costs.vector_bytes * costs.network.beta + costs.host_update()
    few = run(config.replace(cpus=2, batch_size=32))
    many = run(config)
    cap = 16 / per_push                      # samples per second at one push per server time
    assert many.summary["samples_per_s"] <= cap * 1.001
    assert many.summary["samples_per_s"] > 0.9 * cap                  # saturated
    assert many.summary["samples_per_s"] < 1.2 * few.summary["samples_per_s"]


# ------------------------------------------------------------------------------ faults
def test_a_killed_worker_fails_a_synchronous_run_cleanly():
    config = sim("sync_sgd", cpus=4, fail_worker="2@0.0005", steps=200)
    res = run(config)
    assert res.summary["status"] == "failed"
    assert "2" in res.summary["lost_workers"]
    assert len(res.steps) > 0                      # what was computed before is kept
    assert res.steps.time.max() <= 0.0005 + 1e-3


def test_a_failed_runs_records_stop_at_its_failure():
    """A synchronous run a fault ended is over: a second fault scheduled later never fires in
    it. Before, the peers left blocked by the first kill were only told so once nothing else
    was scheduled, and the second kill was: the virtual clock ran on to it, so worker 2 was
    recorded lost at 500 ms of a run that ended at 2 ms (its `worker_lost` event, its
    `lost_workers` entry, "2 of 4 workers lost", the peers' "gone (virtual time 0.5 s)").
    Oracle: the same run with the first fault alone."""
    one = run(sim("sync_sgd", cpus=4, fail_worker="1@0.0005", steps=200), progress=False)
    two = run(sim("sync_sgd", cpus=4, fail_worker="1@0.0005,2@0.5", steps=200), progress=False)
    assert two.summary["status"] == one.summary["status"] == "failed"
    assert two.summary["lost_workers"] == one.summary["lost_workers"] == {"1": "virtual worker 1"}
    end = two.summary["wall_time_s"]
    assert end == one.summary["wall_time_s"] and end < 0.01
    assert two.steps.equals(one.steps)
    events = two.summary["events"]
    assert [e for e in events if e["time"] > end] == [], events
    said = lambda evs: sorted((e["event"], str(e["worker"]), e["message"]) for e in evs)   # noqa: E731
    assert said(events) == said(one.summary["events"])   # (the order of events at one virtual time: the monitor's)
    assert not any("0.5 s" in e["message"] or "500 ms" in e["message"] for e in events), events


@pytest.mark.parametrize("algorithm", ["async_sgd", "easgd"])
def test_a_killed_worker_leaves_an_asynchronous_run_going(algorithm):
    res = run(sim(algorithm, cpus=4, fail_worker="1@0.0003", steps=60))
    assert res.summary["status"] == "completed"
    steps = res.steps
    assert steps[steps.worker == 0].step.max() == 59
    # the dead worker's log up to the kill is kept (whatever the live batches' wall timing)
    dead = steps[steps.worker == 1]
    assert 0 < len(dead) < 60 and dead.time.max() <= 0.0003
    again = run(sim(algorithm, cpus=4, fail_worker="1@0.0003", steps=60))
    assert again.steps.equals(steps)
    assert res.summary["lost_workers"] == {"1": "virtual worker 1"}
    lost = [e for e in res.summary["events"] if e["event"] == "worker_lost"]
    assert len(lost) == 1 and lost[0]["time"] == pytest.approx(0.0003)     # virtual seconds, not wall
    assert lost[0]["message"].endswith("was lost at 0.30 ms")   # in the unit that shows it (was "at 0.0s")


@pytest.mark.parametrize("algorithm", ["async_sgd", "diloco"])
def test_a_killed_virtual_workers_loss_carries_its_virtual_time_from_the_moment_it_is_seen(algorithm, monkeypatch):
    """The monitor polls from its own thread: whenever it sees a simulated worker vanish, the
    virtual second of the kill is already there. It was set a moment after the loss (by the
    kill's callback), so a poll in between put the monitor's wall clock on the event:
    faults_and_recovery's full run printed DiLoCo's worker "lost at 13.47 s" of a 0.9 s run."""
    from workbench.execution.transports.base import Reports
    seen: list[tuple[int, float | None]] = []
    vanish = Reports.vanish

    def watched(self, rank, *args, **kw):   # what a poll right after the loss would read
        vanish(self, rank, *args, **kw)
        seen.append((rank, self.lost_at.get(rank)))
    monkeypatch.setattr(Reports, "vanish", watched)
    extra = {"tau": 4, "elastic": True} if algorithm == "diloco" else {}
    res = run(sim(algorithm, cpus=4, fail_worker="1@0.0003", steps=60, **extra))
    assert seen == [(1, pytest.approx(0.0003))]
    lost = [e for e in res.summary["events"] if e["event"] == "worker_lost"]
    assert len(lost) == 1 and lost[0]["time"] == pytest.approx(0.0003)


def test_simulate_refuses_a_cluster():
    with pytest.raises(ConfigError, match="simulate"):
        run(sim("sync_sgd"), cluster="threads")


def test_a_measured_link_replaces_the_named_network():
    from workbench.analysis.costmodel import Network
    from workbench.sim.run import run_simulated
    config = sim("sync_sgd", cpus=4, network="10GbE", eval_every=1000)
    link = Network("measured", 5e-6, 1 / 14e9)
    costs, model = costs_of(config)
    res = run_simulated(config, link=link)
    step_s = costs.compute(0, 16) + ring_allreduce_time(4, costs.nbytes(model.n_params + 2 + 2 * 4), link.alpha,
                                                       link.beta)
    times = res.steps[res.steps.worker == 0].time.to_numpy()
    np.testing.assert_allclose(np.diff(times), step_s, rtol=1e-9)
    assert res.summary["network"].startswith("measured (alpha 5 us, 14 GB/s")


def test_one_worker_on_shared_memory_is_charged_the_rings_copy():
    # The real shared-memory ring (comm/ring.py) copies even a group of one's buffer into its
    # own: one pass through host memory, 0.16-0.2 ms for the 535k MLP measured here. Oracle:
    # the buffer's bytes (the vector and the sync tail) over HOST_MEMORY_BYTES_PER_S; another
    # network's group of one is charged nothing (nothing is sent).
    from workbench.comm.network import HOST_MEMORY_BYTES_PER_S
    cfg = sim("sync_sgd", cpus=1, steps=6, eval_every=10**9, network="shm")
    costs, _ = costs_of(cfg)
    got = run(cfg).steps["comm_s"].to_numpy()
    want = costs.vector_bytes / HOST_MEMORY_BYTES_PER_S     # the buffer's tail (loss, flags) adds a few floats
    assert got == pytest.approx(np.full(len(got), want), rel=0.01)
    other = run(cfg.replace(network="10GbE")).steps["comm_s"].to_numpy()
    assert other == pytest.approx(np.zeros(len(other)), abs=1e-12)


def _real_shm_pair_meetings(capacity: int, op=lambda c, n: c.allreduce(np.ones(n, np.float32))) -> int:
    """Barrier meetings one allreduce (or `op`) of a pair on a real `ShmComm` takes (each `_arrive`
    is one: its phase counter), two threads standing for the two worker processes."""
    import threading
    import uuid

    from workbench.comm.shm import ShmComm, allreduce_nbytes, create_segment, unlink_segment
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(2, capacity))
    comms = [ShmComm(name, r, 2, capacity) for r in range(2)]
    try:
        before = [c.phase for c in comms]
        threads = [threading.Thread(target=op, args=(c, capacity)) for c in comms]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        after = [c.phase for c in comms]
        assert after[0] - before[0] == after[1] - before[1]
        return after[0] - before[0]
    finally:
        for c in comms:
            c.close()
        unlink_segment(name)


@pytest.mark.parametrize("model, kw", [("softmax", {}), ("mlp", {"hidden": [512]})], ids=["small", "large"])
def test_a_simulated_pair_on_shared_memory_meets_as_often_as_the_real_shm_comm(model, kw):
    # The simulator charged every allreduce on the shm network with the ring's 2 (P-1) latencies:
    # 2 for a pair, where a real pair with a small segment meets once (`shm.pair_path`). Oracle:
    # the meetings a real ShmComm pair makes on a segment of the run's capacity (the vector and the
    # sync tail: `AlgorithmSpec.comm_elems`), counted, times the link's latency, plus the vector's
    # bytes once (each worker's copy in and share of the sum); the two CPU workers compute alike,
    # so a step's comm_s is the exchange alone.
    from workbench.comm.network import NETWORKS
    from workbench.config.registry import specs
    cfg = sim("sync_sgd", cpus=2, steps=4, eval_every=10**9, network="shm", model=model, **kw)
    costs, m = costs_of(cfg)
    capacity = specs()["sync_sgd"].comm_elems(m.n_params, 2)
    meetings = _real_shm_pair_meetings(capacity)
    assert meetings == (1 if model == "softmax" else 2)        # the two paths, both exercised
    link = NETWORKS["shm"]
    want = meetings * link.alpha + costs.nbytes(capacity) * link.beta
    got = run(cfg).steps["comm_s"].to_numpy()
    assert got == pytest.approx(np.full(len(got), want), rel=1e-9)


@pytest.mark.parametrize("hidden", [[16], [512]], ids=["small", "large"])
def test_a_simulated_pairs_gather_and_gossip_on_shared_memory_meet_as_the_real_shm_comm(hidden):
    # The same for the other exchanges through the slots: a compressed allgather and gossip's
    # neighbour exchange were charged as network messages ((P-1) and d latencies); on shm they meet
    # as often as the real ShmComm's allgather and neighbour_exchange (counted) and read the others'
    # payloads, the peers' vectors.
    from workbench.comm.network import NETWORKS
    from workbench.config.registry import specs
    cfg = sim("sync_sgd", cpus=2, network="shm", model="mlp", hidden=hidden)
    costs, m = costs_of(cfg)
    capacity = specs()["sync_sgd"].comm_elems(m.n_params, 2)
    gather = _real_shm_pair_meetings(capacity, lambda c, n: c.allgather(np.ones(64, np.uint8)))
    gossip = _real_shm_pair_meetings(capacity, lambda c, n: c.neighbour_exchange(np.ones(n, np.float32), [1 - c.rank]))
    assert gather == gossip == (1 if capacity <= 16384 else 2)
    link = NETWORKS["shm"]
    assert costs.compressed_s(2, 64.0, gather=True) == pytest.approx(gather * link.alpha + 64.0 * link.beta, rel=1e-12)
    vec = costs.nbytes(m.n_params)
    assert costs.neighbour_s(2, 1, m.n_params) == pytest.approx(gossip * link.alpha + vec * link.beta, rel=1e-12)


# ------------------------------------------------------------------------------ memory
@pytest.mark.parametrize("algorithm, kw", [("sync_sgd", {}), ("diloco", {"tau": 2, "optimizer": "adamw"}),
                                           ("sync_sgd", {"compression": "topk", "compression_ratio": 0.1})],
                         ids=["lockstep", "diloco", "compressed"])
def test_a_simulated_runs_workers_are_freed_when_it_ends(algorithm, kw):
    """The virtual workers' objects refer to one another in cycles; with the cyclic collector
    left to its own schedule (here: off) a notebook's next run started on top of the last
    one's (diloco_lm's 64-GPU runs, about 200 MB each). The run frees them before it returns."""
    import gc

    from workbench.algorithms.base import Algorithm, WorkerContext
    gc.collect()
    gc.disable()
    try:
        result = run(sim(algorithm, **kw))
        alive = [type(o).__name__ for o in gc.get_objects() if isinstance(o, (Algorithm, WorkerContext))]
    finally:
        gc.enable()
    assert result.summary["status"] == "completed"
    assert alive == []
