"""Why are N workers (not) faster than one? A run's step, decomposed, and what would change it.

`explain(runs)` reads one run, or a 1-vs-N pair (any number of runs: each against the one
with fewest workers), from its records alone and says:

1. **What limits it**, in its first line: ``limited by: <what>`` with the numbers. A worker's
   step (its mean period in the steady window, `measure.steady_mask`) is the sum of five
   parts: **compute** (booked compute on a core), **the exchange** (`comm_s`: moving bytes),
   **waiting for the slowest worker** (`wait_s`), **the engine's own overhead** (the period
   minus what the worker booked: the loop, its records, rank 0's evaluations) and
   **contention from other processes** (booked compute the worker's thread spent off a
   core, `summary["machine"]["workers"][i]["stalled_s"]`; real runs only). With N workers
   the ideal step is the 1-worker step at the same global batch divided by N; what the
   N-worker step spends beyond that ideal is split into the same parts (compute that does
   not shrink: a fixed cost per step), and the largest one is the limit. Within 20% of the
   ideal, N workers scale and compute is the limit. A lone run of N workers is compared
   with a 1-worker step guessed from it, given as a range (one run cannot split a cost per
   call from a cost per row) with the command that measures it, and its limit worked out
   under both readings (named as a guess where they differ); a 1-worker run, with itself.
   Where either run's machine note says other processes took cores (`util.machine.note`),
   the limit and the advice cannot be told from the runs, and it says so instead.
2. **What would change the answer**, from the cost model fitted on the runs themselves
   (`costmodel.fit_compute`: compute c0 + c1 b per worker of b samples, two points when a
   1-worker run is given; the exchange as measured, split into latency `A alpha` and
   bytes `B beta` by the run's algorithm's terms, `costmodel.exchange_terms`, with the
   network's documented alpha, as `costmodel.calibrate` does for one point):
   - the global batch at which N workers beat one by `TARGET` (1.5x), in closed form
     (strong scaling: the global batch split N ways; waiting taken as the measured share
     of compute, as a straggler by jitter waits in proportion to the compute);
   - the model size (parameters and FLOPs scaled together) at which they would;
   - the network bandwidth below which DiLoCo (`tau` 8) or top-k compression (1%) makes
     the N-worker step `PAYS` (1.25x) faster than the plain exchange (their own compute,
     compressing, left out: an upper bound on what they gain);
   - the straggler: the rank that computes longest, and how often it is the slowest.
   Each prediction states its uncertainty: the 16th-84th percentile over `RESAMPLES`
   bootstrap resamples of the runs' steady steps (whole synchronous steps resampled
   together); a simulated run without jitter is exact (virtual time).

`pick_runs(history)` chooses what the dashboard's "why" panel explains after a run (the
run, and an earlier run of the same config on another worker count when there is one);
`to_html` renders an `Explanation` for it. Validated on seeded simulated cases and a real
one (tests/test_explain.py, benchmarks/explain_validation.py; docs/explain.md).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import measure
from ..config import ConfigError
from ..config.registry import specs
from ..measure import duration_text as _ms
from .costmodel import (
    BYTES_PER_PARAM,
    NETWORKS,
    allreduce_of,
    compressed_terms,
    exchange_terms,
    n_params_of,
    trainers_knob,
)

MEASURE_ONE = "workbench explain ONE_WORKER_RUN THIS_RUN"   # what measures a lone run's 1-worker step
TARGET = 1.5          # "N workers beat one by 1.5x": the speed-up the crossover predictions aim at
PAYS = 1.25           # DiLoCo or compression "pays" when the step is this much faster with it
NEAR_IDEAL = 0.2      # within this share of the step from the ideal: N workers scale, compute limits
STRAGGLER = 0.05      # a rank computing this much longer than the others' median is named a straggler
SLOWEST_MOST = 0.75   # ... when beyond its noise, or the slowest in this share of the steps
DILOCO_TAU = 8        # the DiLoCo whose exchange every tau steps the network prediction tries
TOPK_RATIO = 0.01     # ... and the top-k compression ratio
RESAMPLES = 200       # bootstrap resamples of the steady steps
SEED = 0              # of the resampling: the same runs give the same explanation
PARTS = ("compute", "exchange", "wait", "overhead", "contention")
NAMES = {"compute": "compute that does not shrink with more workers", "exchange": "the exchange",
         "wait": "waiting for the slowest worker", "overhead": "the engine's own overhead",
         "contention": "contention from other processes",
         "machine": "a busy machine (the limit cannot be told from these runs)"}


# ------------------------------------------------------------------------------ one run's step
@dataclass
class RunSteps:
    """One run's steady steps, aggregated per block (a synchronous step: every worker's row
    of it; an asynchronous run: each row), with what the explanation reads of its summary."""

    label: str
    workers: int
    batch: int                  # the global batch
    rate: float                 # steady samples/s (`summary["samples_per_s"]`)
    simulated: bool
    deterministic: bool         # simulated without jitter: every resample is the same run
    algorithm: str
    pattern: str
    config: dict
    n_bytes: float              # bytes of the vector the exchange moves (a timing model's, simulated)
    network: str | None         # a NETWORKS name whose alpha splits the exchange, or None
    sums: np.ndarray            # (blocks, 7): rows, compute, comm, wait, period, samples, and the
    #                             compute spread (the step's slowest compute minus each row's own)
    evaluated: np.ndarray       # (blocks,): 1 where the block's steps followed an evaluation
    n_train: int                # the training set: evaluations once per epoch come every n_train / batch steps
    eval_every: int | None      # steps between evaluations when the config sets it
    contention_s: float         # per worker step, off-core compute (real runs), constant
    per_rank: pd.DataFrame      # rank -> mean compute, share of steps it was the slowest
    machine_note: str | None
    free_cores: float | None = None   # the usable cores other processes (and steal) left the run; None: simulated
    window_note: str | None = None    # a steady window too short to time its rate (`measure.window_note`)
    comm: str | None = None     # the collective a real run used (`summary["comm"]`: shm, dask, nccl, threads),
    #                             or the allreduce a simulated one was charged (`summary["sim_allreduce"]`)
    busy_note: str | None = None   # a worker took on another client's tasks mid-run (`summary["busy_note"]`)
    rounds: list = field(default_factory=list)   # every round's run directory when it is one of several (`_rounds`)
    round_rates: list = field(default_factory=list)   # or every round's samples/s, given (`explain(round_rates=)`)

    def evals_per_step(self, batch: float | np.ndarray) -> float | np.ndarray:
        """Evaluations per step at a global batch: 1 / eval_every, else one per epoch."""
        return 1.0 / self.eval_every if self.eval_every else np.asarray(batch, dtype=float) / self.n_train

    def means(self, weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Per worker step: compute, exchange, wait, overhead, period and samples, each an
        array over `weights` (resample counts per block; None: the run as measured); and the
        overhead split into a step's own (`step_overhead`) and each evaluation's extra
        (`eval_s`: what a step after an evaluation took beyond the others; 0 when none was seen)."""
        w = np.ones((1, len(self.sums))) if weights is None else weights
        tot = w @ self.sums                           # (R, 7)
        rows = np.maximum(tot[:, 0], 1e-300)
        compute, comm, wait, period, samples, spread = (tot[:, k] / rows for k in range(1, 7))
        overhead = np.maximum(period - compute - comm - wait, 0.0)
        spare = self.sums[:, 4] - self.sums[:, 1] - self.sums[:, 2] - self.sums[:, 3]   # unbooked, per block
        plain, after = (w * (1 - self.evaluated)), (w * self.evaluated)
        with np.errstate(divide="ignore", invalid="ignore"):
            step_oh = (plain @ spare) / np.maximum(plain @ self.sums[:, 0], 1e-300)
            eval_oh = np.where(after @ self.sums[:, 0] > 0,
                               (after @ spare) / np.maximum(after @ self.sums[:, 0], 1e-300) - step_oh, 0.0)
        return {"compute": compute, "exchange": comm, "wait": wait, "overhead": overhead,
                "period": np.maximum(period, compute + comm + wait), "samples": samples,
                "step_overhead": np.maximum(step_oh, 0.0), "eval_s": np.maximum(eval_oh, 0.0),
                "spread": np.minimum(spread, wait)}


