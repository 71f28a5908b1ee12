"""The batch at which N workers beat one, found by simulating it: what `workbench explain`'s
prediction is checked against (tests/test_explain.py, benchmarks/explain_validation.py).

`speedup_at(config, workers, batch)` simulates the config on one worker and on `workers` at
one global batch (strong scaling) and returns the ratio of their steady throughputs;
`simulated_crossover` brackets the batch where that ratio crosses a target and bisects it
(in log space) to a relative precision. Virtual time is deterministic for a seed, so the
search is too; with jitter each point's ratio carries the straggler draws' noise.
"""
from __future__ import annotations

import math
from typing import Any

from ..config import ConfigError, RunConfig


def speedup_at(config: RunConfig, workers: int, batch: int) -> float:
    """Steady samples/s of `config` on `workers` simulated workers over 1 worker, at global batch `batch`."""
    from .run import run_simulated
    field = "gpus" if isinstance(config.gpus, int) and config.gpus > 0 and config.cpus == 0 else "cpus"
    base = config.replace(simulate=True, batch_size=int(batch), out=None)
    one = run_simulated(base.replace(**{field: 1}))
    many = run_simulated(base.replace(**{field: int(workers)}))
    return float(many.summary["samples_per_s"]) / float(one.summary["samples_per_s"])


def simulated_crossover(config: RunConfig, workers: int, target: float = 1.5, guess: int = 256,
                        precision: float = 0.03, max_batch: int | None = None) -> dict[str, Any]:
    """The smallest global batch at which `workers` simulated workers run `target` x one.

    Args:
        config: the run (simulated; its batch_size is replaced).
        workers: N.
        target: the speed-up sought.
        guess: where to start bracketing (a prediction).
        precision: bisect until the bracket's ends are within this share of each other.
        max_batch: the largest batch tried (default: the dataset's training set).
    Returns:
        {"batch": the crossover (the bracket's geometric middle), "low", "high": the bracket,
        "points": [(batch, speed-up), ...] every simulated point}.
    Raises:
        ConfigError: no batch up to `max_batch` (or down to `workers`) brackets the target.
    """
    limit = max_batch or config.replace(simulate=True).data_shape.n_train
    points: list[tuple[int, float]] = []

    def f(b: float) -> float:
        b = int(min(max(round(b), workers), limit))
        s = speedup_at(config, workers, b)
        points.append((b, s))
        return s - target

    lo = hi = float(min(max(guess, workers), limit))
    f_lo = f_hi = f(lo)
    for _ in range(12):                      # bracket: double up or halve down until the sign changes
        if f_lo < 0 <= f_hi:
            break
        if f_hi < 0:                          # still below the target: a larger batch
            if hi >= limit:
                raise ConfigError("batch_size", f"a batch up to {limit} at which {workers} workers run {target:g}x "
                                  "one (none found)", int(hi))
            lo, f_lo = hi, f_hi
            hi = min(hi * 2, limit)
            f_hi = f(hi)
        else:                                 # already above it: a smaller one
            if lo <= workers:
                return {"batch": float(workers), "low": float(workers), "high": float(workers), "points": points}
            hi, f_hi = lo, f_lo
            lo = max(lo / 2, workers)
            f_lo = f(lo)
    if not f_lo < 0 <= f_hi:
        raise ConfigError("batch_size", f"a batch bracketing a {target:g}x speed-up of {workers} workers", points)
    while hi / lo > 1 + precision and hi - lo > 1:
        mid = math.sqrt(lo * hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return {"batch": math.sqrt(lo * hi), "low": lo, "high": hi, "points": points}
