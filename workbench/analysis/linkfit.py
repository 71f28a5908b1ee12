"""A link's alpha and beta from an exchange micro-benchmark, with uncertainty and bounds.

The cost model charges an allreduce ``A alpha + B beta`` (`costmodel.exchange_terms`), with
the terms of the transport that made the exchange (`costmodel.allreduce_terms`: the ring's
2 (P-1) messages of n/P bytes, shared memory's barrier meetings, `shm.allreduce_meetings`,
and its n bytes, the threads' 3 meetings), so a fitted alpha is the cost of what that
transport does once: a message, or a meeting. Fitting alpha and beta from whole training runs mixes
them with compute and waiting; here they come from timing the exchange alone
(`exchange_benchmark`, shared memory between two Dask worker processes):

- **sizes spread so both are identifiable**: `SIZES` runs from 1,000 float32 elements
  (4 KB: the message count dominates) to 256,000 (1 MB: the bytes dominate), all on one
  segment whose capacity is above `shm.PAIR_MAX`, so every size takes the same (general,
  two-meeting) path and one line can describe them. (Two workers with a capacity of at
  most 16,384 elements take the one-meeting pair path: cheaper, and not what this fits.)
  Why not larger: on the 2-core development machine (2 MiB of L2 a core) a 4 MB exchange,
  whose working set leaves the core's cache, took 1.3-16x the line through 4 KB-1 MB
  (2026-12-02, load 4-7), so one line cannot span it; `LinkFit.range_bytes` says which
  exchanges a fit describes.
- **repeated within a time budget, interleaved**: rounds of every size in a shuffled order,
  a few exchanges each, until `budget_s` (a few seconds) is spent, so the machine's drift
  falls on every size alike;
- **robust statistics per size** (`summarize_exchanges`): the median of all its exchanges,
  its standard error from the spread of the per-round medians (so drift between rounds
  counts), and the quartiles;
- **the fit** (`fit_link`): least squares weighted by each size's standard error relative
  to its time, with each parameter's standard error (inflated by the residuals when they
  exceed what the per-size errors explain);
- **bounds from physics**: alpha >= 0, and the shared-memory bandwidth 1 / beta no lower
  than this machine's measured memcpy rate divided by ``MEMCPY_FACTOR`` (8: a ring
  allreduce reads and writes each byte a few times, and a busy machine slows it further,
  but a link 100x slower than memcpy is a fit gone wrong, like the 0.022 GB/s once fitted
  here); and no higher than memcpy times the same factor (every byte of an exchange is
  read and written at least once; sizes up to 1 MB sit in the 2 MiB L2, which copies a few
  times faster than the 64 MB memcpy does, never 8x: a falling or flat line is noise, like
  the negative beta a busy machine once gave), or beta >= 0 when no memcpy rate is given.
  A bound that binds is reported (`bounded`) and the other parameter refitted;
- **held-out error**: leave one size out, fit on the others, predict its median;
- **a verdict in words** (`LinkFit.verdict`): a parameter whose standard error is more
  than half its value is "not resolved", a held-out error above `HELD_OUT_OK` says one
  alpha-beta line does not describe the exchanges, and a block of rounds fitted on its own
  (`fit_exchanges`: 4 consecutive blocks) whose alpha or bandwidth is more than `DRIFT_OK`
  from the whole fit's says the link moved during the benchmark (a busy machine: the
  standard errors describe the 3 s, not the next minute).

Not a test: timings come from the machine as it is (run it on an idle one).
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .costmodel import _pattern, allreduce_terms, exchange_terms

MEMCPY_FACTOR = 8.0          # shared-memory bandwidth is at least memcpy / this
SIZES = (1_000, 4_000, 16_000, 32_000, 64_000, 128_000, 256_000)   # float32 elements of the exchanges
BUDGET_S = 3.0               # seconds of exchanges a benchmark spends (after a warm-up round)
REPS = 3                     # exchanges per size per round
RESOLVED_SE = 0.5            # a parameter is resolved when its standard error is at most this share of it
HELD_OUT_OK = 0.25           # the line describes the exchanges when every held-out size is predicted this well
BLOCKS = 4                   # consecutive blocks of rounds fitted on their own: did the link move meanwhile?
DRIFT_OK = 0.25              # the link held still when each block's alpha and bandwidth are within this of the median
MAD_TO_SE = 1.2533 * 1.4826  # median's standard error per (MAD / sqrt(n)) for normal scatter


def memcpy_rate(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """This process's best copy rate in bytes/s (NumPy copyto of `nbytes`)."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return src.nbytes / best


