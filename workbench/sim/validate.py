"""Does the simulated cluster predict this machine? Real runs against simulated ones.

`real_vs_simulated(client, config)` runs `config` for real on a Dask cluster of worker
processes (the engine, as `workbench.run(..., cluster=client)` does) and then simulated
with this machine's calibrated core (`cpu_device="local"`, timed right then) and its
measured link (the exchange micro-benchmark, `linkfit.benchmark_link`, fed to
`costmodel.calibrate(link=)`; or alpha / beta fitted on the real runs' exchanges; or the
documented shared-memory constants), for each worker count, and tabulates the samples/s of both and the error. `simulator_vs_cost_model`
puts the simulator beside `costmodel.step_prediction` fed with the simulator's own
constants (device, link), where the two describe the same exchange.

What the calibration beside the real runs holds (`_time_this_core_now`): this core's
`loss_and_grad` timed alone and, for two workers, while a helper process computes the same
model (the caches and memory bandwidth they share); the mean of the timed calls (a run's
throughput is its mean step) and their spread, which the simulated run is given as jitter
(a synchronous step waits for the slower of its workers' computes); and the host's other
demand, `host_demand_cores`: this process's CPU (the client's monitor and the local
scheduler) over the round's run of fewest workers, which two workers on two cores share
(`calibration.host_share`). What it still leaves out: the loop's own Python per step (records,
slicing the batch: ~0.1-0.3 ms here), each worker process's own threads, and other
processes on the machine (reported beside each row: `other_cores`, the load average).
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..config import RunConfig
from ..util import machine

# The 535k-parameter MLP (784-512-256-10) of `bench`, 128 rows a worker: compute-bound steps.
HEAVY = dict(dataset="synthetic", n_samples=20000, n_features=784, n_classes=10, model="mlp", hidden=[512, 256],
             lr=0.01, seed=0, eval_every=10**9)
PER_WORKER = 128


def _row(kind: str, workers: int, result: Any) -> dict[str, Any]:
    steps = result.steps
    return {"workers": workers, "run": kind, "samples_per_s": float(result.summary["samples_per_s"]),
            "compute_ms": float(np.median(steps["compute_s"])) * 1e3,
            "comm_ms": float(np.median(steps["comm_s"])) * 1e3}


def real_vs_simulated(client: Any, config: RunConfig | None = None, workers: Sequence[int] = (1, 2),
                      steps: int = 150, per_worker: int = PER_WORKER, keep: list | None = None,
                      measured_link: bool | str = "benchmark", rounds: int = 1) -> pd.DataFrame:
    """One row per worker count: real and simulated samples/s, error = simulated / real - 1,
    and `client_cpu_share`: this process's CPU time over the real run's wall time (the
    client's monitor, and the scheduler of a local cluster, which runs in it), in cores;
    `other_cores`: the most that other processes and steal took during a real run or a
    calibration, in cores (`util.machine`: the machine's busy time less ours; nan where the
    system does not say), which `quiet_enough` reads.

    Args:
        client: a Dask client whose cluster has at least max(workers) worker processes.
        config: the run (default: `HEAVY`, sync_sgd); cpus and batch_size are set per row.
        workers: worker counts.
        steps: steps of each run.
        per_worker: rows of the global batch per worker.
        keep: if a list is given, the real runs' RunResults are appended to it.
        measured_link: "benchmark" (default): simulate over this machine's link measured by
            the exchange micro-benchmark (`linkfit.benchmark_link`: 7 sizes, bounded by
            memcpy / 8) and calibrated with the real runs (`costmodel.calibrate(link=)`);
            the row's `link_held_out_error` says how well one alpha-beta line fits it (the
            median over the rounds: the link is measured every round), `link_gbps_low` /
            `link_gbps_high` the slowest and fastest round's bandwidth.
            True: alpha / beta fitted on the real runs' comm times (which mix in waiting);
            False: the documented shm constants.
        rounds: how many times the real runs and, after them, a fresh calibration of this
            core and the simulated runs are repeated, interleaved (real 1, real 2, ..., then
            calibrate and simulate, then again): a row's numbers are the medians over the
            rounds, its error the median of the rounds' errors (as `bench --rounds` takes the
            median of the rounds' ratios), and `error_low` / `error_high` the lowest and
            highest round's (how sure it is: two runs a minute apart on one idle 2-vCPU VM
            here differed by 10-30% in samples/s).
    """
    from ..analysis.costmodel import calibrate
    from ..execution.engine import run as run_engine
    from .run import run_simulated
    if int(rounds) < 1:
        raise ValueError(f"rounds: a whole number >= 1, got {rounds}")
    base = config or RunConfig(algorithm="sync_sgd", steps=steps, **HEAVY)
    configs = {p: base.replace(cpus=p, batch_size=per_worker * p, steps=steps) for p in workers}
    for cfg in configs.values():
        run_engine(cfg.replace(steps=5), cluster=client)                     # warm workers: imports, data
    fit, fits = None, []
    per_round: dict[int, list[dict[str, Any]]] = {p: [] for p in workers}
    for _ in range(int(rounds)):
        reals, client_share = {}, {}
        for p, cfg in configs.items():
            # this process's CPU over the real run (the client's monitor, and a local cluster's
            # scheduler, which runs in it): with as many workers as cores it comes out of theirs
            w0, c0 = time.perf_counter(), time.process_time()
            reals[p] = run_engine(cfg, cluster=client)
            client_share[p] = (time.process_time() - c0) / max(time.perf_counter() - w0, 1e-9)
        if keep is not None:
            keep.extend(reals.values())
        # this machine's link, measured every round beside its real runs: the exchange
        # micro-benchmark (the documented shm constants fill in what it cannot determine), or
        # alpha / beta fitted on the runs. On this 2-vCPU VM the same benchmark gave 13.4-13.6
        # GB/s and, minutes later, 3.6 GB/s (a 1 MB exchange 66 us, then 272 us: where the
        # hypervisor placed the two vCPUs, 2026-12-04), so one measurement per call mischarged
        # every later round
        if measured_link == "benchmark":
            from ..analysis.linkfit import benchmark_link
            fit = benchmark_link(client)
            fits.append(fit)
        link = calibrate(list(reals.values()), network="shm", link=fit).link("measured") if measured_link else None
        for p, real in reals.items():
            sim_cfg = configs[p].replace(simulate=True, cpu_device="local", network="shm")
            m0, helpers0 = machine.snapshot(), _children_cpu_s()
            # next to the real run, not the cache; with the host's other demand measured on the
            # round's run of fewest workers (where a core was free for it), and the spread of the
            # timed calls as the simulated compute's jitter (a synchronous step waits for the
            # slower of its workers' computes, not their typical one)
            path, spread = _time_this_core_now(sim_cfg, host_demand=client_share[min(client_share)])
            sim_cfg = sim_cfg.replace(calibration=path, jitter=_as_jitter(spread))
            try:
                sim = run_simulated(sim_cfg, link=link)
            finally:
                os.unlink(path)                  # the run's summary holds the record it was charged
            # who else used the cores: during the real run (its own accounting: the workers' CPU is
            # ours), and while this core was timed and the run simulated (this process and the
            # co-run helper processes it started and waited for are ours)
            calib = machine.summarise(m0, machine.snapshot(),
                                      [{"pid": "co-run helpers", "process_cpu_s": _children_cpu_s() - helpers0}])
            r, s = _row("real", p, real), _row("simulated", p, sim)
            per_round[p].append({"real": r, "sim": s, "link": sim.summary["network"], "status": real.summary["status"],
                                 "client_cpu_share": client_share[p],
                                 "other_cores": max(_others(real.summary.get("machine")), _others(calib)),
                                 "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")})
    rows = []
    for p, got in per_round.items():
        def med(side: str, key: str, got: list = got) -> float:
            return float(np.median([g[side][key] for g in got]))
        errors = [g["sim"]["samples_per_s"] / g["real"]["samples_per_s"] - 1 for g in got]
        real_sps, sim_sps = med("real", "samples_per_s"), med("sim", "samples_per_s")
        rows.append({"workers": p, "real_samples_per_s": real_sps, "sim_samples_per_s": sim_sps,
                     "error": float(np.median(errors)), "error_low": min(errors), "error_high": max(errors),
                     "rounds": len(got),
                     "real_compute_ms": med("real", "compute_ms"), "sim_compute_ms": med("sim", "compute_ms"),
                     "real_comm_ms": med("real", "comm_ms"), "sim_comm_ms": med("sim", "comm_ms"),
                     "link": got[-1]["link"],
                     "client_cpu_share": float(np.median([g["client_cpu_share"] for g in got])),
                     "link_held_out_error": float(np.median([f.held_out_error for f in fits])) if fits else float("nan"),
                     "link_gbps_low": min((f.bandwidth_gbps for f in fits), default=float("nan")),
                     "link_gbps_high": max((f.bandwidth_gbps for f in fits), default=float("nan")),
                     "load_average": max(g["load_average"] for g in got),
                     "other_cores": max(g["other_cores"] for g in got),   # others + steal, in cores (nan: unknown)
                     "status": next((g["status"] for g in got if g["status"] != "completed"), "completed")})
    return pd.DataFrame(rows)


def _children_cpu_s() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    t = os.times()
    return t.children_user + t.children_system


def _others(state: dict[str, Any] | None) -> float:
    """Cores other processes and the hypervisor (steal) took in a `util.machine` summary;
    nan where the system does not say (no /proc/stat)."""
    if not state or state.get("other_cores") is None:
        return float("nan")
    return float(state["other_cores"]) + float(state.get("steal_cores") or 0.0)


CALIBRATION_CALLS = 40   # timed calls of the one slice size, alone and co-run (~0.15 s each at 128 rows here)


def _time_this_core_now(config: RunConfig, host_demand: float = 0.0) -> tuple[str, float]:
    """A fresh calibration of this core for `config`'s model (not the cached one: the
    machine's state now, beside the real run) at the one slice size its workers compute
    (`local_device(rows=)`: charged what that size took, not a line fitted through others),
    with the co-run timing for its CPU workers
    (`calibration.co_run_device`: the core while the others compute too) and `host_demand`
    (`host_demand_cores`: cores the run's own machinery takes beside the workers,
    `calibration.host_share`), as a file the run can be given; and the spread (`calibration._spread`)
    of the timed calls of the device its workers are charged."""
    import json
    import tempfile

    from ..problem import Problem
    from . import calibration
    problem = Problem.from_config(config)
    data, model, params = problem.data, problem.new_model(), problem.initial_params()
    rows = config.batch_size // max(config.cpus, 1)       # the one slice size the runs compute
    device = calibration.local_device(model, data.X_train, data.y_train, params, rows=rows, repeats=CALIBRATION_CALLS)
    record = calibration.calibration_record(device, model, str(params.dtype))
    k = calibration.co_run_cores(record, config.cpus)
    if k > 1:
        together = calibration.co_run_device(model, data.X_train, data.y_train, params, k, device,
                                             repeats=CALIBRATION_CALLS)
        record["co_run"] = {str(k): calibration.co_run_entry(together)}
        device = together
    cores = int(record["machine"]["cores"] or 1)
    record["host_demand_cores"] = round(min(max(float(host_demand), 0.0), 0.5 * cores), 4)
    fd, path = tempfile.mkstemp(prefix="workbench-calibration-", suffix=".json")
    with open(fd, "w", encoding="utf-8") as f:
        json.dump(record, f)
    return path, device.spread


def _as_jitter(spread: float) -> float:
    """A measured spread as the config's `jitter` (0 below `config.JITTER_MIN`, under 1).

    >>> _as_jitter(0.0831), _as_jitter(1e-9), _as_jitter(3.0)
    (0.0831, 0.0, 0.99)
    """
    from ..config import JITTER_MIN
    return 0.0 if spread < JITTER_MIN else min(round(float(spread), 4), 0.99)


QUIET_LOAD = 0.3   # a machine whose load average stays under this (per core) is quiet enough to judge +-15%
TOLERANCE = 0.15   # issue 24's bar for simulated vs real samples/s


def quiet_enough(before: Sequence[float], after: Sequence[float], cores: int | None = None,
                 others: float | None = None) -> bool:
    """Whether a machine was quiet enough for real runs to judge the simulator.

    Before: the 1- and 5-minute load averages under `QUIET_LOAD` a core. During: where the
    system says who used the cores (`others`: the most that other processes and steal took
    in any real run or calibration, in cores, from /proc/stat less our own processes' CPU,
    `util.machine`), under `util.machine.OTHERS_NOTICEABLE` of them; elsewhere the 1-minute
    load after under `QUIET_LOAD` a core. The load after counts the benchmark's own runs (2
    busy workers on 2 cores leave it near 1 a core), so where the split is known it is not
    read: reading it, the rule would call a run quiet only by chance.
    `before` / `after` are `os.getloadavg()` triples (nan where the platform has none: not quiet).

    >>> quiet_enough((0.1, 0.2, 3.0), (1.9, 0.9, 0.5), cores=2, others=0.05)
    True
    >>> quiet_enough((0.1, 0.2, 3.0), (1.9, 0.9, 0.5), cores=2, others=0.3)
    False
    >>> quiet_enough((0.1, 0.2, 3.0), (1.9, 0.9, 0.5), cores=2)
    False
    """
    from ..util.machine import OTHERS_NOTICEABLE, usable_cores
    cores = cores or usable_cores()   # affinity and CPU quota, not the host's cores
    loads = [float(before[0]), float(before[1])]
    if not all(v == v for v in loads) or max(loads) >= QUIET_LOAD * cores:
        return False
    if others is not None and others == others:
        return float(others) < OTHERS_NOTICEABLE * cores
    return after[0] == after[0] and float(after[0]) < QUIET_LOAD * cores


def describe_error(error: float, low: float, high: float, rounds: int) -> str:
    """The verdict on one row's error against +-TOLERANCE, with how sure it is.

    >>> describe_error(0.08, 0.05, 0.12, 3)
    'within +-15% (median of 3 rounds; every round within: +5.0% .. +12.0%)'
    >>> describe_error(0.10, 0.02, 0.21, 3)
    'within +-15% (median of 3 rounds; NOT every round: +2.0% .. +21.0%)'
    >>> describe_error(0.30, 0.30, 0.30, 1)
    'OUTSIDE +-15% (one round)'
    """
    within = abs(error) <= TOLERANCE
    verdict = f"{'within' if within else 'OUTSIDE'} +-{TOLERANCE:.0%}"
    if rounds < 2:
        return f"{verdict} (one round)"
    if within:
        every = "every round within" if max(abs(low), abs(high)) <= TOLERANCE else "NOT every round"
    else:
        every = "every round outside" if low > TOLERANCE or high < -TOLERANCE else "NOT every round"
    return f"{verdict} (median of {rounds} rounds; {every}: {low:+.1%} .. {high:+.1%})"


def main(args: Any) -> int:
    """`python -m workbench bench --sim-vs-real`: the table of `real_vs_simulated` for 1 and 2
    workers on a local Dask cluster of 2 worker processes, with the date, the machine's load
    before and after, and whether each row is within +-15% (and whether the machine was
    quiet enough for that verdict to mean anything)."""
    import datetime

    from ..config import ConfigError
    from ..execution.cluster import close_session, session_client
    steps = int(getattr(args, "steps", None) or 150)
    if steps < 10:
        raise ConfigError("steps", "a whole number >= 10 (steps of each real and simulated run)", steps)
    rounds = getattr(args, "rounds", None)
    rounds = 5 if rounds is None else int(rounds)
    if rounds < 1:
        raise ConfigError("rounds", "a whole number >= 1 (rounds of real runs, calibration and simulation)", rounds)
    cores = machine.usable_cores()
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes")
    print(f"simulated vs real, sync_sgd on the 535k MLP (784-512-256-10), {PER_WORKER} rows a worker, {steps} steps, "
          f"{rounds} round(s); "
          f"{when}; {cores} cores; load average before {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} "
          f"(1 / 5 / 15 min)", flush=True)
    client = session_client(2, 0)
    try:
        table = real_vs_simulated(client, RunConfig(algorithm="sync_sgd", steps=steps, **HEAVY), workers=(1, 2),
                                  steps=steps, rounds=rounds)
    finally:
        close_session()
    load1 = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    others = float(table["other_cores"].max())
    quiet = quiet_enough(load0, load1, cores, others=others)
    cols = ["workers", "real_samples_per_s", "sim_samples_per_s", "error", "error_low", "error_high",
            "real_compute_ms", "sim_compute_ms", "real_comm_ms", "sim_comm_ms", "load_average", "other_cores"]
    print(table[cols].round(3).to_string(index=False))
    for _, row in table.iterrows():
        print(f"  {int(row['workers'])} worker(s): simulated {row['error']:+.1%} against real: "
              + describe_error(row["error"], row["error_low"], row["error_high"], int(row["rounds"])))
    low, high = table["link_gbps_low"].iloc[0], table["link_gbps_high"].iloc[0]
    print(f"  link: {table['link'].iloc[0]}" + (f"; measured every round: {low:.3g}-{high:.3g} GB/s" if low == low else ""))
    share = table["client_cpu_share"]
    print(f"  this process (the client's monitor and the local scheduler) used {share.min():.1%}-{share.max():.1%} of "
          f"a core during the real runs: where the workers take every core ({cores} here), that time is theirs lost; "
          "the simulated runs are charged it (host_demand_cores, as measured on each round's 1-worker run), and the "
          "spread of the calibration's timed calls as jitter")
    during = (f"other processes and steal took at most {others:.2f} of {cores} cores during the real runs and "
              f"calibrations" if others == others else f"load average after {load1[0]:.2f} (this system does not "
              f"say who used the cores)")
    print(f"{during}; the machine was "
          + (f"quiet (load under {QUIET_LOAD} a core before, others under {machine.OTHERS_NOTICEABLE:.0%} of the "
             f"cores during): the errors above are this machine's" if quiet else
             f"NOT quiet (load over {QUIET_LOAD} a core before, or others over {machine.OTHERS_NOTICEABLE:.0%} of "
             "the cores during): other work shared the cores, so the real runs were slowed by it and the errors "
             "above do not judge the simulator"))
    return 0


def simulator_vs_cost_model(cases: Sequence[tuple[str, int, dict]] = (
        ("sync_sgd", 4, {}), ("sync_sgd", 64, {}), ("sync_easgd", 16, {"tau": 4}), ("async_sgd", 1, {"rows": 64}),
        ("async_sgd", 16, {}), ("async_easgd", 16, {"tau": 4}), ("easgd", 16, {"tau": 4})),
        per_worker: int = 16, network: str = "10GbE", timing_model: str = "alexnet",
        cpu_device: str = "power8", model: str = "mlp", dataset: str = "digits") -> pd.DataFrame:
    """Simulated samples/s beside `costmodel.step_prediction` with the same constants:
    the device's compute (c0 + c1 b, compute-bound under `timing_model`) and the network's
    alpha and beta. One row per (algorithm, workers, knobs); knobs are config fields, and
    `rows` (rows per worker, default `per_worker`); `difference` = simulated / cost model - 1.
    `model`: the model trained on `dataset` (its FLOPs are the timing model's either way).
    sync_sgd with `compression` gets the same compressed exchange from both (PowerSGD's on the
    timing model's own tensors where it lists them, as the simulator counts them), and its
    compression work (`SimCosts.compress_s`, a step's) in the calibrated c0.

    Where they differ, and why: an unsaturated parameter server's reply waits for the
    server's update in the simulator (`server_update_s` per round trip), which the cost
    model's round trip (2 messages) leaves out; a saturated one differs by the 2 alpha of
    each round trip the simulator overlaps with the next request. LTFB (the run's `trainers`,
    `round_size` and resolved `tournament_size` go to the cost model): the simulator's first
    tournament queues the deposits once (K = 2: 1.7-1.9% in 40 steps), and where the one
    mailbox's busy time a round is close to the trainers' own round its queue, which the cost
    model leaves out (it takes the larger of the two), makes the simulator up to 17% slower."""
    from ..analysis.costmodel import Calibration, step_prediction
    from ..problem import Problem
    from .costs import make_costs
    from .run import run_simulated
    rows = []
    for algorithm, p, knobs in cases:
        knobs = dict(knobs)
        b = int(knobs.pop("rows", per_worker))
        tau = int(knobs.get("tau", 1))
        cfg = RunConfig(algorithm=algorithm, dataset=dataset, model=model, cpus=p, batch_size=b * p,
                        steps=40 * tau, seed=0, lr=0.01, simulate=True, cpu_device=cpu_device, network=network,
                        timing_model=timing_model, eval_every=10**9, **knobs)
        problem = Problem.from_config(cfg)
        costs = make_costs(cfg, problem.model, ["cpu"] * p, problem.data)
        dev = costs.devices[0]
        assert abs(dev.compute_s(costs.train_flops * b, costs.weight_bytes)
                   - costs.train_flops * b / (dev.peak_flops * dev.efficiency)) < 1e-12, "not compute-bound"
        cal = Calibration(compute={"cpu": (dev.step_overhead_s + costs.update(0) + costs.compress_s(0),
                                           costs.train_flops / (dev.peak_flops * dev.efficiency))},
                          alpha=costs.network.alpha, beta=costs.network.beta, n_params=costs.timing.n_params)
        ltfb = {"round_size": cfg.round_size, "tournament_size": cfg.tournament_size,
                "trainers": cfg.trainers} if algorithm == "ltfb" else {}   # the run's own (resolved) knobs
        squeeze = {}
        if cfg.compression != "none":   # the exchange the simulator charges (PowerSGD: the timing model's tensors)
            squeeze = {"compression": cfg.compression, "compression_ratio": cfg.compression_ratio,
                       "compression_levels": cfg.compression_levels, "compression_rank": cfg.compression_rank}
            if cfg.compression == "powersgd":
                shapes = costs.timing.tensor_shapes or tuple(tuple(s) for _, s in problem.model.layout())
                squeeze["layer_shapes"] = [tuple(s) for s in shapes]
        pred = step_prediction(cal, algorithm, p, b * p, tau=tau, **ltfb, **squeeze)
        got = run_simulated(cfg).summary["samples_per_s"]
        rows.append({"algorithm": algorithm, "workers": p, "rows_per_worker": b, "tau": tau, "simulated": got,
                     "cost_model": pred["samples_per_s"], "difference": got / pred["samples_per_s"] - 1,
                     "bottleneck": pred["bottleneck"], "comm_share": pred["comm_s"] / pred["step_time_s"],
                     "server_update_s": costs.host_update()})
    return pd.DataFrame(rows)
