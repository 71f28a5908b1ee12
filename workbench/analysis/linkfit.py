"""A link's alpha and beta from an exchange micro-benchmark, with uncertainty and bounds.

The cost model charges an allreduce ``A alpha + B beta`` (`costmodel.exchange_terms`: the
ring's message count and bytes). Fitting alpha and beta from whole training runs mixes
them with compute and waiting; here they come from timing the exchange alone at three or
more sizes (`exchange_benchmark`, shared memory between Dask worker processes), fitted by
weighted least squares on relative error (`fit_link`), with:

- **uncertainty**: each parameter's standard error, from the fit's residuals;
- **bounds from physics**: alpha >= 0, and the shared-memory bandwidth 1 / beta no lower
  than this machine's measured memcpy rate divided by ``MEMCPY_FACTOR`` (8: a ring
  allreduce reads and writes each byte a few times, and a busy machine slows it further,
  but a link 100x slower than memcpy is a fit gone wrong, like the 0.022 GB/s once fitted
  here). A bound that binds is reported (`bounded`) and the other parameter refitted;
- **held-out error**: leave one size out, fit on the others, predict it.

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

from .costmodel import exchange_terms

MEMCPY_FACTOR = 8.0                     # shared-memory bandwidth is at least memcpy / this
SIZES = (10_000, 100_000, 1_000_000)    # float32 elements of the benchmark's exchanges


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

    @property
    def bandwidth_gbps(self) -> float:
        return 1 / self.beta / 1e9 if self.beta > 0 else math.inf

    @property
    def held_out_error(self) -> float:
        """The largest relative error on a held-out size (nan with fewer than 3 sizes)."""
        return float(self.held_out["error"].abs().max()) if len(self.held_out) else math.nan

    def summary(self) -> dict[str, Any]:
        return {"alpha_us": self.alpha * 1e6, "alpha_se_us": self.alpha_se * 1e6,
                "bandwidth_gbps": self.bandwidth_gbps,
                "bandwidth_se_gbps": self.beta_se / self.beta ** 2 / 1e9 if self.beta > 0 else math.nan,
                "bounded": self.bounded, "memcpy_gbps": None if self.memcpy_bps is None else self.memcpy_bps / 1e9,
                "held_out_error": self.held_out_error}


def _terms(table: pd.DataFrame, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    ab = [exchange_terms(algorithm, int(p), float(n)) for p, n in zip(table["workers"], table["n_bytes"])]
    return np.array([a for a, _ in ab], dtype=float), np.array([b for _, b in ab], dtype=float)


def _solve(A: np.ndarray, B: np.ndarray, t: np.ndarray, beta_max: float | None) -> tuple[float, float, float, float, str]:
    """Weighted (relative) least squares of t ~ A alpha + B beta under the bounds."""
    w = 1.0 / t                                       # relative error: small and large sizes count alike
    X = np.stack([A * w, B * w], axis=1)
    y = t * w
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)
    coef, *_ = np.linalg.lstsq(X / scale, y, rcond=None)
    alpha, beta = coef / scale
    bounded = ""
    if beta_max is not None and beta > beta_max:      # slower than physics allows: hold beta at the bound
        beta, bounded = beta_max, f"bandwidth >= memcpy / {MEMCPY_FACTOR:g}"
        alpha = float(np.dot(A * w, y - B * w * beta) / np.dot(A * w, A * w))
    if alpha < 0:
        alpha = 0.0
        bounded = (bounded + "; " if bounded else "") + "alpha >= 0"
        if not bounded.startswith("bandwidth"):
            beta = float(np.dot(B * w, y) / np.dot(B * w, B * w))
    dof = len(t) - 2
    resid = y - (A * w * alpha + B * w * beta)
    if dof > 0:
        s2 = float(resid @ resid) / dof
        cov = s2 * np.linalg.pinv((X / scale).T @ (X / scale)) / np.outer(scale, scale)
        alpha_se, beta_se = float(np.sqrt(max(cov[0, 0], 0.0))), float(np.sqrt(max(cov[1, 1], 0.0)))
    else:
        alpha_se = beta_se = math.nan
    return float(alpha), float(beta), alpha_se, beta_se, bounded


def fit_link(table: pd.DataFrame, memcpy_bps: float | None = None, algorithm: str = "sync_sgd") -> LinkFit:
    """alpha, beta (with standard errors, bounds, held-out error) from exchange timings.

    Args:
        table: one row per timed exchange size: n_bytes (of the vector), workers, seconds
            (a robust per-size time, e.g. the median of repeats); at least 2 sizes.
        memcpy_bps: this machine's copy rate (`memcpy_rate`): bounds the bandwidth from below.
        algorithm: whose exchange pattern the timings are (default sync_sgd's ring allreduce).

    >>> p, alpha, beta = 2, 20e-6, 1 / 2e9
    >>> n = np.array([4e4, 4e5, 4e6, 4e7])
    >>> A, B = 2 * (p - 1), 2 * (p - 1) / p * n
    >>> t = pd.DataFrame({"n_bytes": n, "workers": p, "seconds": A * alpha + B * beta})
    >>> f = fit_link(t)
    >>> round(f.alpha * 1e6, 3), round(f.bandwidth_gbps, 3), f.bounded, f.held_out_error < 1e-9
    (20.0, 2.0, '', True)
    """
    t = table.dropna(subset=["seconds"])
    t = t[t["seconds"] > 0].reset_index(drop=True)
    if t["n_bytes"].nunique() < 2:
        raise ValueError(f"table: exchange timings at 2 or more sizes, got {t['n_bytes'].nunique()}")
    A, B = _terms(t, algorithm)
    beta_max = MEMCPY_FACTOR / memcpy_bps if memcpy_bps else None
    alpha, beta, a_se, b_se, bounded = _solve(A, B, t["seconds"].to_numpy(float), beta_max)
    rows = []
    if t["n_bytes"].nunique() >= 3:                    # leave one size out
        for n in sorted(t["n_bytes"].unique()):
            train, test = t[t["n_bytes"] != n], t[t["n_bytes"] == n]
            At, Bt = _terms(train, algorithm)
            a, b, *_ = _solve(At, Bt, train["seconds"].to_numpy(float), beta_max)
            Ah, Bh = _terms(test, algorithm)
            pred = Ah * a + Bh * b
            for measured, predicted in zip(test["seconds"], pred):
                rows.append({"n_bytes": float(n), "measured_s": float(measured), "predicted_s": float(predicted),
                             "error": float(predicted / measured - 1)})
    return LinkFit(alpha, beta, a_se, b_se, bounded, memcpy_bps,
                   pd.DataFrame(rows, columns=["n_bytes", "measured_s", "predicted_s", "error"]))


def exchange_benchmark(client: Any, sizes: Sequence[int] = SIZES, repeats: int = 30) -> pd.DataFrame:
    """Time the shared-memory allreduce between 2 workers of `client` at each size (float32
    elements): one row per size with n_bytes, workers, seconds (median of `repeats`,
    the slower rank's), q25_s and q75_s."""
    import uuid

    from ..comm.shm import allreduce_nbytes, create_segment, unlink_segment
    from .bench import exchange_time
    peers = list(client.scheduler_info()["workers"])[:2]
    if len(peers) < 2:
        raise ValueError(f"client: a cluster of at least 2 workers, got {len(peers)}")
    rows = []
    for n in sizes:
        name = "wbx" + uuid.uuid4().hex[:10]
        client.submit(create_segment, name, allreduce_nbytes(2, int(n)), workers=[peers[0]], pure=False).result()
        try:
            futs = [client.submit(exchange_time, name, r, 2, int(n), repeats, workers=[a], pure=False)
                    for r, a in enumerate(peers)]
            times = np.array(client.gather(futs)).max(axis=0)[1:]   # the first exchange touches the pages
        finally:
            client.submit(unlink_segment, name, workers=[peers[0]], pure=False).result()
        rows.append({"n_bytes": 4 * int(n), "workers": 2, "seconds": float(np.median(times)),
                     "q25_s": float(np.quantile(times, 0.25)), "q75_s": float(np.quantile(times, 0.75))})
    return pd.DataFrame(rows)


def benchmark_link(client: Any, sizes: Sequence[int] = SIZES, repeats: int = 30,
                   memcpy_bps: float | None = None) -> LinkFit:
    """This machine's link, measured now: the exchange micro-benchmark between 2 workers of
    `client` (`exchange_benchmark`), bounded below by this process's memcpy rate / 8
    (`memcpy_rate`, timed now unless given) and fitted with its uncertainty and held-out
    error (`fit_link`). Pass it to `costmodel.calibrate(results, link=...)`.

    What to expect: on the loaded 2-core development machine, five fits in a row gave 2.6 to
    5.7 GB/s with held-out errors of 26% to 208% (the ±25% the issue asks for was not met
    there); `LinkFit.summary()` says how sure this one is."""
    table = exchange_benchmark(client, sizes, repeats)
    return fit_link(table, memcpy_bps=memcpy_rate() if memcpy_bps is None else memcpy_bps)