@dataclass
class LinkFit:
    """alpha (s per message) and beta (s per byte) with standard errors, and the checks."""
    alpha: float
    beta: float
    alpha_se: float
    beta_se: float
    bounded: str                     # "" or which bound bound: "alpha >= 0", "bandwidth >= memcpy / 8"
    memcpy_bps: float | None
    held_out: pd.DataFrame = field(repr=False)   # n_bytes, measured_s, predicted_s, error (leave one size out)
    table: pd.DataFrame | None = field(default=None, repr=False)   # the per-size values fitted
    # alpha (s) and beta (s/byte) fitted on each consecutive block of rounds (`fit_exchanges`), if measured
    blocks: list[tuple[float, float]] = field(default_factory=list, repr=False)

    @property
    def drift(self) -> float:
        """The largest relative move of a block's alpha or bandwidth from the whole fit's
        (0 without blocks): how much the link changed during the benchmark."""
        moves = [0.0]
        for a, b in self.blocks:
            if self.alpha > 0:
                moves.append(abs(a / self.alpha - 1))
            if self.beta > 0 and b > 0:
                moves.append(abs(self.beta / b - 1))
        return max(moves)

    @property
    def bandwidth_gbps(self) -> float:
        return 1 / self.beta / 1e9 if self.beta > 0 else math.inf

    @property
    def held_out_error(self) -> float:
        """The largest relative error on a held-out size (nan with fewer than 3 sizes)."""
        return float(self.held_out["error"].abs().max()) if len(self.held_out) else math.nan

    @property
    def range_bytes(self) -> tuple[float, float]:
        """The smallest and largest exchange (bytes) fitted: the sizes the line describes."""
        if self.table is None or not len(self.table):
            return (math.nan, math.nan)
        return (float(self.table["n_bytes"].min()), float(self.table["n_bytes"].max()))

    @property
    def alpha_resolved(self) -> bool:
        return self.alpha > 0 and self.alpha_se <= RESOLVED_SE * self.alpha

    @property
    def beta_resolved(self) -> bool:
        return self.beta > 0 and self.beta_se <= RESOLVED_SE * self.beta

    @property
    def resolved(self) -> bool:
        """Both parameters resolved, every held-out size predicted within HELD_OUT_OK, and
        the link still within DRIFT_OK over the benchmark's blocks of rounds."""
        return (self.alpha_resolved and self.beta_resolved and self.held_out_error <= HELD_OUT_OK
                and self.drift <= DRIFT_OK)

    @property
    def verdict(self) -> str:
        """How sure this fit is, in words (one clause per problem, or "resolved")."""
        why = []
        if not self.alpha_resolved:
            why.append(f"alpha not resolved ({self.alpha * 1e6:.3g} +- {self.alpha_se * 1e6:.2g} us: "
                       "its standard error is comparable to its value)")
        if not self.beta_resolved:
            why.append(f"bandwidth not resolved (beta {self.beta * 1e9:.3g} +- {self.beta_se * 1e9:.2g} ns/byte)")
        if not self.held_out_error <= HELD_OUT_OK:
            why.append(f"one alpha-beta line does not describe the exchanges (held-out error "
                       f"{self.held_out_error:.1%} > {HELD_OUT_OK:.0%})")
        if self.drift > DRIFT_OK:
            bw = [1 / b / 1e9 for _, b in self.blocks if b > 0]
            al = [a * 1e6 for a, _ in self.blocks]
            why.append(f"the link moved during the benchmark (over {len(self.blocks)} blocks of rounds: bandwidth "
                       f"{min(bw):.3g}-{max(bw):.3g} GB/s, alpha {min(al):.3g}-{max(al):.3g} us; the machine is "
                       "busy: its value is this moment's)")
        return "resolved" if not why else "; ".join(why)

    def summary(self) -> dict[str, Any]:
        return {"alpha_us": self.alpha * 1e6, "alpha_se_us": self.alpha_se * 1e6,
                "bandwidth_gbps": self.bandwidth_gbps,
                "bandwidth_se_gbps": self.beta_se / self.beta ** 2 / 1e9 if self.beta > 0 else math.nan,
                "bounded": self.bounded, "memcpy_gbps": None if self.memcpy_bps is None else self.memcpy_bps / 1e9,
                "held_out_error": self.held_out_error, "resolved": self.resolved, "verdict": self.verdict,
                "range_bytes": list(self.range_bytes), "drift": self.drift}