def _steady_rows(result: Any) -> pd.DataFrame:
    """The steady rows of a run's steps with each row's period (its end to the worker's
    previous end)."""
    steps = result.steps
    if not len(steps):
        raise ConfigError("RUN", "a run with step records (it ran no step)", result.summary.get("run_id"))
    steps = steps.sort_values(["worker", "step"], kind="stable")
    period = steps.groupby("worker")["time"].diff()
    mask, _ = measure.steady_mask(steps)
    rows = steps.assign(period=period)[mask & period.notna()]
    if not len(rows):   # a very short run: every row with a predecessor
        rows = steps.assign(period=period)[period.notna()]
    if not len(rows):
        raise ConfigError("RUN", "a run of at least 2 steps per worker", result.summary.get("run_id"))
    return rows


def _bytes_and_network(result: Any) -> tuple[float, str | None]:
    """Bytes of the exchanged vector, and the network whose alpha splits the exchange."""
    s = result.summary
    cfg = s.get("config") or {}
    timing = cfg.get("timing_model")      # a published network's size stands for the model's (simulated)
    if s.get("simulated") and timing:
        from ..sim.timing_models import TIMING_MODELS
        n = TIMING_MODELS[timing].n_params
    else:
        n = n_params_of(result)
    if s.get("simulated"):
        network = s.get("network")
    else:   # a real run on one host met in shared memory (or its threads' memory); one across hosts
        #     (the ring over Dask's comms, NCCL) on a link no profile documents: its exchange is not split
        network = "shm" if s.get("comm") in ("shm", "threads", None) else None
    return float(n * BYTES_PER_PARAM), network if network in NETWORKS else None


def _free_cores(state: dict | None) -> float | None:
    """The cores a real run could have had: the usable cores less what other processes and
    steal took (`util.machine`); None without that record (simulated runs) or where some
    workers ran on other hosts.

    >>> _free_cores({"cores": 2, "other_cores": 1.7, "steal_cores": 0.0})
    0.3
    """
    if not state or state.get("other_cores") is None or state.get("workers_elsewhere"):
        return None   # (workers on other hosts: this host's free cores do not bound them)
    free = float(state["cores"]) - float(state["other_cores"]) - float(state.get("steal_cores") or 0.0)
    return round(max(free, 0.05), 6)


def _n_train(cfg: dict, rows: pd.DataFrame, batch: int) -> int:
    """The training set's size: a built-in dataset's from its entry (nothing loaded); any
    other's (a data file or text of the user's, which may have moved or changed since) from
    the run's own rows, whose `epoch` is (step + 1) / steps per epoch: that many global
    batches. (It set how often the run evaluated: once an epoch.)

    >>> rows = pd.DataFrame({"step": [6.0, 13.0, 20.0], "epoch": [1.0, 2.0, 3.0]})
    >>> _n_train({"dataset": "/data/iris.csv"}, rows, 16), _n_train({"dataset": "digits"}, rows, 16)
    (112, 1438)
    """
    from ..data.dataset import DATASETS
    info = DATASETS.get(str(cfg.get("dataset")))
    if info is not None:
        return max(1, info.shape(int(cfg.get("n_samples") or 10000), int(cfg.get("n_features") or 64),
                                 int(cfg.get("n_classes") or 10)).n_train)
    epoch = rows["epoch"].to_numpy(dtype=float) if "epoch" in rows else np.zeros(0)
    seen = epoch > 0
    if not seen.any():
        return 1
    per_epoch = float(np.median((rows["step"].to_numpy(dtype=float)[seen] + 1) / epoch[seen]))
    return max(1, round(per_epoch) * batch)


def run_steps(result: Any, label: str | None = None) -> RunSteps:
    """`RunSteps` of a finished run (a `RunResult`, or a run directory)."""
    from ..results.result import RunResult
    if not isinstance(result, RunResult):
        result = RunResult.load(result)
    s = result.summary
    cfg = s.get("config") or {}
    algorithm = s.get("algorithm") or cfg.get("algorithm")
    spec = specs().get(algorithm)
    if spec is None:
        raise ConfigError("RUN", "a run of a known algorithm", algorithm)
    rows = _steady_rows(result)
    # the run's workers, not those with a row in its steady window (a short run's window can
    # hold one worker's rows alone: a pair was read as one worker)
    workers = max(len(s.get("workers") or []), int(rows["worker"].nunique()))
    vals = rows[["compute_s", "comm_s", "wait_s", "period", "samples"]].to_numpy(dtype=float)
    if spec.sync:                                     # one block per synchronous step
        keys, inverse = np.unique(rows["step"].to_numpy(), return_inverse=True)
    else:
        keys, inverse = np.arange(len(rows)), np.arange(len(rows))
    sums = np.zeros((len(keys), 7))
    np.add.at(sums[:, 0], inverse, 1.0)
    for k in range(5):
        np.add.at(sums[:, k + 1], inverse, vals[:, k])
    if spec.sync:   # the wait a step's slowest compute causes: its max over the rows minus each row's own
        slowest = np.full(len(keys), -np.inf)
        np.maximum.at(slowest, inverse, vals[:, 0])
        sums[:, 6] = slowest * sums[:, 0] - sums[:, 1]
    # a step right after an evaluation carries its cost (rank 0's forward pass, the partials' exchange)
    after_eval = set((np.asarray(result.evals["step"], dtype=int) + 1).tolist()) if len(result.evals) else set()
    row_after = rows["step"].isin(after_eval).to_numpy(dtype=float)
    evaluated = np.zeros(len(keys))
    np.maximum.at(evaluated, inverse, row_after)
    contention = 0.0
    loops = (s.get("machine") or {}).get("workers") or []
    counts = result.steps.groupby("worker").size()
    stalls = [float(w.get("stalled_s") or 0.0) / max(int(counts.get(w.get("rank"), 0)), 1) for w in loops
              if w.get("stalled_s") is not None]
    if stalls:
        contention = float(np.mean(stalls))
    grouped = rows.groupby("worker")["compute_s"]
    per_rank = grouped.mean().to_frame("compute_s")
    per_rank["compute_se"] = (grouped.std(ddof=1) / np.sqrt(grouped.size())).fillna(0.0)
    if spec.sync and workers > 1:
        busy = rows["compute_s"] + rows["comm_s"]
        slowest = rows.loc[busy.groupby(rows["step"]).idxmax(), "worker"]
        per_rank["slowest_share"] = slowest.value_counts(normalize=True).reindex(per_rank.index).fillna(0.0)
    else:
        per_rank["slowest_share"] = math.nan
    n_bytes, network = _bytes_and_network(result)
    batch = int(cfg.get("batch_size") or round(float(rows["samples"].mean()) * workers))
    jitter = float(s.get("jitter") or cfg.get("jitter") or 0.0)
    return RunSteps(label=label or f"{workers} worker{'s' if workers != 1 else ''}", workers=workers,
                    batch=batch, rate=float(s.get("samples_per_s") or 0.0), simulated=bool(s.get("simulated")),
                    deterministic=bool(s.get("simulated")) and jitter == 0.0, algorithm=algorithm,
                    pattern=spec.pattern, config=cfg, n_bytes=n_bytes, network=network, sums=sums,
                    evaluated=evaluated, n_train=_n_train(cfg, rows, batch), eval_every=cfg.get("eval_every"),
                    contention_s=contention, per_rank=per_rank, machine_note=s.get("machine_note"),
                    free_cores=_free_cores(s.get("machine")), comm=s.get("sim_allreduce") if s.get("simulated") else s.get("comm"),
                    busy_note=s.get("busy_note"),
                    window_note=measure.window_note(s.get("steady"), bool(s.get("simulated"))))


