"""`python -m workbench bench`: throughput of the algorithms against their limits, in one run.

For each model size (by default the teaching MLP 64-128-10 at batch 32 per worker, and
the 535k-parameter MLP 784-512-256-10 at 128 per worker) it measures, on one cluster:
- the no-exchange limit: every worker computing gradients and updates, never exchanging
  (measured again right before and right after each entry, and averaged);
- one parameter exchange: the shared-memory allreduce of the whole parameter vector;
- the barest synchronous loop (`bare_sync`), on the same workers and in plain processes
  outside Dask: the ceiling on this machine, so that sync_sgd against it shows the
  engine's own overhead, and it against the limit the exchange's and the barrier's;
- each algorithm, through the engine, in steady state (`workbench.measure`'s rule);
- when torch is importable (an optional peer, never a dependency): torch's own
  no-exchange limit (the same MLP trained single-process in as many processes side by
  side), PyTorch DDP (gloo) on the same model and per-worker batch, and gloo's all_reduce
  of the same number of floats.
Every throughput is divided by its own system's limit, measured around it (a shared
machine's speed drifts over a minute): absolute CPU numbers compare NumPy's BLAS with
torch's, not the parallel machinery. A benchmark, not a test.

The measurements are a list of `Entry`s (`bench.command.entries()`), one row each; a new
exchange or peer is one more entry. This module holds the measurements and the table's
maths (and `compare_tables`, a saved table's rows beside a new one's); the torch peer is
`bench/torchpeer.py`, the allreduce table (the ring over Dask, gloo and shared memory
at 2-4 workers) `bench/allreduce.py`, the command (`python -m workbench bench`:
arguments, the run over sizes and rounds, the printout) `bench/command.py`.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import measure

# Warm-up is left out by the one rule of `workbench.measure` (records: `steady`; the bare
# loops below, which keep none: `measure.warm`).
STEADY_FROM = measure.WARMUP_FRACTION

PLAIN_BARE = "bare sync loop, plain processes (no Dask)"
PLAIN_ENGINE = "sync_sgd's loop, plain processes (no Dask)"
RUNDIR = "sync_sgd, into a run directory (steps.csv, checkpoints)"

# name -> (n_features, hidden, batch per worker)
SIZES: dict[str, tuple[int, str, int]] = {
    "teaching": (64, "128", 32),          # digits-sized MLP: what lessons and Binder run
    "535k": (784, "512,256", 128),        # MLP 784-512-256-10, 535,818 parameters
}


@dataclass
class Size:
    """One model size of the benchmark."""

    name: str
    n_features: int
    hidden: str
    batch_per_worker: int

    @property
    def widths(self) -> list[int]:
        return [int(h) for h in str(self.hidden).split(",") if h]

    def label(self) -> str:
        return f"MLP {self.n_features}-{'-'.join(map(str, self.widths))}-10, batch {self.batch_per_worker}/worker"


@dataclass
class Bench:
    """What every entry can use: the cluster, its workers, the size, the options."""

    client: Any
    workers: list[dict]
    size: Size
    args: argparse.Namespace
    n_params: int = 0
    limit: float = float("nan")     # our limit, as last measured
    torch_limit: float | None = None  # torch's own limit (the same model, no exchange)
    notes: list[str] = field(default_factory=list)

    @property
    def cpus(self) -> int:
        return len(self.workers)

    def config(self, algorithm: str, steps: int) -> Any:
        return _bench_config(self.args, algorithm, steps, self.size)

    def measure_limit(self) -> float:
        """The same workers, the same work, no exchange: measured again before every
        entry, so that each ratio compares two measurements seconds apart."""
        cfg = self.config("sync_sgd", 10)
        futs = [self.client.submit(compute_only, cfg.to_dict(), self.args.seconds / 2, workers=[w["address"]],
                                   pure=False) for w in self.workers]
        self.limit = sum(p["samples"] / p["seconds"] for p in self.client.gather(futs))
        return self.limit


@dataclass
class Entry:
    """One row of the table: `measure(bench)` returns its columns (samples_per_s and
    limit, or exchange_ms), or None to leave the row out (an optional peer missing)."""

    what: str
    measure: Callable[[Bench], dict | None]


def _bench_config(args: argparse.Namespace, algorithm: str, steps: int, size: Size | None = None) -> Any:
    from ..config import RunConfig
    size = size or _sizes(args)[0]
    return RunConfig(algorithm=algorithm, dataset="synthetic",
                     n_samples=max(20000, 8 * size.batch_per_worker * args.cpus),
                     n_features=size.n_features, n_classes=10, hidden=size.widths, model="mlp", cpus=args.cpus, gpus=0,
                     batch_size=size.batch_per_worker * args.cpus, lr=0.01,
                     momentum=0.9 if algorithm in ("async_msgd", "async_measgd") else 0.0,
                     tau=getattr(args, "tau", 1), steps=steps, eval_every=10**9, seed=0)


def _sizes(args: argparse.Namespace) -> list[Size]:
    """The sizes to measure: a custom one when any of --n-features/--hidden/--batch-per-worker
    is given, else those named by --sizes."""
    custom = [getattr(args, k, None) for k in ("n_features", "hidden", "batch_per_worker")]
    if any(v is not None for v in custom):
        nf, hidden, b = (v if v is not None else d for v, d in zip(custom, SIZES["535k"]))
        return [Size("custom", int(nf), str(hidden), int(b))]
    from ..config import ConfigError
    names = [s for s in str(getattr(args, "sizes", "teaching,535k")).split(",") if s]
    for s in names:
        if s not in SIZES:
            raise ConfigError("sizes", f"comma-separated names from {sorted(SIZES)}", s)
    return [Size(s, *SIZES[s]) for s in names]


# ------------------------------------------------------------------------------ on the workers
def _worker_setup(config_dict: dict) -> tuple:
    """What the bare loops below share with the engine's workers: the run's dataset (the
    worker's cached copy), its model, initial parameters and optimiser."""
    from ..config import RunConfig
    from ..maths.optim import make_optimizer
    from ..problem import Problem

    cfg = RunConfig.from_dict(config_dict)
    problem = Problem.from_config(cfg)
    data, model, params = problem.data, problem.new_model(), problem.initial_params()
    opt = make_optimizer(cfg, model.layout(), np, params.dtype)
    return cfg, data, model, params, opt


def compute_only(config_dict: dict, seconds: float) -> dict:
    """Runs on a worker: gradient + update on its slice, no exchange, for `seconds`."""
    from ..data import _epoch_order, steps_per_epoch

    cfg, data, model, params, opt = _worker_setup(config_dict)
    grad = np.empty_like(params)
    b = cfg.batch_size // cfg.cpus
    spe = steps_per_epoch(data.n_train, cfg.batch_size)
    samples, step, t0 = 0, 0, time.perf_counter()
    t_start = None
    while True:
        epoch, k = divmod(step, spe)   # the worker loop's own slicing of the global batch
        idx = _epoch_order(data.n_train, cfg.seed, epoch)[k * cfg.batch_size:k * cfg.batch_size + b]
        model.loss_and_grad(params, data.X_train[idx], data.y_train[idx], grad_out=grad)
        opt.step(params, grad, 0.01)
        step += 1
        now = time.perf_counter()
        if t_start is None and measure.warm(step, now - t0, seconds):
            t_start, samples = now, 0
        elif t_start is not None:
            samples += b
        if now - t0 > seconds:
            return {"samples": samples, "seconds": now - t_start}


def bare_sync(config_dict: dict, seconds: float, segment: str, rank: int, max_steps: int | None = None) -> dict:
    """The synchronous step at its barest: slice, gradient straight into the buffer the
    shared-memory allreduce hands out (as sync_sgd does), allreduce, update; no records,
    no timers, no live batches, no stop requests. The same maths as `sync_sgd` over
    shared memory (equal slices of the global batch, each weighted by its share), so its
    throughput is the ceiling the engine's loop can reach on this machine: `sync_sgd`
    against it is the loop's own overhead, and it against the no-exchange limit is the
    exchange's and the barrier's.

    Rank 0 decides when to stop (after `seconds`, or after `max_steps`) and tells the
    others through the allreduced buffer, so every rank runs the same steps. Returns
    steady-state samples and seconds, the steps run, and the final parameters."""
    from ..comm.shm import ShmComm
    from ..data import _epoch_order, split_batch, steps_per_epoch
    from ..problem import Problem

    cfg, data, model, params, opt = _worker_setup(config_dict)
    schedule = Problem.from_config(cfg).plan.schedule
    n, size, B = model.n_params, cfg.cpus, cfg.batch_size
    comm = ShmComm(segment, rank, size, n + 1)
    buf = comm.buffer(n + 1)
    grad = buf[:n]
    lo, hi = split_batch(B, [1.0] * size)[rank]
    w = (hi - lo) / B
    spe = steps_per_epoch(data.n_train, B)
    samples, step, t0, t_start = 0, 0, time.perf_counter(), None
    comm.barrier()
    try:
        while True:
            epoch, k = divmod(step, spe)
            idx = _epoch_order(data.n_train, cfg.seed, epoch)[k * B + lo:k * B + hi]
            model.loss_and_grad(params, data.X_train[idx], data.y_train[idx], grad_out=grad)
            if w != 1.0:
                grad *= w
            now = time.perf_counter()
            buf[n] = rank == 0 and (now - t0 > seconds or (max_steps is not None and step + 1 >= max_steps))
            total = comm.allreduce(buf)
            opt.step(params, total[:n], schedule(step))
            step += 1
            if t_start is None and measure.warm(step, now - t0, seconds):
                t_start, samples = time.perf_counter(), 0
            elif t_start is not None:
                samples += hi - lo
            if total[n] > 0:
                end = time.perf_counter()
                return {"samples": samples, "seconds": end - (t_start if t_start is not None else t0),
                        "steps": step, "params": params}
    finally:
        comm.close()


def engine_sync(config_dict: dict, segment: str, word_segment: str, rank: int) -> dict:
    """Runs in a process of its own: sync_sgd through the engine's loop (`run_loop`: its
    step, the packed tail, the step's record, the stop word read every step, live batches
    with no client to send them to) over the same shared-memory allreduce as `bare_sync`,
    as a Dask worker runs it but with no Dask around it: no scheduler round trips, no
    worker event loop, no client receiving the rows. Returns its step records as columns
    (with `worker`), which `measure`'s rule reads as the Dask run's are read."""
    from ..algorithms import REGISTRY, run_loop
    from ..comm.barrier import ShmStopWord
    from ..comm.base import ThreadControl, ThrottledControl
    from ..comm.shm import ShmComm
    from ..config import RunConfig
    from ..config.registry import tail_length
    from ..execution.context import build_context

    cfg = RunConfig.from_dict(config_dict)
    size = cfg.cpus
    _, _, model, _, _ = _worker_setup(config_dict)
    comm = ShmComm(segment, rank, size, model.n_params + tail_length(size))
    control = ThrottledControl(ThreadControl(), word=ShmStopWord(word_segment, size))

    def start() -> list:
        comm.barrier()
        return []
    ctx = build_context(cfg, rank, size, "cpu", comm=comm, control=control, start_barrier=start)
    try:
        out = run_loop(ctx, REGISTRY["sync_sgd"].cls(ctx))
    finally:
        control.close()
        comm.close()
    return {**out["steps"], "worker": np.full(len(out["steps"]["step"]), rank)}


def exchange_time(name: str, rank: int, size: int, n: int, repeats: int) -> list[float]:
    """Runs on a worker: times of `repeats` shared-memory allreduces of n float32."""
    from ..comm.shm import ShmComm
    comm = ShmComm(name, rank, size, n)
    buf = np.ones(n, dtype=np.float32)
    times = []
    for _ in range(repeats):
        comm.barrier()                     # start together: time the exchange, not the skew
        t0 = time.perf_counter()
        comm.allreduce(buf)
        times.append(time.perf_counter() - t0)
    comm.close()
    return times


def steady_throughput(steps: pd.DataFrame) -> float:
    """Steady samples per second of a run's step records (`workbench.measure.steady`)."""
    return measure.steady_throughput(steps)


# ------------------------------------------------------------------------------ our entries
def bracketed(before: float, after: float) -> dict:
    """A row's limit, from the no-exchange limit measured just before the row and just after
    it: their mean (`limit`), and how far it moved between the two (`limit_moved`: |after -
    before| / the mean), which says how much the machine's load changed around the row.

    >>> bracketed(900.0, 1100.0)
    {'limit': 1000.0, 'limit_moved': 0.2}
    """
    limit = (before + after) / 2
    return {"limit": limit, "limit_moved": abs(after - before) / limit if limit > 0 else float("nan")}


def _limit_entry(b: Bench) -> dict:
    limit = b.measure_limit()
    return {"samples_per_s": limit, "limit": limit, "comm_fraction": 0.0}


@contextlib.contextmanager
def _allreduce_segment(b: Bench, n: int) -> Iterator[str]:
    """A shared-memory allreduce segment for n elements among the bench's workers, made on
    (and removed from) the first worker's host; yields its name."""
    from ..comm.shm import allreduce_nbytes, create_segment, unlink_segment
    name = f"wbb{uuid.uuid4().hex[:10]}"
    addr0 = b.workers[0]["address"]
    b.client.submit(create_segment, name, allreduce_nbytes(b.cpus, n), workers=[addr0], pure=False).result()
    try:
        yield name
    finally:
        b.client.submit(unlink_segment, name, workers=[addr0], pure=False).result()


def _shm_exchange_entry(b: Bench) -> dict:
    with _allreduce_segment(b, b.n_params) as name:
        futs = [b.client.submit(exchange_time, name, r, b.cpus, b.n_params, 200, workers=[w["address"]], pure=False)
                for r, w in enumerate(b.workers)]
        times = np.array(b.client.gather(futs))
    return {"exchange_ms": float(np.median(times.max(axis=0)) * 1e3)}


def _bare_sync_entry(b: Bench) -> dict:
    """The barest synchronous loop on the same Dask workers (`bare_sync`)."""
    before = b.measure_limit()
    cfg = b.config("sync_sgd", 10).to_dict()
    with _allreduce_segment(b, b.n_params + 1) as name:
        futs = [b.client.submit(bare_sync, cfg, b.args.seconds, name, r, workers=[w["address"]], pure=False)
                for r, w in enumerate(b.workers)]
        got = b.client.gather(futs)
    return {"samples_per_s": sum(g["samples"] / g["seconds"] for g in got), **bracketed(before, b.measure_limit())}


def plain_processes(fn: Callable, args: list[tuple], blas_threads: int = 1) -> list[Any]:
    """fn(*a) for each a in `args`, each in a fresh process of its own (no Dask), with
    BLAS limited as a workbench cluster limits its workers'; their results, in order."""
    import concurrent.futures
    import multiprocessing

    from ..execution.cluster import _blas_env, _pristine_environ
    with _pristine_environ():
        os.environ.update({k: v for k, v in _blas_env(blas_threads).items() if v is not None})
        ctx = multiprocessing.get_context("spawn")     # the children read the BLAS limits as they start
        with concurrent.futures.ProcessPoolExecutor(len(args), mp_context=ctx) as pool:
            return list(pool.map(fn, *zip(*args)))


def _plain_entry(b: Bench) -> dict:
    """The same bare synchronous loop and no-exchange limit in plain processes, outside
    Dask: what the worker processes' own background work (event loop, heartbeats,
    monitors) costs the loop."""
    from ..comm.shm import allreduce_nbytes, create_segment, unlink_segment
    cfg = b.config("sync_sgd", 10).to_dict()
    blas = b.config("sync_sgd", 10).blas_threads   # the rule our workers follow (util.blas)
    before = _plain_limit(b)
    name = f"wbb{uuid.uuid4().hex[:10]}"
    create_segment(name, allreduce_nbytes(b.cpus, b.n_params + 1))
    try:
        got = plain_processes(bare_sync, [(cfg, b.args.seconds, name, r) for r in range(b.cpus)], blas)
    finally:
        unlink_segment(name)
    return {"samples_per_s": sum(g["samples"] / g["seconds"] for g in got), **bracketed(before, _plain_limit(b))}


def _plain_limit(b: Bench) -> float:
    """The no-exchange limit in plain processes (`compute_only`, half the entry's seconds),
    measured before and after each plain-process entry."""
    cfg = b.config("sync_sgd", 10)
    got = plain_processes(compute_only, [(cfg.to_dict(), b.args.seconds / 2)] * b.cpus, cfg.blas_threads)
    return sum(g["samples"] / g["seconds"] for g in got)


def _plain_engine_entry(b: Bench) -> dict:
    """sync_sgd through the engine's loop in plain processes, outside Dask (`engine_sync`):
    beside the plain bare loop, what the loop itself costs; beside the `sync_sgd` row (the
    same loop in the Dask workers, a client taking its live batches), what Dask and the
    client cost it."""
    from ..comm.shm import allreduce_nbytes, create_segment, unlink_segment
    from ..config.registry import tail_length
    before = _plain_limit(b)
    steps = max(50, int(b.args.seconds * before / (b.size.batch_per_worker * b.cpus)))
    run_cfg = b.config("sync_sgd", steps)
    name, word = f"wbb{uuid.uuid4().hex[:10]}", f"wbw{uuid.uuid4().hex[:10]}"
    create_segment(name, allreduce_nbytes(b.cpus, b.n_params + tail_length(b.cpus)))
    create_segment(word, 8 * b.cpus + 64)
    try:
        got = plain_processes(engine_sync, [(run_cfg.to_dict(), name, word, r) for r in range(b.cpus)],
                              run_cfg.blas_threads)
    finally:
        unlink_segment(name)
        unlink_segment(word)
    steps_df = pd.concat([pd.DataFrame(g) for g in got], ignore_index=True)
    return {"samples_per_s": steady_throughput(steps_df), **bracketed(before, _plain_limit(b)),
            "comm_fraction": measure.steady(steps_df).comm_fraction}


def _algorithm_entry(algorithm: str, rundir: bool = False) -> Callable[[Bench], dict]:
    """`algorithm` through `run` on the bench's cluster, its rows kept in memory; `rundir`:
    as a user's run makes it, streamed into a run directory (every step's row written to
    steps.csv as text and to the binary spool, a checkpoint asked for every 60 s, the default),
    so that beside the row kept in memory the table shows what keeping the record costs."""
    def measure(b: Bench) -> dict:
        from ..execution.engine import run
        before = b.measure_limit()
        steps = max(50, int(b.args.seconds * before / (b.size.batch_per_worker * b.cpus)))
        if rundir:
            from ..results.rundir import claim_run_dir
            with tempfile.TemporaryDirectory(prefix="wb-bench-") as folder:
                out = claim_run_dir(os.path.join(folder, "run"), overwrite=False, private=True)
                result = run(b.config(algorithm, steps), cluster=b.client, out=out)
                steps_df = result.steps   # (read back from the directory before it goes)
        else:
            result = run(b.config(algorithm, steps), cluster=b.client)
            steps_df = result.steps
        limit = bracketed(before, b.measure_limit())    # the limit just before and just after the run
        return {"samples_per_s": steady_throughput(steps_df), **limit,
                "comm_fraction": result.summary["comm_fraction"],
                "bytes_per_step": float(steps_df["bytes_sent"].mean()),   # per worker, as the records count
                "status": result.status}
    return measure


def combine_rounds(table: pd.DataFrame) -> pd.DataFrame:
    """One row per measured thing: the median over the rounds of every number (the ratio
    is the median of the rounds' ratios, not a ratio of medians), with the ratio's range
    when there was more than one round.

    >>> t = pd.DataFrame({"size": ["s"] * 4, "what": ["a", "b", "a", "b"], "round": [0, 0, 1, 1],
    ...                   "samples_per_s": [1.0, 2.0, 3.0, 4.0], "limit": [4.0] * 4, "status": ["completed"] * 4})
    >>> t["vs_limit"] = t["samples_per_s"] / t["limit"]
    >>> combine_rounds(t)[["what", "samples_per_s", "vs_limit", "vs_limit_min", "vs_limit_max", "status"]]
      what  samples_per_s  vs_limit  vs_limit_min  vs_limit_max     status
    0    a            2.0      0.50          0.25          0.75  completed
    1    b            3.0      0.75          0.50          1.00  completed
    """
    if "round" not in table or table["round"].nunique() <= 1:
        return table.drop(columns="round", errors="ignore")
    numeric = [c for c in table.columns if c not in ("size", "what", "round") and pd.api.types.is_numeric_dtype(table[c])]
    others = [c for c in table.columns if c not in ("size", "what", "round") and c not in numeric]
    by = table.groupby(["size", "what"], sort=False)
    out = by[numeric].median()
    out["vs_limit_min"] = by["vs_limit"].min()
    out["vs_limit_max"] = by["vs_limit"].max()
    for c in others:       # e.g. status: the worst one seen
        out[c] = by[c].agg(lambda v: next((x for x in v if x != "completed"), v.iloc[0]))
    return out.reset_index()


def above_limit_notes(table: pd.DataFrame, size: str, rounds: pd.DataFrame | None = None) -> list[str]:
    """One note per row of `size` that the table shows above its own limit (vs_limit, or a
    round's vs_limit_max, over 1.000 as printed). Nothing runs faster than its no-exchange
    limit; such a row says the machine's load moved between its timing and its limit's (the
    limit is measured just before and just after the row, `bracketed`, and averaged: a
    quieter moment for the row than around it gives more than 1). The note gives the
    ratios above 1 and how far the limit itself moved around each (`limit_moved`); with
    `rounds` (every round's rows, a "round" column), the rounds above 1 one by one.

    >>> t = pd.DataFrame({"what": ["no-exchange limit", "hogwild_sgd", "sync_sgd"], "vs_limit": [1.0, 1.06, 0.7],
    ...                   "limit_moved": [float("nan"), 0.09, 0.02]})
    >>> print(above_limit_notes(t, "teaching")[0])
    teaching: hogwild_sgd at 1.06 of its no-exchange limit is not faster than possible: the machine's load moved between its timing and its limit's (the limit, measured just before and just after it, moved 9% in between); read it as at its limit, within that
    >>> r = pd.DataFrame({"what": ["hogwild_sgd"] * 3, "round": [0, 1, 2], "vs_limit": [0.9, 1.18, 0.95],
    ...                   "limit_moved": [0.01, 0.15, 0.02]})
    >>> t2 = pd.DataFrame({"what": ["hogwild_sgd"], "vs_limit": [0.95], "vs_limit_max": [1.18], "limit_moved": [0.02]})
    >>> print(above_limit_notes(t2, "teaching", rounds=r)[0])
    teaching: hogwild_sgd above its no-exchange limit in 1 of 3 rounds (1.18 in round 1, the limit moving 15% around it) is not faster than possible: the machine's load moved between its timing and its limit's; read the median 0.95
    """
    def above(v: Any) -> bool:
        return isinstance(v, (int, float)) and math.isfinite(v) and round(v, 3) > 1.0

    notes = []
    for row in table.to_dict("records"):
        what, ratio = row["what"], row.get("vs_limit", float("nan"))
        high = row.get("vs_limit_max", float("nan"))
        if not (above(ratio) or above(high)):
            continue
        mine = None
        if rounds is not None and "round" in rounds and rounds["round"].nunique() > 1:
            mine = rounds.loc[rounds["what"] == what]
        if mine is not None and len(mine):
            over = mine.loc[[above(v) for v in mine["vs_limit"]]]
            each = ", ".join(f"{r['vs_limit']:.2f} in round {int(r['round'])}"
                             + (f", the limit moving {_pct(r.get('limit_moved'))} around it"
                                if _pct(r.get("limit_moved")) else "") for r in over.to_dict("records"))
            verdict = f"read the median {ratio:.2f}" if not above(ratio) else "read it as at its limit"
            notes.append(f"{size}: {what} above its no-exchange limit in {len(over)} of {len(mine)} rounds ({each}) "
                         f"is not faster than possible: the machine's load moved between its timing and its "
                         f"limit's; {verdict}")
        else:
            moved = _pct(row.get("limit_moved"))
            notes.append(f"{size}: {what} at {ratio:.2f} of its no-exchange limit is not faster than possible: the "
                         f"machine's load moved between its timing and its limit's"
                         + (f" (the limit, measured just before and just after it, moved {moved} in between)"
                            if moved else "") + "; read it as at its limit" + (", within that" if moved else ""))
    return notes


def _pct(value: Any) -> str | None:
    """A fraction as a whole percentage ("9%"); None when not measured (NaN, missing)."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return f"{value:.0%}"


# A saved table's rows, matched to a new one's: by these columns, and compared on these
# numbers (each row's own ratio to its own limit or peer, so that two runs minutes or days
# apart compare like with like).
COMPARE_KEYS = (("size", "what"), ("link", "workers", "floats", "method"))
COMPARE_VALUES = ("vs_limit", "exchange_ms", "median_ms", "vs_gloo_median")


def compare_tables(new: pd.DataFrame, before: pd.DataFrame) -> pd.DataFrame:
    """Each row of `new` beside the same row of `before` (a bench table saved with --out):
    for every compared number both have, its value then and now and now / then.

    Rows are matched on the first of `COMPARE_KEYS` both tables have, in the new table's
    order, then the rows only the saved one has; a row only one of them has keeps its
    numbers and an empty ratio.

    Raises:
        ValueError: the tables share no key (not two tables of the same kind).

    >>> old = pd.DataFrame({"size": ["s", "s"], "what": ["a", "b"], "vs_limit": [0.5, 0.8]})
    >>> new = pd.DataFrame({"size": ["s", "s"], "what": ["a", "c"], "vs_limit": [0.6, 0.9]})
    >>> compare_tables(new, old)
      size what  vs_limit_before  vs_limit  vs_limit_ratio
    0    s    a              0.5       0.6             1.2
    1    s    c              NaN       0.9             NaN
    2    s    b              0.8       NaN             NaN
    """
    keys = next((list(k) for k in COMPARE_KEYS if set(k) <= set(new.columns) and set(k) <= set(before.columns)),
                None)
    if keys is None:
        raise ValueError(f"compare: the saved table has none of the bench's row keys {COMPARE_KEYS}; "
                         f"its columns: {list(before.columns)}")
    values = [c for c in COMPARE_VALUES if c in new.columns and c in before.columns]
    then = before[keys + values].rename(columns={c: f"{c}_before" for c in values})
    merged = new[keys + values].merge(then, on=keys, how="left")      # in the new table's order,
    gone = then.merge(new[keys], on=keys, how="left", indicator=True)  # then the rows it no longer has
    merged = pd.concat([merged, gone[gone["_merge"] == "left_only"].drop(columns="_merge")], ignore_index=True)
    out = merged[keys].copy()
    for c in values:
        out[f"{c}_before"] = merged[f"{c}_before"]
        out[c] = merged[c]
        out[f"{c}_ratio"] = merged[c] / merged[f"{c}_before"]
    return out.dropna(axis=1, how="all")


# What a user's run spends beyond the `sync_sgd` row (`_algorithm_entry(..., rundir=True)`).
RECORD_COST = ("the client writes every worker's row of every step to steps.csv as text (shortest round-trip "
               "floats, 3-4 us a row: at the teaching size two workers make ~20,000 rows a second, 6-8% of a "
               "core) and to the binary spool, on the cores the workers train on; its checkpoint "
               "requests travel in shared memory on one host, so they cost nothing between checkpoints")


# What a worker of each communication pattern (`config.registry.PATTERNS`) spends besides
# its own gradient steps: the algorithm's own cost, which no engine removes. With the bench's
# defaults (2 workers, tau 1) every exchange happens every step.
SPENDS: dict[str, str] = {
    "none": "nothing: one process, no exchange",
    "allreduce": "an allreduce of the gradient every step, and the wait for the slower worker at it (the bare "
                 "sync loop spends the same; sync_sgd's gap to it is the engine's: the loop's bookkeeping (each "
                 "step's record, clocks and packed tail), and on Dask what the client, the scheduler and each "
                 "worker's event loop handle on the same cores (heartbeats, the control's poll once a second, "
                 "records; the step rows go through shared memory on one host), each a moment in which a "
                 "worker's partner waits)",
    "server": "a push of its gradient and a pull of the whole parameters every step, through one server that "
              "applies one update at a time (the other worker's push queues behind it)",
    "shared": "nothing but its updates to one shared array (no exchange, no lock)",
    "round_robin": "a master's turn: every tau steps an elastic exchange with the centre, in strict rank order, so "
                   "a worker waits for the other's turn before its own",
    "elastic_server": "every tau steps an elastic exchange with the centre (its parameters there and back), first "
                      "come first served",
    "elastic_shared": "every tau steps an elastic update of the centre in shared memory (no lock)",
    "elastic_allreduce": "every tau steps an allreduce of the elastic differences and the centre's update on every "
                         "worker, waiting for the slower worker",
    "tournament": "tournaments: every round its trainer's model goes to a partner, which scores both on a "
                  "held-out batch (forward passes that train nothing) and keeps the better",
    "host": "a master's turn every step: the gradient chunks go to the CPU master, which sums them and updates "
            "while the workers wait for the new weights",
    "local_allreduce": "every tau steps an allreduce of the parameters (diloco: and an outer optimiser step), "
                       "waiting for the slower worker",
    "post_local_allreduce": "an allreduce of the gradient every step until post_local_epoch, then of the "
                            "parameters every tau steps",
    "gossip": "every tau steps its parameters to each neighbour and theirs back (the topology's degree times the "
              "parameters), waiting for the slowest neighbour",
    "pairwise": "an atomic average with one neighbour's model through the table of models every step, one pair "
                "at a time",
}


def spending_notes(table: pd.DataFrame, size: str, below: float = 0.8, rounds: pd.DataFrame | None = None) -> list[str]:
    """One note per algorithm of `size` that ran under `below` of its limit: what it spends
    besides its own steps (its pattern's `SPENDS`), with its share of time in exchanges;
    sync_sgd's against the bare sync loop too. With `rounds` (the rows of every round, a
    "round" column), a ratio to a bare loop is the median of each round's own ratio (the
    two measured seconds apart, where the rounds' rows are minutes apart) with its range.

    >>> t = pd.DataFrame({"what": ["bare sync loop (no engine)", "sync_sgd", "easgd", "async_sgd"],
    ...                   "vs_limit": [0.8, 0.72, 0.5, 0.9], "comm_fraction": [float("nan"), 0.3, 0.6, 0.1]})
    >>> for note in spending_notes(t, "teaching"):
    ...     print(note.split(": ")[1])
    sync_sgd at 0.72 of the limit (0.90 of the bare sync loop; 30% of its time in exchanges)
    easgd at 0.50 of the limit (60% of its time in exchanges)
    >>> t.loc[4] = [PLAIN_BARE, 0.85, float("nan")]; t.loc[5] = [PLAIN_ENGINE, 0.8, 0.2]
    >>> print(spending_notes(t, "teaching")[0].split(": ")[1])
    sync_sgd at 0.72 of the limit (0.90 of the bare sync loop; its loop in plain processes, no client, 0.94 of the bare loop there; 30% of its time in exchanges)
    >>> r = pd.DataFrame({"what": ["bare sync loop (no engine)", "sync_sgd"] * 3, "round": [0, 0, 1, 1, 2, 2],
    ...                   "vs_limit": [0.8, 0.76, 0.9, 0.72, 0.8, 0.8]})
    >>> print(spending_notes(t.iloc[:2], "teaching", rounds=r)[0].split(": ", 1)[1].split("): ")[0] + ")")
    sync_sgd at 0.72 of the limit (0.95 of the bare sync loop, round by round 0.80-1.00; within 5% of it: not resolved by 3 rounds on this machine now (the median's 75% interval 0.80-1.00 reaches 0.95); 30% of its time in exchanges)
    >>> u = pd.DataFrame({"what": ["sync_sgd", RUNDIR], "vs_limit": [0.75, 0.6], "comm_fraction": [0.2, 0.3]})
    >>> print(spending_notes(u, "teaching")[-1].split(": ")[1])
    sync_sgd into a run directory at 0.60 of the limit (0.80 of sync_sgd with its rows in memory)
    """
    from ..algorithms import REGISTRY
    by = dict(zip(table["what"], table["vs_limit"]))
    bare = by.get("bare sync loop (no engine)")
    plain_bare, plain_engine = by.get(PLAIN_BARE), by.get(PLAIN_ENGINE)

    def against(what: str, base: str, base_value: float, value: float) -> tuple[str, str]:
        """`what` over `base` (the ratio, and its range or ""): round by round where there were
        rounds, else of the medians."""
        ratio = paired(what, base)
        if ratio is not None:
            return f"{ratio.median():.2f}", f", round by round {ratio.min():.2f}-{ratio.max():.2f}"
        return f"{value / base_value:.2f}", ""

    def paired(what: str, base: str) -> pd.Series | None:
        """Each round's ratio of `what` to `base` (measured seconds apart), or None without rounds."""
        if rounds is not None and "round" in rounds and rounds["round"].nunique() > 1:
            wide = rounds.pivot_table(index="round", columns="what", values="vs_limit")
            if what in wide and base in wide:
                ratio = (wide[what] / wide[base]).dropna()
                if len(ratio) > 1:
                    return ratio
        return None
    notes = []
    for _, row in table.iterrows():
        spec = REGISTRY.get(row["what"])
        if spec is None or not row["vs_limit"] < below:
            continue
        extra = ""
        if spec.pattern == "allreduce" and bare:
            mid, spread = against(row["what"], "bare sync loop (no engine)", bare, row["vs_limit"])
            extra = f"{mid} of the bare sync loop{spread}; "
            if row["what"] == "sync_sgd":
                extra += engine_target(paired("sync_sgd", "bare sync loop (no engine)"))
        if row["what"] == "sync_sgd" and plain_bare and plain_engine:   # the loop alone, and what Dask adds
            mid, spread = against(PLAIN_ENGINE, PLAIN_BARE, plain_bare, plain_engine)
            extra += f"its loop in plain processes, no client, {mid} of the bare loop there{spread}; "
        share = row.get("comm_fraction", float("nan"))
        spent = f"{share:.0%} of its time in exchanges" if pd.notna(share) else "its exchanges not timed"
        notes.append(f"{size}: {row['what']} at {row['vs_limit']:.2f} of the limit ({extra}{spent}): "
                     f"{SPENDS[spec.pattern]}")
    if RUNDIR in by and "sync_sgd" in by:
        mid, spread = against(RUNDIR, "sync_sgd", by["sync_sgd"], by[RUNDIR])
        notes.append(f"{size}: sync_sgd into a run directory at {by[RUNDIR]:.2f} of the limit ({mid} of sync_sgd "
                     f"with its rows in memory{spread}): {RECORD_COST}")
    return notes


ENGINE_TARGET = 0.95   # sync_sgd's speed as a fraction of the bare sync loop's that the engine aims at (issue 51)


def engine_target(ratios: pd.Series | None, target: float = ENGINE_TARGET) -> str:
    """Whether sync_sgd is within 1 - `target` of the bare loop, as far as the rounds can
    tell: each round's ratio (the two measured seconds apart), and the interval that holds
    their distribution's median with probability >= 75% (`measure.median_interval_rank`, the
    rule every "+-" of the workbench uses): above the target, below it, or across it, said
    so. "" without rounds (one round's ratio says nothing of its spread).

    >>> engine_target(pd.Series([0.97, 0.96, 0.98, 0.99, 0.96, 0.97]))
    "within 5% of it: yes (the median's 75% interval 0.96-0.98, 6 rounds); "
    >>> engine_target(pd.Series([0.92, 0.87, 1.03, 0.95, 0.90, 0.93]))
    "within 5% of it: not resolved by 6 rounds on this machine now (the median's 75% interval 0.90-0.95 reaches 0.95); "
    """
    from ..measure import median_interval
    if ratios is None or len(ratios) < 2:
        return ""
    lo, hi = median_interval(list(ratios))
    n = len(ratios)
    band = f"the median's 75% interval {lo:.2f}-{hi:.2f}"
    if lo >= target:
        return f"within {1 - target:.0%} of it: yes ({band}, {n} rounds); "
    if hi < target:
        return f"within {1 - target:.0%} of it: no ({band}, {n} rounds); "
    return (f"within {1 - target:.0%} of it: not resolved by {n} rounds on this machine now ({band} "
            f"reaches {target:.2f}); ")


def verdict(table: pd.DataFrame, size: str, ours: str = "sync_sgd", margin: float = 0.15) -> str:
    """One line: our synchronous efficiency against DDP's, each against its own limit.

    >>> t = pd.DataFrame({"what": ["sync_sgd", "PyTorch DDP (gloo)"], "vs_limit": [0.9, 0.6]})
    >>> print(verdict(t, "teaching"))
    teaching: sync_sgd 0.90 of our limit, DDP 0.60 of torch's: +0.30 (target +0.15: met)
    """
    by = dict(zip(table["what"], table["vs_limit"]))
    if ours not in by or "PyTorch DDP (gloo)" not in by:
        return f"{size}: no DDP comparison (torch not importable, or {ours} not measured)"
    d = by[ours] - by["PyTorch DDP (gloo)"]
    return (f"{size}: {ours} {by[ours]:.2f} of our limit, DDP {by['PyTorch DDP (gloo)']:.2f} of torch's: "
            f"{d:+.2f} (target +{margin:.2f}: {'met' if d >= margin else 'NOT met'})")