def _terms(table: pd.DataFrame, algorithm: str, allreduce: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of each row's exchange, by the transport that timed it: `allreduce` if given,
    else the row's `allreduce` column (`exchange_benchmark`'s "shm"), else the ring. A bare
    allreduce (sync_sgd's pattern) on shared memory takes its segment's path from the row's
    `capacity` (elements) where the table has one (`shm.pair_path`), else from the vector."""
    rows = table.to_dict("records")
    bare = _pattern(algorithm) == "allreduce"
    ab = []
    for r in rows:
        how = allreduce or r.get("allreduce") or "ring"
        if not isinstance(how, str):   # (a NaN where rows of several tables were joined)
            how = "ring"
        p, n = int(r["workers"]), float(r["n_bytes"])
        cap = r.get("capacity")
        if bare and how == "shm" and cap is not None and math.isfinite(float(cap)):
            ab.append(allreduce_terms(p, n, "shm", capacity=int(cap)))
        else:
            ab.append(exchange_terms(algorithm, p, n, allreduce=how))
    return np.array([a for a, _ in ab], dtype=float), np.array([b for _, b in ab], dtype=float)


def _solve(A: np.ndarray, B: np.ndarray, t: np.ndarray, se: np.ndarray,
           beta_max: float | None, beta_min: float = 0.0) -> tuple[float, float, float, float, str]:
    """Weighted least squares of t ~ A alpha + B beta (weights 1 / se) under the bounds;
    the standard errors from the weighted normal equations, scaled up by the reduced
    chi-square when the residuals exceed what `se` explains."""
    w = 1.0 / se
    X = np.stack([A * w, B * w], axis=1)
    y = t * w
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)
    coef, *_ = np.linalg.lstsq(X / scale, y, rcond=None)
    alpha, beta = coef / scale
    bounded = ""
    if beta_max is not None and beta > beta_max:      # slower than physics allows: hold beta at the bound
        beta, bounded = beta_max, f"bandwidth >= memcpy / {MEMCPY_FACTOR:g}"
        alpha = float(np.dot(A * w, y - B * w * beta) / np.dot(A * w, A * w))
    elif beta < beta_min:                              # faster than physics allows (or negative)
        beta = beta_min
        bounded = f"bandwidth <= memcpy x {MEMCPY_FACTOR:g}" if beta_min > 0 else "beta >= 0"
        alpha = float(np.dot(A * w, y - B * w * beta) / np.dot(A * w, A * w))
    if alpha < 0:
        alpha = 0.0
        bounded = (bounded + "; " if bounded else "") + "alpha >= 0"
        if not bounded.startswith(("bandwidth", "beta")):
            beta = float(np.dot(B * w, y) / np.dot(B * w, B * w))
    dof = len(t) - 2
    resid = y - (A * w * alpha + B * w * beta)
    if dof > 0:
        s2 = max(float(resid @ resid) / dof, 1.0)     # the per-size errors, or the scatter if wider
        cov = s2 * np.linalg.pinv((X / scale).T @ (X / scale)) / np.outer(scale, scale)
        alpha_se, beta_se = float(np.sqrt(max(cov[0, 0], 0.0))), float(np.sqrt(max(cov[1, 1], 0.0)))
    else:
        alpha_se = beta_se = math.nan
    return float(alpha), float(beta), alpha_se, beta_se, bounded


def _se_of(t: pd.DataFrame) -> np.ndarray:
    """Each row's standard error: its `se_s` where given (at least 0.5% of its time: no size
    may carry the whole fit), else 5% of its time (relative errors: small and large sizes
    count alike)."""
    sec = t["seconds"].to_numpy(float)
    if "se_s" in t:
        se = t["se_s"].to_numpy(float)
        return np.where(np.isfinite(se) & (se > 0), np.maximum(se, 0.005 * sec), 0.05 * sec)
    return 0.05 * sec


def fit_link(table: pd.DataFrame, memcpy_bps: float | None = None, algorithm: str = "sync_sgd",
             allreduce: str | None = None) -> LinkFit:
    """alpha, beta (with standard errors, bounds, held-out error, verdict) from exchange timings.

    Args:
        table: one row per timed exchange size: n_bytes (of the vector), workers, seconds
            (a robust per-size time: `summarize_exchanges`' median), optionally se_s (its
            standard error; without it every size counts at 5% of its time), allreduce (the
            transport that timed it: "shm", "threads", "ring", ...; `ALLREDUCE_ALGORITHMS`)
            and capacity (a shm segment's elements); at least 2 sizes.
        memcpy_bps: this machine's copy rate (`memcpy_rate`): bounds the bandwidth from below
            (memcpy / MEMCPY_FACTOR) and above (memcpy x MEMCPY_FACTOR).
        algorithm: whose exchange pattern the timings are (default sync_sgd's allreduce).
        allreduce: the transport of every row (its terms, `costmodel.allreduce_terms`);
            None: each row's `allreduce` column, else the ring.

    Four workers' shared-memory exchanges (2 meetings each, n bytes): the fit with shm's
    terms recovers the link; with the ring's (6 messages of n/4 bytes each way) it would
    read a meeting's cost as a sixth of it.

    >>> p, alpha, beta = 4, 20e-6, 1 / 2e9
    >>> n = np.array([4e4, 4e5, 4e6, 4e7])
    >>> t = pd.DataFrame({"n_bytes": n, "workers": p, "seconds": 2 * alpha + n * beta, "allreduce": "shm"})
    >>> f = fit_link(t)
    >>> round(f.alpha * 1e6, 3), round(f.bandwidth_gbps, 3), f.bounded, f.held_out_error < 1e-9
    (20.0, 2.0, '', True)
    >>> round(fit_link(t, allreduce="ring").alpha * 1e6, 3)
    6.667
    """
    t = table.dropna(subset=["seconds"])
    t = t[t["seconds"] > 0].reset_index(drop=True)
    if t["n_bytes"].nunique() < 2:
        raise ValueError(f"table: exchange timings at 2 or more sizes, got {t['n_bytes'].nunique()}")
    A, B = _terms(t, algorithm, allreduce)
    se = _se_of(t)
    beta_max = MEMCPY_FACTOR / memcpy_bps if memcpy_bps else None
    beta_min = 1 / (MEMCPY_FACTOR * memcpy_bps) if memcpy_bps else 0.0
    alpha, beta, a_se, b_se, bounded = _solve(A, B, t["seconds"].to_numpy(float), se, beta_max, beta_min)
    rows = []
    if t["n_bytes"].nunique() >= 3:                    # leave one size out
        for n in sorted(t["n_bytes"].unique()):
            keep = (t["n_bytes"] != n).to_numpy()
            train, test = t[keep], t[~keep]
            At, Bt = _terms(train, algorithm, allreduce)
            a, b, *_ = _solve(At, Bt, train["seconds"].to_numpy(float), se[keep], beta_max, beta_min)
            Ah, Bh = _terms(test, algorithm, allreduce)
            pred = Ah * a + Bh * b
            for measured, predicted in zip(test["seconds"], pred):
                rows.append({"n_bytes": float(n), "measured_s": float(measured), "predicted_s": float(predicted),
                             "error": float(predicted / measured - 1)})
    return LinkFit(alpha, beta, a_se, b_se, bounded, memcpy_bps,
                   pd.DataFrame(rows, columns=["n_bytes", "measured_s", "predicted_s", "error"]), t)


def summarize_exchanges(raw: pd.DataFrame) -> pd.DataFrame:
    """Per size, the robust values `fit_link` fits, from every timed exchange.

    Args:
        raw: one row per exchange: n_bytes, workers, round (which interleaved round), seconds;
            optionally allreduce and capacity (the transport and its segment), kept per row.
    Returns:
        One row per (n_bytes, workers; allreduce, capacity where given): seconds (the
        median of all its exchanges), se_s (the median's standard error from the per-round
        medians' spread, MAD-based, so one slow round moves it little and drift between
        rounds counts; from all exchanges when there is one round), q25_s, q75_s, count, rounds.

    >>> raw = pd.DataFrame({"n_bytes": 8, "workers": 2, "round": [0, 0, 1, 1, 2, 2],
    ...                     "seconds": [1.0, 1.2, 1.1, 9.0, 1.0, 1.1]})
    >>> row = summarize_exchanges(raw).iloc[0]
    >>> float(row["seconds"]), int(row["count"]), int(row["rounds"])
    (1.1, 6, 3)
    """
    rows = []
    keys = ["n_bytes", "workers"] + [k for k in ("allreduce", "capacity") if k in raw]
    for key, g in raw.groupby(keys, sort=True):
        s = g["seconds"].to_numpy(float)
        per_round = g.groupby("round")["seconds"].median().to_numpy(float)
        spread, k = (per_round, len(per_round)) if len(per_round) >= 3 else (s, len(s))
        mad = float(np.median(np.abs(spread - np.median(spread))))
        rows.append({**dict(zip(keys, key)), "seconds": float(np.median(s)),
                     "se_s": MAD_TO_SE * mad / math.sqrt(k),
                     "q25_s": float(np.quantile(s, 0.25)), "q75_s": float(np.quantile(s, 0.75)),
                     "count": len(s), "rounds": len(per_round)})
    return pd.DataFrame(rows)


def exchange_plan(sizes: Sequence[int], rounds: int, reps: int, seed: int = 0) -> list[int]:
    """The order of exchanges (element counts): `rounds` rounds, each every size `reps`
    times in a shuffled order of sizes (the same plan on every rank).

    >>> exchange_plan([1, 2], rounds=2, reps=2, seed=0)
    [1, 1, 2, 2, 1, 1, 2, 2]
    """
    rng = np.random.default_rng(seed)
    plan: list[int] = []
    for _ in range(rounds):
        for n in rng.permutation(np.asarray(sizes, dtype=np.int64)):
            plan += [int(n)] * reps
    return plan


def exchange_times_plan(name: str, rank: int, size: int, capacity: int, plan: list[int]) -> list[float]:
    """Runs on a worker: the time of each shared-memory allreduce of `plan` (element
    counts) on one segment of `capacity` elements, the ranks meeting before each; then the
    whole loop's seconds (meetings included), as the last element."""
    from ..comm.shm import ShmComm
    comm = ShmComm(name, rank, size, capacity)
    bufs = {n: np.ones(n, dtype=np.float32) for n in set(plan)}
    times = []
    start = time.perf_counter()
    for n in plan:
        comm.barrier()                     # start together: time the exchange, not the skew
        t0 = time.perf_counter()
        comm.allreduce(bufs[n])
        times.append(time.perf_counter() - t0)
    times.append(time.perf_counter() - start)
    comm.close()
    return times


def exchange_benchmark(client: Any, sizes: Sequence[int] = SIZES, budget_s: float = BUDGET_S,
                       reps: int = REPS, seed: int = 0, raw: list | None = None) -> pd.DataFrame:
    """Time the shared-memory allreduce between 2 workers of `client` at each size (float32
    elements), interleaved in rounds for about `budget_s` seconds of exchanging (a warm-up
    round first, not kept; then two timed rounds size the rest of the budget): one row per size
    (`summarize_exchanges`: the median of the slower rank's times, its standard error,
    quartiles, count, rounds; allreduce "shm" and the segment's capacity, which `fit_link`
    reads its terms by: 2 meetings and n bytes each). `raw`, if given, receives every exchange's row."""
    import uuid

    from ..comm.shm import PAIR_MAX, allreduce_nbytes, create_segment, unlink_segment
    if budget_s <= 0 or not math.isfinite(budget_s):
        raise ValueError(f"budget_s: a positive number of seconds, got {budget_s}")
    if len(set(sizes)) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes: 2 or more distinct positive element counts, got {list(sizes)}")
    info = client.scheduler_info()["workers"]
    hosts = sorted({str(w.get("host")) for w in info.values()})
    if len(hosts) > 1:   # a cluster of one's own across hosts: its runs meet in the ring, not shared memory
        raise ValueError(f"client: a cluster on one host (this times shared memory between two of its workers, "
                         f"not the link between hosts), got workers on {len(hosts)} hosts ({', '.join(hosts[:4])})")
    peers = list(info)[:2]
    if len(peers) < 2:
        raise ValueError(f"client: a cluster of at least 2 workers, got {len(peers)}")
    capacity = max(max(sizes), PAIR_MAX + 1)          # one path (the general one) for every size
    name = "wbx" + uuid.uuid4().hex[:10]
    client.submit(create_segment, name, allreduce_nbytes(2, capacity), workers=[peers[0]], pure=False).result()

    def timed(plan: list[int]) -> tuple[np.ndarray, float]:
        futs = [client.submit(exchange_times_plan, name, r, 2, capacity, plan, workers=[a], pure=False)
                for r, a in enumerate(peers)]
        got = np.array(client.gather(futs)).max(axis=0)      # the slower rank's time of each exchange
        return got[:-1], float(got[-1])

    rows: list[dict[str, Any]] = []
    try:
        timed(exchange_plan(sizes, 1, 1, seed))               # touches the pages, warms the code: not kept
        plans = [exchange_plan(sizes, 2, reps, seed + 1)]     # two rounds size the rest of the budget
        first, loop_s = timed(plans[0])
        times = [first]
        rounds = max(1, min(2000, int((budget_s - loop_s) / max(loop_s / 2, 1e-6))))
        plans.append(exchange_plan(sizes, rounds, reps, seed + 2))
        times.append(timed(plans[1])[0])
        r0 = 0
        for plan, tt in zip(plans, times):
            per = len(sizes) * reps
            for i, (n, s) in enumerate(zip(plan, tt)):
                rows.append({"n_bytes": 4 * n, "workers": 2, "allreduce": "shm", "capacity": capacity,
                             "round": r0 + i // per, "seconds": float(s)})
            r0 += len(plan) // per
    finally:
        client.submit(unlink_segment, name, workers=[peers[0]], pure=False).result()
    if raw is not None:
        raw.extend(rows)
    return summarize_exchanges(pd.DataFrame(rows))


def fit_exchanges(raw: pd.DataFrame, memcpy_bps: float | None = None, blocks: int = BLOCKS,
                  algorithm: str = "sync_sgd", allreduce: str | None = None) -> LinkFit:
    """`fit_link` of every exchange's per-size summary (`summarize_exchanges`), plus the
    same fit on each of `blocks` consecutive blocks of rounds (`LinkFit.blocks`, `drift`):
    a link that moved during the benchmark says so in its verdict.

    Args:
        raw: one row per exchange (n_bytes, workers, round, seconds), as `exchange_benchmark`'s `raw`.
    """
    fit = fit_link(summarize_exchanges(raw), memcpy_bps=memcpy_bps, algorithm=algorithm, allreduce=allreduce)
    rounds = np.sort(raw["round"].unique())
    if blocks >= 2 and len(rounds) >= 3 * blocks:           # at least 3 rounds a block
        for part in np.array_split(rounds, blocks):
            b = fit_link(summarize_exchanges(raw[raw["round"].isin(part)]), memcpy_bps=memcpy_bps, algorithm=algorithm,
                         allreduce=allreduce)
            fit.blocks.append((b.alpha, b.beta))
    return fit


def benchmark_link(client: Any, sizes: Sequence[int] = SIZES, budget_s: float = BUDGET_S,
                   memcpy_bps: float | None = None) -> LinkFit:
    """This machine's link, measured now: the exchange micro-benchmark between 2 workers of
    `client` (`exchange_benchmark`: sizes 4 KB to 1 MB interleaved for ~`budget_s` s),
    bounded below by this process's memcpy rate / 8 (`memcpy_rate`, timed now unless given)
    and fitted with its uncertainty, held-out error and verdict (`fit_link`). Pass it to
    `costmodel.calibrate(results, link=...)`.

    What to expect: see docs/simulator.md ("Five in a row"); `LinkFit.verdict` says how
    sure this one is ("resolved", or which parameter is not)."""
    raw: list[dict[str, Any]] = []
    exchange_benchmark(client, sizes, budget_s, raw=raw)
    return fit_exchanges(pd.DataFrame(raw), memcpy_bps=memcpy_rate() if memcpy_bps is None else memcpy_bps)