# ------------------------------------------------------------------------------ the model, vectorised
def _line(b_lo: np.ndarray, c_lo: np.ndarray, b_hi: float, c_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """compute(b) = c0 + c1 b through two points (per-worker batch, mean compute), as
    `costmodel.fit_compute` fits them: c0 >= 0 and c1 > 0, else the line through the origin
    and the larger batch's point; one size (b_lo == b_hi): c0 = 0."""
    b_lo = np.asarray(b_lo, dtype=float)
    if np.all(b_lo == b_hi):
        return np.zeros_like(c_hi), c_hi / b_hi
    c1 = (c_hi - c_lo) / (b_hi - b_lo)
    c0 = c_hi - c1 * b_hi
    bad = (c0 < 0) | (c1 <= 0)
    c1 = np.where(bad, c_hi / b_hi, c1)
    c0 = np.where(bad, 0.0, c0)
    return c0, c1


@dataclass
class Model:
    """The cost model fitted on the runs (arrays over resamples): a worker's compute
    c0 + c1 b, the N-worker run's exchange (latency part `x_alpha`, bytes part `x_beta`),
    waiting as a share of compute (`omega`), and each side's per-step overhead."""

    workers: int
    batch: float
    c0: np.ndarray
    c1: np.ndarray
    x_alpha: np.ndarray
    x_beta: np.ndarray
    omega: np.ndarray
    o_one: np.ndarray             # a step's own overhead, 1 worker and N
    o_n: np.ndarray
    w_fixed: np.ndarray = field(default_factory=lambda: np.zeros(1))   # waiting not caused by compute spread
    e_one: np.ndarray = field(default_factory=lambda: np.zeros(1))   # one evaluation's extra, 1 worker and N
    e_n: np.ndarray = field(default_factory=lambda: np.zeros(1))
    x_one: np.ndarray = field(default_factory=lambda: np.zeros(1))   # the 1-worker run's own exchange a step
    #                               (its one-rank collective and tail, as measured; 0 without that run)
    eval_rate: float = 0.0        # evaluations per step per sample of the global batch (once per epoch: 1 / n_train)
    eval_fixed: float = 0.0       # ... or per step whatever the batch (eval_every: 1 / eval_every)
    a_terms: float = 0.0          # the exchange's A (messages) and B (bytes) per step
    b_terms: float = 0.0
    alpha: float = math.nan
    parallel: float = 0.0         # how many workers' worth of compute runs at once (0: all of them); a busy
    #                               machine's free cores bound it: the 1-worker run's free share against the N's
    k_compute: np.ndarray | None = None   # ... or the N-worker run's own compute shows fewer (`fit`); None: not

    @property
    def k_cores(self) -> float:
        """Workers' worth of compute at once as the free cores allow (all N on an idle machine)."""
        return self.parallel if self.parallel > 0 else float(self.workers)

    @property
    def k(self) -> float | np.ndarray:
        return self.k_cores if self.k_compute is None else np.minimum(self.k_cores, self.k_compute)

    @property
    def k_measured(self) -> float:
        """`k` of the run as measured (not a resample)."""
        return float(np.ravel(self.k)[0])

    def _evals(self, batch: float | np.ndarray) -> float | np.ndarray:
        return self.eval_fixed + self.eval_rate * np.asarray(batch, dtype=float)

    def step_one(self, batch: float | np.ndarray) -> np.ndarray:
        return self.c0 + self.c1 * batch + self.o_one + self.x_one + self.e_one * self._evals(batch)

    def step_n(self, batch: float | np.ndarray, scale: float = 1.0) -> np.ndarray:
        compute = (self.c0 + scale * self.c1 * batch / self.k) * (1.0 + self.omega)
        return compute + self.w_fixed + self.x_alpha + scale * self.x_beta + self.o_n + self.e_n * self._evals(batch)

    def speedup(self, batch: float | np.ndarray) -> np.ndarray:
        return self.step_one(batch) / self.step_n(batch)

    def crossover_batch(self, target: float = TARGET) -> np.ndarray:
        """The global batch at which N workers run `target` x one (strong scaling); inf when
        no batch reaches it (waiting grows with compute: at most N / (1 + omega)), 0 when
        every batch does. Both steps are linear in the batch, so this is closed form."""
        coef = (self.c1 + self.e_one * self.eval_rate
                - target * ((1.0 + self.omega) * self.c1 / self.k + self.e_n * self.eval_rate))
        rhs = (target * (self.c0 * (1.0 + self.omega) + self.w_fixed + self.x_alpha + self.x_beta + self.o_n
                         + self.e_n * self.eval_fixed) - self.c0 - self.o_one - self.x_one - self.e_one * self.eval_fixed)
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(coef > 0, rhs / coef, math.inf)
        return np.where(np.isfinite(b) & (b < 0), 0.0, b)

    def crossover_scale(self, target: float = TARGET) -> np.ndarray:
        """The factor on the model's size (parameters and FLOPs together) at which N workers
        run `target` x one at the run's batch; inf when none does (the exchange's bytes
        grow with the model as fast as its compute)."""
        b = self.batch
        ev = self._evals(b)
        coef = self.c1 * b - target * (1.0 + self.omega) * self.c1 * b / self.k - target * self.x_beta
        rhs = (target * (self.c0 * (1.0 + self.omega) + self.w_fixed + self.x_alpha + self.o_n + self.e_n * ev)
               - self.c0 - self.o_one - self.x_one - self.e_one * ev)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(coef > 0, rhs / coef, math.inf)
        return np.where(np.isfinite(s) & (s < 0), 0.0, s)

    def paying_bandwidth(self, a_alt: float, b_alt: float, gain: float = PAYS) -> np.ndarray:
        """Bytes/s below which an exchange of A' alpha + B' beta (DiLoCo, compression) makes
        the N-worker step `gain` x faster than this one; 0 when it never does, inf when it
        would at any bandwidth."""
        local = ((self.c0 + self.c1 * self.batch / self.k) * (1.0 + self.omega) + self.w_fixed + self.o_n
                 + self.e_n * self._evals(self.batch))
        per_message = self.x_alpha / self.a_terms if self.a_terms > 0 else np.zeros_like(self.x_alpha)   # as measured
        denom = self.b_terms - gain * b_alt
        num = (gain - 1.0) * local + (gain * a_alt - self.a_terms) * per_message
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.where(denom > 0, num / denom, math.inf)
        return np.where(beta <= 0, math.inf, 1.0 / beta)


def _allreduce(n: RunSteps) -> str:
    """The allreduce whose terms the run's exchange is read by (`costmodel.allreduce_of`): a
    real run's shared-memory or threads collective its own (their barrier meetings: one for a
    shm pair with a small model, else two; three for threads; not the ring's 2 (P-1)
    messages), and a simulated run's on the shm network alike (`costmodel.run_allreduce`); else the ring."""
    return allreduce_of(n.comm)


def _terms(n: RunSteps) -> tuple[float, float]:
    """(A, B) of the N-worker run's exchange per step (`costmodel.exchange_terms`)."""
    cfg = n.config
    knobs = {k: cfg[k] for k in ("compression_ratio", "compression_levels", "compression_rank") if k in cfg}
    if cfg.get("compression", "none") == "powersgd":
        return 0.0, 0.0
    try:
        t = exchange_terms(n.algorithm, n.workers, n.n_bytes, tau=int(cfg.get("tau") or 1),
                           round_size=int(cfg.get("round_size") or 50), compression=cfg.get("compression") or "none",
                           topology=cfg.get("topology") or "ring", allreduce=_allreduce(n),
                           **trainers_knob(n.algorithm, cfg), **knobs)
    except (ConfigError, ValueError, TypeError):
        return 0.0, 0.0
    return t if t is not None else (0.0, 0.0)


def _parallel(one: RunSteps | None, n: RunSteps) -> float:
    """Workers' worth of compute the N-worker run could run at once: min(N, its free cores);
    0 (all N) for simulated runs and where the machine's record is missing. Never divided by
    the 1-worker run's free share: a starved 1-worker run (0.3 free cores) made this 0.54 /
    0.3 = 1.8 for a 2-worker run that had 0.54 cores, a speed-up the machine never gave.

    >>> from types import SimpleNamespace as R
    >>> _parallel(R(free_cores=0.3), R(free_cores=0.54, workers=2))
    0.54
    >>> _parallel(None, R(free_cores=1.9, workers=2)), _parallel(R(free_cores=None), R(free_cores=None, workers=2))
    (1.9, 0.0)
    """
    if n.free_cores is None:
        return 0.0
    k = min(float(n.workers), n.free_cores)
    return 0.0 if k >= n.workers else max(k, 1e-3)


def _weights(blocks: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples + 1, blocks) counts: row 0 the run as measured, then bootstrap resamples."""
    w = np.zeros((resamples + 1, blocks))
    w[0] = 1.0
    if resamples:
        idx = rng.integers(0, blocks, (resamples, blocks))
        for r in range(resamples):
            w[r + 1] = np.bincount(idx[r], minlength=blocks)
    return w


def fit(one: RunSteps | None, n: RunSteps, resamples: int = RESAMPLES) -> tuple[Model, dict, dict | None]:
    """The cost model of `n` (and `one`, its 1-worker reference, or None), with the step
    parts of each: (Model over [measured, resamples...], n's parts, one's parts or None)."""
    rng = np.random.default_rng(SEED)
    r = 0 if n.deterministic and (one is None or one.deterministic) else resamples
    pn = n.means(_weights(len(n.sums), r, rng))
    p1 = one.means(_weights(len(one.sums), r, rng)) if one is not None else None
    bn = n.batch / n.workers
    if p1 is not None:
        c0, c1 = _line(np.full_like(pn["compute"], bn), pn["compute"], float(one.batch / one.workers), p1["compute"])
        o_one, e_one, x_one = p1["step_overhead"], p1["eval_s"], p1["exchange"]
    else:   # the 1-worker step predicted from the N-worker run: the same overheads
        c0, c1 = _line(np.full_like(pn["compute"], bn), pn["compute"], bn, pn["compute"])
        o_one, e_one, x_one = pn["step_overhead"], pn["eval_s"], np.zeros_like(pn["exchange"])
    a, b = _terms(n)
    alpha = NETWORKS[n.network].alpha if n.network else math.nan
    x = pn["exchange"]
    # the bytes at the network's documented bandwidth; the rest is per message (latency: on a busy
    # machine each meeting waits for a descheduled peer, which no bandwidth explains)
    x_beta = np.minimum(x, b * NETWORKS[n.network].beta) if n.network and b > 0 else x
    with np.errstate(divide="ignore", invalid="ignore"):   # waiting in proportion to the compute spread
        omega = np.where(pn["compute"] > 0, pn["spread"] / pn["compute"], 0.0)
    model = Model(workers=n.workers, batch=float(n.batch), c0=c0, c1=c1, x_alpha=x - x_beta, x_beta=x_beta,
                  omega=omega, o_one=o_one, o_n=pn["step_overhead"], w_fixed=np.maximum(pn["wait"] - pn["spread"], 0.0),
                  e_one=e_one, e_n=pn["eval_s"], x_one=x_one,
                  eval_rate=0.0 if n.eval_every else 1.0 / n.n_train,
                  eval_fixed=1.0 / n.eval_every if n.eval_every else 0.0, a_terms=a, b_terms=b, alpha=alpha,
                  parallel=_parallel(one, n))
    if p1 is not None:
        model.k_compute = _k_compute(c0, c1, float(n.batch), bn, pn["compute"])
    return model, pn, p1


def _compute_bound(model: Model) -> bool:
    """Whether the N-worker run's own compute (`k_compute`) is what bounds the model's `k`."""
    return model.k_compute is not None and float(np.ravel(model.k_compute)[0]) < model.k_cores


def _k_compute(c0: np.ndarray, c1: np.ndarray, batch: float, per_worker: float,
               measured: np.ndarray) -> np.ndarray | None:
    """Workers' worth of compute at once that the N-worker run's measured compute shows,
    where it computed its slice slower than the line through both runs can say (`_line`
    fell back: its compute per sample above the 1-worker run's, from another load on the
    cores or a cost that does not shrink with the slice); None where the line holds. With
    it the model gives back the measured N-worker step, and its predictions keep the
    shortfall instead of assuming N workers' worth of compute (which had a pair measured at
    0.71x predicted at 1.15x).

    >>> _k_compute(np.zeros(1), np.array([7.8e-6]), 16.0, 8.0, np.array([136e-6])).round(3).tolist()
    [0.918]
    >>> _k_compute(np.array([20e-6]), np.array([7e-6]), 16.0, 8.0, np.array([76e-6])) is None
    True
    """
    predicted = c0 + c1 * per_worker
    short = measured > predicted * (1 + 1e-9)
    if not short.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(short, c1 * batch / np.maximum(measured - c0, 1e-300), math.inf)


# ------------------------------------------------------------------------------ the explanation
@dataclass
class Explanation:
    """What `explain` found: the limit, the step's parts, the predictions, in words."""

    limit: str                       # a key of NAMES, or "compute" when N workers scale
    lines: list[str]                 # the first is "limited by: ..."
    parts: dict[str, float]          # seconds per worker step of the N-worker run (measured)
    excess: dict[str, float]         # ... beyond the ideal step (N > 1)
    predictions: dict[str, Any] = field(default_factory=dict)   # name -> (value, low, high) or text
    readings: dict[str, str] = field(default_factory=dict)      # a lone N-worker run's limit under each reading
    #   of its 1-worker step ("per row": compute shrinks with the rows; "per call": it does not): a key of NAMES,
    #   or "scales" (within NEAR_IDEAL of the ideal); {} otherwise

    @property
    def first_line(self) -> str:
        return self.lines[0]

    def text(self) -> str:
        return "\n".join(self.lines)


