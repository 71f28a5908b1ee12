"""Validation of the simulated cluster (issue 11, deliverable 4), beyond tests/test_sim.py.

* maths: simulated synchronous algorithms (sync_sgd, sync_easgd, cgdp) and round-robin
  EASGD follow their oracles (single-process SGD, the plain NumPy loops of
  tests/test_easgd.py) at large worker counts, and compute what the real thread
  transport computes;
* time: the simulator and the cost model (`costmodel.step_prediction`) agree on
  throughput where both describe the same exchange, and differ by a stated term where
  they do not;
* reality: with this machine's calibrated core (`cpu_device="local"`), simulated 1- and
  2-worker runs are compared with real runs on a local Dask cluster of worker processes
  (slow; the speed bound is asserted only on a quiet machine, see the test);
* a pinned run: the virtual timeline of a few asynchronous runs is fixed, so changes made
  for speed in `sim.clock` / `sim.transport` must leave every run bit for bit as it was.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from test_easgd import elastic_reference, sync_reference  # the EASGD oracles (tests/ is on sys.path)

from workbench.api import run
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import run_threads
from workbench.sim.validate import simulator_vs_cost_model

CPU = "power8"   # a named profile: the same virtual times in every process


def sim(algorithm: str, cpus: int = 4, **kw) -> RunConfig:
    base = dict(algorithm=algorithm, dataset="digits", model="mlp", cpus=cpus, batch_size=16 * max(cpus, 1),
                steps=24, seed=3, lr=0.05, simulate=True, cpu_device=CPU, eval_every=10**9)
    base.update(kw)
    return RunConfig(**base)


def real(config: RunConfig) -> RunConfig:
    """The same run for a real transport (no simulation fields)."""
    return config.replace(simulate=False, cpu_device="local", network=None, device=None, timing_model=None,
                          jitter=0.0)


# ------------------------------------------------------------------------------ maths at scale
@pytest.mark.parametrize("workers", [16, 64])
def test_simulated_sync_sgd_follows_sgd_at_scale(workers):
    config = sim("sync_sgd", cpus=workers, batch_size=2 * workers, momentum=0.9, jitter=0.5)
    ref = run_threads(real(config).replace(algorithm="sgd"))
    got = run(config)
    assert got.summary["status"] == "completed"
    # stragglers change the virtual times, never the maths of a synchronous algorithm
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=2e-6)


def test_simulated_sync_sgd_computes_what_the_thread_transport_computes():
    # the same algorithm classes and loop, the same sum in rank order: bit for bit
    config = sim("sync_sgd", cpus=4, momentum=0.9)
    np.testing.assert_array_equal(run(config).params, run_threads(real(config)).params)


@pytest.mark.parametrize("workers", [4, 64])
def test_simulated_sync_easgd_follows_its_reference_loop(workers):
    config = sim("sync_easgd", cpus=workers, tau=4, lr=0.1, jitter=0.3)
    got = run(config)
    assert got.summary["status"] == "completed"
    np.testing.assert_allclose(got.params, sync_reference(real(config), workers), rtol=0, atol=1e-6)


@pytest.mark.parametrize("workers", [8, 32])
def test_simulated_cgdp_follows_sgd_at_scale(workers):
    config = sim("cgdp", cpus=0, gpus=workers, batch_size=4 * workers, device="p100", network="pcie3",
                 momentum=0.9)
    got = run(config)
    ref = run_threads(real(config).replace(algorithm="sgd", gpus=0, cpus=1))
    assert got.summary["status"] == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=2e-6)


@pytest.mark.parametrize("workers", [4, 32])
def test_simulated_round_robin_easgd_takes_turns_like_its_reference(workers):
    # Strict turns fix the centre's sequence whatever the timing (stragglers included);
    # rank 0 returns the centre as it is when rank 0 finishes: one of the last round's.
    config = sim("easgd", cpus=workers, tau=3, lr=0.1, jitter=0.5)
    got = run(config)
    centres = elastic_reference(real(config), workers=workers)
    assert got.summary["status"] == "completed"
    assert min(np.abs(got.params - c).max() for c in centres[-workers:]) < 1e-6


# ------------------------------------------------------------------------------ simulator vs cost model
def test_simulator_and_cost_model_agree_on_throughput():
    # AlexNet timing on 10GbE, 16 rows a worker: the exchange is a real share of the step.
    # Synchronous: the same ring formula, equal but for the few floats (loss, flags) the
    # simulated allreduce also carries: 1e-5. Servers at 16 workers are saturated: both
    # say one update per (2 n beta + update); the simulator overlaps the 2 alpha of each
    # round trip with the next request (1e-4 here), and its run starts unsaturated (the
    # first of 40 exchanges): 1%.
    table = simulator_vs_cost_model(AGREE)
    for row in table.to_dict("records"):
        rel = 1e-5 if row["algorithm"].startswith("sync") else 0.01
        assert row["simulated"] == pytest.approx(row["cost_model"], rel=rel), row
        if row["workers"] > 1:
            assert row["comm_share"] > 0.2, row        # the exchange matters in what is compared


def test_simulator_and_cost_model_agree_on_ltfb_with_several_workers_a_trainer():
    # The cost model charged LTFB as one worker a trainer (no allreduce; 2.2-8.7x the simulator's
    # samples/s with 2-8 trainers of 1-4 workers here), the comparison gave it neither the run's
    # round_size nor its tournament set, and the simulator did not charge the leader's scoring
    # of the two models (a forward pass over 256 rows each: 0.35 s of AlexNet on power8, more
    # than the round's five steps). Now both charge the trainer's allreduce every step, the
    # tournament's two calls, the scoring and the broadcast every round. 2 trainers of 2 and
    # of 4 workers: the simulator's first tournament queues the second deposit behind the
    # first (n beta = 0.22 s, once in the run's 8 rounds): 1.7-1.8% slower. 8 trainers of one
    # worker: the one mailbox saturates (16 models through its link a round, 3.5 s against the
    # trainers' 1.2 s): both say so, 1% apart. (Between, 4 trainers of 2 workers, the
    # simulator's queue at the mailbox makes it 10% slower: not modelled, docs/simulator.md.)
    cases = [("ltfb", 4, {"trainers": 2, "round_size": 5}), ("ltfb", 8, {"trainers": 2, "round_size": 5}),
             ("ltfb", 8, {"trainers": 8, "round_size": 5})]
    table = simulator_vs_cost_model(cases)
    for row in table.to_dict("records"):
        assert row["simulated"] == pytest.approx(row["cost_model"], rel=0.025), row
        assert row["comm_share"] > 0.5, row        # the exchange is most of what is compared
    assert table["bottleneck"].tolist() == ["comm", "comm", "server"]


def test_simulator_and_cost_model_agree_on_powersgd_charged_as_gpt2():
    # Charged as GPT-2 124M (the small GPT's maths on markov_text): both take GPT-2's own rank-4
    # payload (its tensors) in two ring allreduces, and PowerSGD's own work a step (8.05 GB of
    # passes, `SimCosts.compress_s`) with the step's compute; equal but for the tail's few floats.
    rank4 = {"compression": "powersgd", "compression_rank": 4}
    table = simulator_vs_cost_model([("sync_sgd", 4, rank4)], per_worker=2,
                                    timing_model="gpt2-124m", model="gpt", dataset="markov_text")
    for row in table.to_dict("records"):
        assert row["simulated"] == pytest.approx(row["cost_model"], rel=1e-4), row


AGREE = (("sync_sgd", 1, {}), ("sync_sgd", 16, {}), ("sync_sgd", 64, {}), ("sync_easgd", 16, {"tau": 4}),
         ("async_sgd", 16, {}), ("async_easgd", 16, {"tau": 4}), ("easgd", 16, {"tau": 4}))


def test_an_unsaturated_server_costs_its_update_in_the_simulator_only():
    # One worker: the cost model's round trip is 2 (alpha + n beta); the simulator's reply
    # also waits for the server's update (3 passes over the parameters in host memory).
    # The difference per step is exactly that update: the cost model leaves it out.
    # (64 rows: the step is long enough that one worker does not saturate the server.)
    row = simulator_vs_cost_model([("async_sgd", 1, {"rows": 64})]).iloc[0]
    assert row["bottleneck"] != "server"
    assert 64 / row["simulated"] - 64 / row["cost_model"] == pytest.approx(row["server_update_s"], rel=1e-6)


# ------------------------------------------------------------------------------ pinned runs
# The virtual timeline (who did which step when, with what staleness) of asynchronous
# runs with stragglers: depends on the driver's event order only, not on BLAS, so it is
# pinned exactly; the parameters (BLAS rounding) to 1e-5. Recorded with and without the
# batched round-robin wake-ups (sim/roles.py: SimServerState.changed): the same.
# A deliberate change of the costs or profiles moves them: re-pin it, having checked
# that the change's parent and a pure speed change give the same timeline.
# easgd re-pinned on 2026-12-04 (`base.EndsOnServer`): a worker now retires at the end of its
# last step, not after rank 0's last evaluation, so workers 3-5 no longer wait out rank 0's
# skipped turn (they end 5.5-11 us earlier, no one later), and the returned centre is the one
# after every worker's last exchange. async_sgd and async_easgd (first come, first served) kept
# their timelines and, to 1e-5, their parameters.
# ltfb re-pinned on 2026-12-07: the simulator charges the leader's scoring of the two models
# (`SimCosts.score`, 2 x 9.3 us at 64 rows); with that charge set to 0 the old timeline comes back
# bit for bit, and the parameters are unchanged.
PINNED = {
    "easgd": ({}, "c516b22ca80134ad", 1290.060791015625),
    "ltfb": ({"trainers": 6, "round_size": 6, "tournament_size": 64}, "d6353add1d57ed1b", 1338.32666015625),
    "async_easgd": ({}, "35ab2ecedd09a7c9", 1290.0816650390625),
    "async_sgd": ({}, "c1d98efc84d7023e", 1337.88818359375),
}


@pytest.mark.parametrize("algorithm", sorted(PINNED))
def test_a_pinned_run_is_unchanged(algorithm):
    knobs, timeline, abs_sum = PINNED[algorithm]
    got = run(RunConfig(algorithm=algorithm, cpus=6, batch_size=96, steps=24, seed=3, lr=0.05, simulate=True,
                        cpu_device=CPU, eval_every=8, jitter=0.3, **knobs))
    cols = ["worker", "step", "time", "staleness", "compute_s", "comm_s", "wait_s"]
    assert hashlib.sha256(got.steps[cols].to_numpy(dtype=float).tobytes()).hexdigest()[:16] == timeline
    assert float(np.abs(got.params).sum()) == pytest.approx(abs_sum, rel=1e-5)


# ------------------------------------------------------------------------------ this machine
# What holds on any machine: the comparison runs end to end on a real Dask cluster of
# worker processes, both rows complete, every time is a positive finite number, `error` is
# simulated / real - 1 (the one definition the benchmark prints), and the simulated runs
# are charged the link measured on this machine. Whether the simulator's samples/s are
# right is a speed measurement of two moments (the core calibrated, then the real runs),
# so it is judged by the benchmark, `python -m workbench bench --sim-vs-real`, which prints
# the load and says when the machine was too busy to judge. Here the bound (simulated
# between 0.8x and 1.6x real: optimistic by the loop's Python, the client's monitor and
# scheduling noise, pessimistic only by noise) is asserted for one worker, and only when
# the machine was quiet by the benchmark's own rule (`validate.quiet_enough`); otherwise
# the table is printed with the load. (CI of stop 38, load 1.4 on 2 cores from the suite itself: real compute
# 5.7 / 7.3 ms a step against 4.2 / 4.4 ms calibrated a moment before, 1.49x / 1.83x.)
@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_simulated_runs_are_compared_with_this_machines_real_runs(client):
    import os

    from workbench.sim.validate import quiet_enough, real_vs_simulated
    before = os.getloadavg()
    table = real_vs_simulated(client, workers=(1, 2), steps=150)
    after = os.getloadavg()
    others = table["other_cores"]              # nan only where /proc/stat is missing
    assert ((others >= 0) | others.isna()).all(), table.to_string()
    print(table.round(3).to_string())
    assert table["workers"].tolist() == [1, 2]
    assert (table["status"] == "completed").all()
    times = table[["real_samples_per_s", "sim_samples_per_s", "real_compute_ms", "sim_compute_ms",
                   "real_comm_ms", "sim_comm_ms"]].to_numpy(dtype=float)
    assert np.isfinite(times).all() and (times > 0).all(), table.to_string()
    ratio = table["sim_samples_per_s"] / table["real_samples_per_s"]
    np.testing.assert_allclose(table["error"], ratio - 1, rtol=1e-12, atol=0)
    assert table["link"].str.startswith("measured").all() and np.isfinite(table["link_held_out_error"]).all()
    assert (0 < table["link_gbps_low"]).all() and (table["link_gbps_low"] <= table["link_gbps_high"]).all()
    share = table["client_cpu_share"]          # the client monitors every real run: some CPU, under the cores'
    assert ((share > 0) & (share < (os.cpu_count() or 1))).all(), table.to_string()
    if quiet_enough(before, after, others=float(others.max())):
        # one worker only: one round of two workers on this 2-core VM moved from -5% to +27%
        # within minutes on quiet runs (2026-12-04), so their bound is the benchmark's median
        # of rounds, printed, not asserted here
        assert 0.8 < ratio.iloc[0] < 1.6, table.to_string()
    else:
        print(f"load average {before[0]:.2f} / {before[1]:.2f} before, {after[0]:.2f} after on "
              f"{os.cpu_count()} cores: too busy to judge the simulator's speed (ratios {ratio.round(2).tolist()})")


def test_the_calibration_beside_real_runs_carries_the_hosts_demand_and_the_spread(tmp_path, monkeypatch):
    # bench --sim-vs-real times this core beside its real runs (not the cache), with the
    # client's measured CPU as the host's other demand, and gives the simulated run the spread
    # of the timed calls as jitter: the numbers it was given are the ones the run is charged
    import json

    from workbench.problem import Problem
    from workbench.sim import calibration
    from workbench.sim.costs import make_costs
    from workbench.sim.run import run_simulated
    from workbench.sim.validate import _as_jitter, _time_this_core_now
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    config = sim("sync_sgd", cpus=2, cpu_device="local", network="shm")
    path, spread = _time_this_core_now(config, host_demand=0.08)
    record = json.loads(open(path).read())
    assert record["host_demand_cores"] == 0.08 and record["method"] == calibration.CALIBRATION_METHOD
    # the co-run timing is what two are charged; its spread can pass 1 on a busy machine (a few
    # calls waiting for a core: seen at 1.12 beside another test process), `_as_jitter` caps it
    assert spread == record["co_run"]["2"]["cv"] and spread >= 0
    problem = Problem.from_config(config)
    ran = config.replace(calibration=path, jitter=_as_jitter(spread))
    devices = make_costs(ran, problem.new_model(), ["cpu", "cpu"], problem.data).devices
    assert [d.rate for d in devices] == [record["co_run"]["2"]["rate_flops"] * calibration.host_share(record, 2)] * 2
    assert calibration.host_share(record, 2) == pytest.approx(0.96)
    out = run_simulated(ran)
    assert out.summary["status"] == "completed" and out.summary["jitter"] == ran.jitter
    assert out.summary["calibration"]["host_demand_cores"] == 0.08
    one_path, one_spread = _time_this_core_now(config.replace(cpus=1, batch_size=16), host_demand=0.08)
    one = json.loads(open(one_path).read())
    assert "co_run" not in one and one_spread == one["cv"] and calibration.host_share(one, 1) == 1.0


def test_quiet_enough_is_the_benchmarks_rule():
    from workbench.sim.validate import QUIET_LOAD, quiet_enough
    low, high = 0.9 * QUIET_LOAD * 2, 1.1 * QUIET_LOAD * 2
    assert quiet_enough((low, low, 9.0), (low, 9.0, 9.0), cores=2)     # the 15-minute load is not read
    assert not quiet_enough((high, low, low), (low, low, low), cores=2)
    assert not quiet_enough((low, high, low), (low, low, low), cores=2)
    assert not quiet_enough((low, low, low), (high, low, low), cores=2)
    assert not quiet_enough((float("nan"),) * 3, (low, low, low), cores=2)
    # where the system says who used the cores, that decides, not the load after (our own runs)
    assert quiet_enough((low, low, low), (high, high, low), cores=2, others=0.19)
    assert not quiet_enough((low, low, low), (low, low, low), cores=2, others=0.21)
    assert not quiet_enough((high, low, low), (low, low, low), cores=2, others=0.0)
    assert not quiet_enough((low, low, low), (high, low, low), cores=2, others=float("nan"))   # unknown: the load


def test_pinned_round_robin_runs_at_scale_and_with_a_worker_killed_in_its_wait():
    # Round-robin turns take the fast path of SimServerState.changed (one lookup per
    # change). 64 workers with stragglers: the whole timeline. Worker 5 killed at 0.3 ms
    # while it waits for its turn: its clock, and so the run's end, are what the slow path
    # gave (the records a killed worker leaves depend on when its live batches were sent,
    # a wall-clock matter, so only the end and the centre are pinned there).
    base = dict(algorithm="easgd", steps=12, seed=5, lr=0.05, simulate=True, cpu_device=CPU, eval_every=4,
                jitter=0.4, tau=3)
    got = run(RunConfig(cpus=64, batch_size=256, **base))
    cols = ["worker", "step", "time", "staleness", "compute_s", "comm_s", "wait_s"]
    assert hashlib.sha256(got.steps[cols].to_numpy(dtype=float).tobytes()).hexdigest()[:16] == "ca723c1a9a73deb4"   # re-pinned: see PINNED
    killed = run(RunConfig(cpus=16, batch_size=64, fail_worker="5@0.0003", **base))
    assert killed.summary["lost_workers"] == {"5": "virtual worker 5"}
    assert killed.summary["wall_time_s"] == 0.001009588737605166
    assert float(np.abs(killed.params).sum()) == pytest.approx(1275.846923828125, rel=1e-5)


def test_sim_vs_real_refuses_too_few_steps_in_one_line_before_any_worker_starts(capsys, monkeypatch):
    from workbench.apps.cli import main
    from workbench.execution import cluster

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started")
    monkeypatch.setattr(cluster, "session_client", no_cluster)
    assert main(["bench", "--sim-vs-real", "--steps", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: steps: a whole number >= 10 (steps of each real and simulated run), got 3"]


def test_sim_vs_real_refuses_bad_rounds_before_any_worker_starts():
    import argparse

    from workbench.sim.validate import main
    with pytest.raises(ConfigError, match="rounds"):
        main(argparse.Namespace(steps=150, rounds=0))