def _band(values: np.ndarray, fmt: Any, exact: bool) -> tuple[str, tuple[float, float, float]]:
    """'value (low-high)' of the measured value and the resamples' 16th-84th percentiles."""
    v = np.asarray(values, dtype=float)
    mid = float(v[0])
    rest = v[1:] if len(v) > 1 else v
    rest = np.where(np.isnan(rest), math.inf, rest)   # a resample with no answer: none (inf)
    with np.errstate(invalid="ignore"):
        lo, hi = (float(np.percentile(rest, 16)), float(np.percentile(rest, 84))) if len(v) > 1 else (mid, mid)
    if exact:
        return f"{fmt(mid)} (exact: virtual time, no jitter)", (mid, mid, mid)
    if math.isfinite(lo) and not math.isfinite(hi):
        return f"{fmt(mid)} ({fmt(lo)} or more; in some resamples none)", (mid, lo, hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"{fmt(mid)} (in most resamples none)", (mid, lo, hi)
    return f"{fmt(mid)} ({fmt(lo)}-{fmt(hi)})", (mid, lo, hi)


def _count(x: float) -> str:
    if not math.isfinite(x):
        return "none"
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def _gbps(bps: float) -> str:
    if not math.isfinite(bps):
        return "any"
    return f"{bps / 1e9:.3g} GB/s"


def explain_pair(one: RunSteps | None, n: RunSteps, resamples: int = RESAMPLES) -> Explanation:
    """Explain run `n` against its 1-worker reference `one` (None: the 1-worker step the
    cost model predicts from `n`)."""
    model, pn, p1 = fit(one, n, resamples)
    exact = n.deterministic and (one is None or one.deterministic)
    parts = {k: float(pn[k][0]) for k in ("compute", "exchange", "wait", "overhead")}
    cont = min(n.contention_s, parts["compute"])
    parts["compute"] -= cont
    parts["contention"] = cont
    step_n = float(pn["period"][0])
    P = n.workers
    lines: list[str] = []
    excess: dict[str, float] = {}
    readings: list[str] = []   # a lone run's limit if compute shrinks per row, and if it is all per call
    if P == 1:                                        # nothing to compare: the step's largest part
        limit = max(("compute", "overhead", "contention"), key=lambda k: parts[k])
        what = "compute" if limit == "compute" else NAMES[limit]
        lines.append(f"limited by: {what}: {_ms(parts[limit])} of a {_ms(step_n)} step "
                     f"({parts[limit] / step_n:.0%}) on 1 worker, {n.rate:,.0f} samples/s")
    else:
        ref_step = float(model.step_one(n.batch)[0])          # 1 worker, the same global batch
        c_ref = float((model.c0 + model.c1 * n.batch)[0])
        cont_share = (one.contention_s / max(float(p1["compute"][0]), 1e-300)) if one is not None else 0.0
        cont_share = min(cont_share, 1.0)
        excess = _excess(parts, model, n, c_ref, cont_share)
        ideal = ref_step / P
        beyond = step_n - ideal
        if one is not None and one.rate > 0:
            speed = f"{P} workers ran {n.rate / one.rate:.2f}x 1 worker ({n.rate:,.0f} vs {one.rate:,.0f} samples/s)"
        else:
            lo, hi = (float(v[0]) for v in _lone_speedups(model, n, pn))
            speed = (f"{P} workers at {n.rate:,.0f} samples/s; no 1-worker run: the model's guess from this run "
                     f"alone is {lo:.2f}x-{hi:.2f}x 1 worker ({hi:.2f}x if compute shrinks in proportion to the "
                     f"rows, {lo:.2f}x if it is all a cost per call, which one run cannot tell apart); measure it: "
                     f"run this config on 1 worker and pass both (`{MEASURE_ONE}`)")
        busy = _busy(one, n)
        limit = _limit_of(excess, beyond, step_n)   # "scales": within NEAR_IDEAL of the ideal, compute limits
        guess = ""
        if one is None and not busy:   # the limit under the other reading: 1 worker computes the batch in the slice's time
            c_call = float(pn["compute"][0])
            excess_call = _excess(parts, model, n, c_call, 0.0)
            beyond_call = step_n - (ref_step - c_ref + c_call) / P
            call = _limit_of(excess_call, beyond_call, step_n)
            readings[:] = [limit, call]
            if call == limit:
                guess = "; the same limit whether compute shrinks in proportion to the rows or is all a cost per call"
            else:
                share = excess_call[call] / step_n   # (never "scales": the per-call ideal is the smaller one)
                guess = (f"; a guess: this reads compute as shrinking in proportion to the rows; if it is all a cost "
                         f"per call, the limit is {_limit_name(call, model, parts, n)} ({share:.0%} of the step), "
                         f"and one run cannot tell which (`{MEASURE_ONE}` measures it)")
        if busy:
            limit = "machine"
            lines.append(f"limited by: cannot be told from these runs: the machine was busy ({busy}), so neither "
                         f"what limits {P} workers nor what would change it is theirs; {speed}")
        elif limit == "scales":
            limit = "compute"
            lines.append(f"limited by: compute: {_ms(parts['compute'])} of a {_ms(step_n)} step, within "
                         f"{max(beyond, 0) / step_n:.0%} of the ideal {_ms(ideal)}{guess}; {speed}")
        else:
            lines.append(f"limited by: {_limit_name(limit, model, parts, n)}: {_ms(excess[limit])} of a "
                         f"{_ms(step_n)} step on {P} workers ({excess[limit] / step_n:.0%}), where 1 worker's step "
                         f"split {P} ways would take {'(guessed from this run alone) ' if one is None else ''}"
                         f"{_ms(ideal)}{guess}; {speed}")
    lines.append(f"the step on {P} worker{'s' if P != 1 else ''} ({n.label}, global batch {n.batch}), "
                 f"per worker, {'virtual time' if n.simulated else 'steady window'}:")
    for k in PARTS:
        extra = f"   (beyond the ideal: {_ms(excess[k])})" if excess else ""
        if k == "contention" and parts[k] <= 0 and n.machine_note and not n.simulated:
            # the machine says other processes took cores, and this measure saw none: it is a lower bound
            extra += ("   (a lower bound: a stall shows only where a worker's CPU time falls short of its "
                      "booked compute, and its exchange's CPU time covers it; the note below says other "
                      "processes took cores)")
        lines.append(f"  {NAMES[k] if k != 'compute' else 'compute':<34} {_ms(parts[k]):>10}{extra}")
        if k == "overhead":
            lines.extend(_evaluations_line(n, pn, parts["overhead"]))
    if one is not None:
        lines.append(f"  1 worker's step at batch {one.batch}: {_ms(float(p1['period'][0]))} (compute "
                     f"{_ms(float(p1['compute'][0]))}, overhead {_ms(float(p1['overhead'][0]))})")
    lines.append(_straggler_line(n))
    if model.parallel:
        ref = f"; 1 worker's run {one.free_cores:.2g}" if one is not None and one.free_cores is not None else ""
        # the cap the free cores give (`k_cores`), not `k_measured`: where the workers' own compute shows
        # fewer at once, that is the compute line's to say (it printed the compute's 0.3x as the cores' cap)
        assumed = ("their compute measured fewer at once, the compute line below, which the predictions assume"
                   if _compute_bound(model) else "the predictions below assume so at every batch; at a small one they "
                   "take turns and can compute faster")
        lines.append(f"  cores: other processes left this run {n.free_cores:.2g} free cores{ref}: its {P} workers "
                     f"compute at most {model.k_cores:.2g}x one worker's rate where their compute overlaps ({assumed})")
    if _compute_bound(model):
        c_n, c_1 = float(pn["compute"][0]), float(p1["compute"][0])
        lines.append(f"  compute: each of the {P} workers computed its {n.batch / P:g} samples in {_ms(c_n)}, 1 worker "
                     f"its {one.batch} in {_ms(c_1)}: {model.k_measured:.2g} workers' worth of compute at once, not {P} "
                     f"(another load on the cores, or a cost that does not shrink with the slice; the predictions "
                     f"below assume so)")
    if n.machine_note:
        lines.append(f"  note: {n.machine_note}")
    for r in (one, n):   # the rates (and the measured speed-up) of a window too short to time them
        if r is not None and r.window_note:
            lines.append(f"  note: the {r.workers}-worker run: {r.window_note}")
    if n.busy_note:
        lines.append(f"  note: {n.busy_note}")
    if P > 1 and _busy(one, n):
        lines.append(f"what would change it: not predicted: other processes took a share of the cores that "
                     f"matters ({_busy(one, n)}); the exchange, the crossover batch and the network advice read "
                     f"from these runs would describe the load, not the algorithm (they changed with the load: "
                     f"2 workers limited by the exchange on a busy machine, by compute on an idle one). Rerun "
                     f"when each run's note is gone, or simulate (--simulate)")
        preds: dict[str, Any] = {}
    else:
        measured = (n.rate / one.rate if one is not None and one.rate > 0 else None)
        preds = _predictions(model, n, exact, lines, pn if one is None else None, measured)
    return Explanation(limit=limit, lines=lines, parts=parts, excess=excess, predictions=preds,
                       readings=dict(zip(("per row", "per call"), readings)))


def _excess(parts: dict[str, float], model: Model, n: RunSteps, c_ref: float, cont_share: float) -> dict[str, float]:
    """The N-worker step's parts beyond 1 worker's split N ways, 1 worker computing the global
    batch in `c_ref` (of which `cont_share` off a core)."""
    P = n.workers
    return {"compute": parts["compute"] - (1 - cont_share) * c_ref / P,
            "exchange": parts["exchange"] - float(model.x_one[0]) / P, "wait": parts["wait"],
            "overhead": parts["overhead"] - float((model.o_one + model.e_one * model._evals(n.batch))[0]) / P,
            "contention": parts["contention"] - cont_share * c_ref / P}


def _limit_of(excess: dict[str, float], beyond: float, step_n: float) -> str:
    """"scales" within `NEAR_IDEAL` of the ideal step (N workers scale: compute limits), else
    the part with the largest excess (a key of NAMES: "compute" is compute that does not shrink)."""
    return "scales" if beyond <= NEAR_IDEAL * step_n else max(excess, key=lambda k: excess[k])


def _limit_name(limit: str, model: Model, parts: dict[str, float], n: RunSteps) -> str:
    """A limit in words (the exchange with which of its parts dominates)."""
    if limit == "scales":
        return "compute, within the ideal's reach"
    return NAMES[limit] + (_exchange_kind(model, parts["exchange"], n) if limit == "exchange" else "")


def _busy(one: RunSteps | None, n: RunSteps) -> str:
    """"" when neither real run's machine was busy, else by how much, per run: a run is busy
    when its summary carries a machine note (`util.machine.note`: other processes or steal
    took `OTHERS_NOTICEABLE` of its cores or more, the rule every door's note follows), or
    says a worker took on another client's tasks beside its loop mid-run (`busy_note`).

    >>> from types import SimpleNamespace as R
    >>> busy = R(workers=2, simulated=False, machine_note="other processes used 1.6 of 2 cores during this run: x")
    >>> _busy(R(workers=1, simulated=False, machine_note=None), busy)
    'the 2-worker run: other processes used 1.6 of 2 cores'
    >>> _busy(None, R(workers=2, simulated=False, machine_note=None))
    ''
    >>> _busy(None, R(workers=2, simulated=False, machine_note="other processes used 1.6 of 2 cores of this host "
    ...                "during this run (2 workers on other hosts, whose load this host cannot see): x"))
    ''
    """
    said = []
    for r in (one, n):   # (a note of this host's load where the workers ran elsewhere says nothing of theirs)
        if r is not None and r.machine_note and not r.simulated and "on other hosts" not in r.machine_note:
            said.append(f"the {r.workers}-worker run: {r.machine_note.split(' during this run')[0]}")
        if r is not None and getattr(r, "busy_note", None):   # another client's tasks beside a worker's loop
            said.append(f"the {r.workers}-worker run: {r.busy_note.split(' beside its loop')[0]}")
    return "; ".join(said)


def _lone_speedups(model: Model, n: RunSteps, pn: dict) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of N workers' speed-up over the 1-worker step guessed from a lone N-worker
    run, over resamples, against its measured step. One run has compute at one slice size, so
    it cannot split a cost per call (c0) from a cost per row (c1): high assumes all per row
    (1 worker computes N times the slice, `fit`'s line through the origin), low all per call
    (1 worker computes the whole batch in the slice's time). The true 1-worker step lies
    between (the other parts as this run measured them); a pair with a per-call cost of 0.17
    ms measured 0.83x where the guess through the origin said 1.34x."""
    period = pn["period"]
    rest = model.step_one(n.batch) - (model.c0 + model.c1 * n.batch)
    return (pn["compute"] + rest) / period, model.step_one(n.batch) / period


def _against_measured(model: Model, P: int, band: tuple[float, float, float], measured: float | None) -> str:
    """Why the model's speed-up at the run's own batch misses the measured one, said only when
    the measured one lies outside the model's interval ("" otherwise, and without a measured
    pair): the free cores' cap, which holds at every batch while at this one the workers
    computed their slices at the rate of N (taking turns on the cores the machine left them,
    their waits in the exchange); else the two's different reading of the same runs.

    >>> one = np.ones(1)
    >>> m = Model(workers=2, batch=32.0, c0=0 * one, c1=one, x_alpha=one, x_beta=0 * one, omega=0 * one,
    ...           o_one=0 * one, o_n=0 * one, parallel=1.1)
    >>> _against_measured(m, 2, (0.35, 0.29, 0.41), 0.37)
    ''
    >>> _against_measured(m, 2, (0.35, 0.29, 0.41), 0.77)[:70]
    ' (below the measured 0.77x: the cores line caps the workers at 1.1 wor'
    >>> _against_measured(Model(workers=2, batch=32.0, c0=0 * one, c1=one, x_alpha=one, x_beta=0 * one,
    ...                         omega=0 * one, o_one=0 * one, o_n=0 * one), 2, (0.52, 0.19, 0.67), 0.77)[:40]
    ' (below the measured 0.77x: the model ad'
    """
    if measured is None or not math.isfinite(measured):
        return ""
    _, lo, hi = band
    if lo * 0.99 <= measured <= hi * 1.01:     # (1%: a deterministic run's exact value, rounded)
        return ""
    side = "below" if hi < measured else "above"
    if side == "below" and model.parallel and model.k_compute is None and model.k_cores < P:
        why = (f"the cores line caps the workers at {model.k_cores:.2g} workers' worth of compute at every batch, "
               f"while at this one they computed their slices at the rate of {P}")
    else:
        why = ("the model adds up the workers' mean step parts, the measured speed-up divides the runs' steady "
               "samples/s, which count the window's wall time with its slowest steps and pauses")
    return f" ({side} the measured {measured:.2f}x: {why})"


def _evaluations_line(n: RunSteps, pn: dict, overhead: float) -> list[str]:
    """The part of the overhead the run's evaluations make, as a line under it (none when
    no evaluation fell in the steady window or the steps after them took no longer): the
    overhead less a step's own (`RunSteps.means`: the steps that followed no evaluation),
    and what each evaluation added to every worker's step after it. A short run's overhead
    is mostly its evaluations (rank 0's pass over the test set, which a synchronous run's
    other workers wait for at the next exchange), not the loop's bookkeeping."""
    count = int(n.evaluated.sum())
    share = max(overhead - float(pn["step_overhead"][0]), 0.0)
    if count == 0 or share <= 0.0:
        return []
    how = f"every {n.eval_every} steps" if n.eval_every else "once an epoch"
    return [f"    {'of which evaluations':<32} {_ms(share):>10}   ({count} in the window, {how}, each "
            f"{_ms(float(pn['eval_s'][0]))} on the step after it; the loop itself {_ms(overhead - share)})"]


def _exchange_kind(model: Model, exchange: float, n: RunSteps) -> str:
    """" (latency: ...)" or " (bytes: ...)": which part of the exchange dominates."""
    if not n.network or exchange <= 0:
        return ""
    lat = float(model.x_alpha[0])
    if lat >= 0.5 * exchange:
        each = lat / model.a_terms if model.a_terms > 0 else lat
        what = "barrier meeting" if _allreduce(n) in ("shm", "threads") else "message"   # (shared memory meets, a ring sends)
        return (f" (latency: {model.a_terms:g} {what}{'s' if model.a_terms != 1 else ''} a step, {_ms(each)} each; "
                f"{n.network}'s documented {_ms(model.alpha)})")
    return f" (bytes: {model.b_terms / 1e6:.3g} MB a step on {n.network})"


def _straggler_line(n: RunSteps) -> str:
    """The straggler: the rank whose mean compute is highest, against the median of the
    other ranks (with 2 workers, the other one: the median of both is their mean, which hides
    half the gap), named when it is more than `STRAGGLER` over them and either beyond three
    standard errors of its mean or the slowest in `SLOWEST_MOST` of the steps (jitter alone
    makes some rank the highest on average, but not the slowest step after step). One
    sentence, one verdict: "the slowest changes from step to step" only where it does.

    >>> import pandas as pd
    >>> from types import SimpleNamespace as R
    >>> pr = pd.DataFrame({"compute_s": [1.0, 1.56], "compute_se": [0.05, 0.1], "slowest_share": [0.05, 0.95]})
    >>> _straggler_line(R(workers=2, per_rank=pr))
    '  straggler: worker 1, computing +56% over the other worker (+-10%), slowest in 95% of the steps'
    >>> pr = pd.DataFrame({"compute_s": [1.0, 1.15], "compute_se": [0.1, 0.1], "slowest_share": [0.59, 0.41]})
    >>> _straggler_line(R(workers=2, per_rank=pr))[:140]
    '  straggler: none persistent (worker 1 computes +15% over the other worker on average, within the uncertainty of its mean (+-10%), and is th'
    """
    if n.workers < 2:
        return "  straggler: none (one worker)"
    pr = n.per_rank
    rank = pr["compute_s"].idxmax()
    others = pr["compute_s"].drop(index=rank)
    ref = float(others.median()) if len(others) else 0.0
    whom = "the other worker" if len(others) == 1 else f"the other {len(others)} workers' median"
    over = float(pr.loc[rank, "compute_s"]) / ref - 1 if ref > 0 else 0.0
    noise = float(pr.loc[rank, "compute_se"]) / ref if ref > 0 else 0.0
    share = float(pr.loc[rank, "slowest_share"])
    often = f", slowest in {share:.0%} of the steps" if math.isfinite(share) else ""
    mostly = math.isfinite(share) and share >= SLOWEST_MOST
    rank = int(rank)
    if over <= 1e-9:
        return "  straggler: none (every worker computes as long as the others)"
    if over >= STRAGGLER and (over >= 3 * noise or mostly):
        return f"  straggler: worker {rank}, computing {over:+.0%} over {whom} (+-{noise:.0%}){often}"
    if over < STRAGGLER:
        why = f"under the {STRAGGLER:.0%} that makes a straggler"
    else:
        why = f"within the uncertainty of its mean (+-{noise:.0%})"
    turns = (f", and is the slowest in only {share:.0%} of the steps: the slowest changes from step to step"
             if math.isfinite(share) and not mostly else
             f", though the slowest in {share:.0%} of the steps" if math.isfinite(share) else "")
    return f"  straggler: none persistent (worker {rank} computes {over:+.0%} over {whom} on average, {why}{turns})"


def _predictions(model: Model, n: RunSteps, exact: bool, lines: list[str], lone: dict | None = None,
                 measured: float | None = None) -> dict[str, Any]:
    """The 'what would change the answer' lines (appended to `lines`) and their values; `lone`:
    the N-worker run's parts when no 1-worker run was given (its speed-up is a range, the cost
    per call unknown); `measured`: the pair's measured speed-up."""
    P = n.workers
    out: dict[str, Any] = {}
    if P < 2:
        lines.append("what would change it: more workers (run the same config on N workers and explain the "
                     "pair: `workbench explain ONE_WORKER_RUN N_WORKER_RUN`)")
        return out
    busy = "; other processes used cores meanwhile: these describe this machine as it was" if n.machine_note else ""
    alone = ("; from this run alone: its compute taken to shrink in proportion to the rows, so these are "
             "optimistic by whatever cost per call it has, which one run cannot see" if lone is not None else "")
    lines.append(f"what would change it (the cost model fitted on these runs; 16th-84th percentile of "
                 f"{RESAMPLES} resamples of their steps{busy}{alone}):")
    now = model.speedup(n.batch)
    if lone is not None:
        low, high = _lone_speedups(model, n, lone)
        lo_all = float(np.percentile(low[1:], 16)) if len(low) > 1 else float(low[0])
        hi_all = float(np.percentile(high[1:], 84)) if len(high) > 1 else float(high[0])
        out["speedup_model"] = (float(high[0]), min(lo_all, float(low[0])), max(hi_all, float(high[0])))
        lines.append(f"  the model's speed-up here, {P} workers over 1 at batch {n.batch}: a guess, "
                     f"{float(low[0]):.2f}x-{float(high[0]):.2f}x ({out['speedup_model'][1]:.2f}x-"
                     f"{out['speedup_model'][2]:.2f}x with the resamples): all a cost per call to all a cost per "
                     f"row; one run cannot say which (measure 1 worker and pass both)")
    else:
        text, out["speedup_model"] = _band(now, lambda v: f"{v:.2f}x", exact)
        lines.append(f"  the model's speed-up here, {P} workers over 1 at batch {n.batch}: {text}"
                     + _against_measured(model, P, out["speedup_model"], measured))
    b = model.crossover_batch()
    text, out["crossover_batch"] = _band(b, _count, exact)
    if float(b[0]) == 0.0:
        lines.append(f"  batch: {P} workers already beat 1 by {TARGET:g}x at any batch")
    elif float(b[0]) < P:   # below one sample a worker: every batch they can split
        lines.append(f"  batch: {P} workers beat 1 by {TARGET:g}x at any batch they can split (from {P}, one sample "
                     f"a worker; the model's crossover is {text})")
    elif not math.isfinite(float(b[0])):
        top = model.k_measured / (1 + float(model.omega[0]))
        why = (f"its workers computed {model.k_measured:.2g} workers' worth at once: at most {top:.2f}x"
               if _compute_bound(model) else
               f"other processes left the run {n.free_cores:.2g} of its cores: at most {top:.2f}x on this machine "
               f"now" if model.parallel else f"waiting for the slowest compute grows with it: at most {top:.2f}x")
        lines.append(f"  batch: no global batch makes {P} workers {TARGET:g}x faster than 1 ({why})")
    else:
        lines.append(f"  batch: {P} workers beat 1 by {TARGET:g}x from a global batch of {text} (this run: {n.batch})")
    s = model.crossover_scale()
    text, out["crossover_scale"] = _band(s, lambda v: f"{v:.3g}x", exact)
    params = n.n_bytes / BYTES_PER_PARAM
    if float(s[0]) == 0.0:
        lines.append(f"  model size: {P} workers beat 1 by {TARGET:g}x at batch {n.batch} with any model size")
    elif not math.isfinite(float(s[0])):
        why = (f"{model.k_measured:.2g} workers' worth of compute at once does not make {P} workers {TARGET:g}x one"
               if _compute_bound(model) and model.k_measured / (1 + float(model.omega[0])) < TARGET else
               "the exchange's bytes grow with the model as fast as its compute")
        lines.append(f"  model size: none at batch {n.batch} ({why})")
    elif float(now[0]) >= TARGET:
        lines.append(f"  model size: {P} workers stay {TARGET:g}x faster than 1 at batch {n.batch} down to {text} "
                     f"this model's parameters and FLOPs ({params * float(s[0]):,.0f} parameters)")
    else:
        lines.append(f"  model size: {P} workers would beat 1 by {TARGET:g}x at batch {n.batch} from {text} this "
                     f"model's parameters and FLOPs ({params * float(s[0]):,.0f} parameters)")
    if n.pattern == "allreduce" and (n.config.get("compression") or "none") == "none" and n.network:
        link = 1.0 / NETWORKS[n.network].beta       # the bytes were charged at the network's documented rate
        for name, (a_alt, b_alt) in {
                f"DiLoCo (tau {DILOCO_TAU})": (model.a_terms / DILOCO_TAU, model.b_terms / DILOCO_TAU),
                f"top-k compression ({TOPK_RATIO:.0%})": compressed_terms(P, n.n_bytes, "topk", compression_ratio=TOPK_RATIO,
                                                                          allreduce=_allreduce(n))}.items():
            bw = model.paying_bandwidth(a_alt, b_alt)
            text, out[name] = _band(bw, _gbps, exact)
            here = "pays here already" if link <= float(bw[0]) else f"not on {n.network}'s {_gbps(link)}"
            if not math.isfinite(float(bw[0])):
                lines.append(f"  network: {name} makes the step {PAYS:g}x faster at any bandwidth ({here})")
            elif float(bw[0]) <= 0:
                lines.append(f"  network: {name} never makes the step {PAYS:g}x faster (the exchange is latency)")
            else:
                lines.append(f"  network: {name} pays ({PAYS:g}x faster steps) below {text}; {here}")
    else:
        lines.append(f"  network: compression and DiLoCo are predicted against a synchronous allreduce of the "
                     f"whole gradient ({n.algorithm} exchanges otherwise)")
    return out


def explain(runs: Sequence[Any], resamples: int = RESAMPLES,
            round_rates: dict[int, Sequence[float]] | None = None) -> list[Explanation]:
    """Explain each run with more workers than the fewest against the one with the fewest
    (a 1-worker run when there is one); a single run alone.

    Args:
        runs: RunResults or run directories of the same model.
        resamples: bootstrap resamples for the uncertainties.
        round_rates: worker count -> the samples/s of every round the runs of that count are
            one of (the dashboard's sweep: RunResults, no folders to find the rounds in), for
            the rounds' speed-up (`_rounds_line`); a run directory's rounds are found on disk.
    Returns:
        One Explanation per explained run.
    Raises:
        ConfigError: a run without steps, of an unknown algorithm, or of another model.
    """
    if not runs:
        raise ConfigError("RUN", "at least one run", list(runs))
    for r in runs:
        if isinstance(r, (str, Path)):
            refuse_folder(r)
    steps = [run_steps(r) for r in runs]
    for s, r in zip(steps, runs):
        s.rounds = _rounds(r) if isinstance(r, (str, Path)) else []
        given = [float(v) for v in (round_rates or {}).get(s.workers, ())]
        s.round_rates = given if not s.rounds and len(given) > 1 else []
    sizes = {round(s.n_bytes / BYTES_PER_PARAM) for s in steps}
    if len(sizes) > 1:
        raise ConfigError("RUN", "runs of one model (their parameter counts differ)", sorted(sizes))
    kinds = {s.simulated for s in steps}
    if len(kinds) > 1:
        which = ", ".join(f"{s.label}: {'simulated (virtual time)' if s.simulated else 'real (wall time)'}"
                          for s in steps)
        raise ConfigError("RUN", "runs that are all real or all simulated (a simulated run's samples/s are in "
                          "virtual time, a real one's in wall time: their ratio is no speed-up)", which)
    steps.sort(key=lambda s: s.workers)
    ref = steps[0] if steps[0].workers == 1 and len(steps) > 1 else None
    targets = [s for s in steps if s is not ref] if len(steps) > 1 else steps
    out = [explain_pair(ref, s, resamples) for s in targets]
    for e, s in zip(out, targets):
        said = _rounds_line(ref, s)
        if said:
            e.lines.insert(1, said)
    return out


def refuse_folder(path: str | Path) -> None:
    """ConfigError for a sweep's folder (its sweep.csv and one directory per run, no
    summary.json of its own), naming the runs to explain instead."""
    d = Path(path)
    if d.is_dir() and not (d / "summary.json").exists() and (d / "sweep.csv").exists():
        runs = sorted(p.name for p in d.iterdir() if (p / "summary.json").is_file() and "-r" not in p.name)
        eg = " ".join(str(d / name) for name in runs[:2]) or f"{d / 'w1'} {d / 'w2'}"
        raise ConfigError("RUN_DIR", f"a run directory (this is a sweep's folder: explain its runs, e.g. {eg})",
                          str(d))


def _round_no(p: Path) -> int:
    tail = p.name.rsplit("-", 1)[-1].lstrip("r")
    return int(tail) if tail.isdigit() else 0


def _rounds(path: str | Path) -> list[Path]:
    """The run directories of every round of the run at `path`, itself first ([] when it is
    one round alone): the demo's (DIR, DIR/round-K; its 1-worker run DIR/one-worker and
    DIR/round-K/one-worker) and a sweep's (DIR/wN, DIR/wN-rK)."""
    d = Path(path)

    import re

    def runs(paths: Any, pattern: str) -> list[Path]:
        return sorted((p for p in paths if re.fullmatch(pattern, p.name if pattern[0] != "^" else p.parent.name)
                       and (p / "summary.json").is_file()), key=lambda p: _round_no(p if pattern[0] != "^" else p.parent))
    found = runs(d.glob("round-*"), r"round-\d+")                                  # the demo's N-worker run
    if not found and d.parent.name:
        found = runs((q / d.name for q in d.parent.glob("round-*")), r"^round-\d+")   # ... its 1-worker run
    if not found:
        found = runs(d.parent.glob(f"{d.name}-r*"), re.escape(d.name) + r"-r\d+")   # a sweep's point
    return [d, *found] if found else []


def _rate(d: Path) -> float:
    import json
    try:
        return float(json.loads((d / "summary.json").read_text()).get("samples_per_s") or math.nan)
    except (OSError, ValueError):
        return math.nan


def _rounds_line(one: RunSteps | None, n: RunSteps) -> str:
    """Where the runs explained are one round of several (the demo's rounds, a sweep's): which
    round this reads, and the rounds' speed-up as the demo reports it (`measure.median_speedup`:
    the ratio of each side's median, its range between the rounds' extremes), with each side's
    count of rounds, which need not agree: the demo repeats each worker count until its own rate
    is known (a demo that printed 0.90x, 1 worker over 3 rounds and 2 workers over 8, was
    explained from its first round alone as 1.20x); for a pair of single runs, that its ratio
    has no range; "" for a lone run."""
    if one is not None and one.workers == n.workers:   # no speed-up between runs read as one worker count
        return ""
    if not (n.rounds or n.round_rates) and (one is None or not (one.rounds or one.round_rates)):
        if one is None or n.simulated:   # a simulated pair is deterministic: its ratio is exact
            return ""
        # a lone pair: its ratio is one draw of the machine (the same pair gave 0.13x here at load 11 and a sweep's
        # 8 rounds 0.26x, 0.13-0.56): said where the demo and a sweep give a range
        return (f"  one run each: the ratio above has no range (one draw of this machine); `sweep --workers "
                f"1,{n.workers}` repeats each count, interleaved, and gives the speed-up's range")

    def rates(s: RunSteps) -> np.ndarray:       # a side of one round alone: its own rate
        got = np.array([_rate(d) for d in s.rounds] if s.rounds else (s.round_rates or [s.rate]), dtype=float)
        return got[np.isfinite(got) & (got > 0)]
    rates_n = rates(n)
    where = f" ({n.rounds[0]})" if n.rounds else ""
    which, these = ("round 1", "round 1's") if n.rounds or (one is not None and one.rounds) else \
        ("one of the sweep's rounds", "this round's")
    if one is not None:
        rates_1 = rates(one)
        if len(rates_n) and len(rates_1):
            med, low, high = measure.median_speedup(list(rates_n), list(rates_1))
            first = n.rate / one.rate if one.rate > 0 else math.nan
            counts = f"{n.workers} workers over {_count(len(rates_n))}, 1 worker over {_count(len(rates_1))}"
            return (f"  rounds: this reads {which}{where}: {first:.2f}x; the rounds' medians give {n.workers} workers "
                    f"{med:.2f}x 1 worker ({low:.2f}x-{high:.2f}x between the rounds' extremes; {counts}); the "
                    f"parts and predictions below are {these}")
    if not len(rates_n):
        return ""
    return (f"  rounds: this reads {which} of {len(rates_n)}{where}; the rounds' {n.workers}-worker "
            f"samples/s: median {measure.median_rate(list(rates_n)):,.0f} ({float(rates_n.min()):,.0f}-"
            f"{float(rates_n.max()):,.0f}); the parts and predictions below are this round's")


def _count(rounds: int) -> str:
    return f"{rounds} round{'s' if rounds != 1 else ''}"


def pick_runs(history: Sequence[Any]) -> list[Any]:
    """What the dashboard's "why" panel explains: the last completed run, and the latest
    earlier completed run of the same config on another worker count (a 1-vs-N pair), if
    any; [] when no run completed."""
    done = [r for r in history if getattr(r, "summary", {}).get("status") == "completed"]
    if not done:
        return []
    last = done[-1]

    def key(r: Any) -> dict:
        cfg = dict(r.summary.get("config") or {})
        for k in ("cpus", "gpus", "out", "seed"):
            cfg.pop(k, None)
        return cfg
    mine = key(last)
    n_last = len(last.summary.get("workers") or [])
    for r in reversed(done[:-1]):
        if key(r) == mine and len(r.summary.get("workers") or []) != n_last:
            return [r, last]
    return [last]


def to_html(explanations: Sequence[Explanation]) -> str:
    """The explanations as HTML for the dashboard's "why" panel (the limit in bold)."""
    import html
    out = []
    for e in explanations:
        head, *rest = e.lines
        # lines kept whole (a narrow tab scrolls them sideways): a notebook's output area wraps <pre> mid-word
        out.append(f"<p><b>{html.escape(head)}</b></p><pre style='font-size:12px;white-space:pre;overflow-x:auto'>"
                   + html.escape("\n".join(rest)) + "</pre>")
    return "".join(out)
