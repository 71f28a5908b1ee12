"""Scaling sweeps: the same run on 1, 2, 4, ... workers, strong or weak.

>>> import workbench as wb
>>> table = wb.sweep(wb.RunConfig(algorithm="sync_sgd", batch_size=256, steps=3),
...                  workers=[1, 2], mode="strong", cluster="threads", progress=False)
>>> table["workers"].tolist(), table["batch_size"].tolist(), table["speedup"].tolist()[0]
([1, 2], [256, 256], 1.0)

- strong scaling: the global batch stays `batch_size`; each worker gets less of it.
- weak scaling: the global batch grows with the workers, `batch_size * P / workers[0]`
  (each worker keeps its share; `lr_scaling` decides what happens to the lr).

Throughput (`samples_per_s`) is the run summary's steady throughput (`workbench.measure`:
each worker's first steps and the first tenth of the training span left out, by one rule
for every algorithm), so the one-off set-up of the workers (which dominates short runs and
does not scale with the workers) stays out; evaluations stay in. `steady_reached` says
whether the run was long enough for that rule; `other_cores` and `machine_note` say how
many cores other processes took during the point (`workbench.util.machine`). `wall_samples_per_s` is samples / wall
time, set-up included.

Speedup and efficiency are measured in samples/s against the first worker count:
`speedup = samples_per_s / samples_per_s[0]`, `efficiency = speedup * workers[0] / P`
(1.0 is perfect scaling, in both modes). The sweep varies `cpus` (and sets `gpus=0`),
or `gpus` when the config asks for GPU workers only (`cpus=0`, `gpus >= 1`), or, simulated,
for GPU workers beside CPU ones (its `cpus` kept: cgdp's CPU master).

On the simulated cluster (`sweep(..., simulate=True)`, CLI `sweep --simulate`) each point
is a simulated run with `cpus` or `gpus` virtual workers (up to 1024): throughput and
times are in virtual seconds (`simulated` is True in every row) and `sim_wall_s` is what
simulating the point took.

This module holds the sweep's maths (the configs of each point, one row per run, speedup
and efficiency); running the points is `workbench.sweep` (`workbench.api.sweep`), which
sits above the runs it starts, so this module never imports the entry point.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from ..config import ConfigError, RunConfig
from ..results import RunResult

MODES = ("strong", "weak")
SWEEP_COLUMNS = ("workers", "batch_size", "samples_per_s", "speedup", "efficiency", "comm_fraction",
                 "final_test_accuracy", "wall_time_s", "status", "steps", "algorithm", "mode",
                 "wall_samples_per_s", "run_dir", "simulated", "sim_wall_s", "steady_reached", "other_cores", "machine_note")
OnResult = Callable[[dict, RunResult], None]


def worker_field(config: RunConfig) -> str:
    """The field a sweep varies: "gpus" for GPU-only configs, else "cpus"; a simulated
    config with both (virtual GPUs and a CPU master, as cgdp's) varies its GPUs.

    >>> worker_field(RunConfig(cpus=0, gpus=2, algorithm="sync_sgd", batch_size=8))
    'gpus'
    >>> worker_field(RunConfig())
    'cpus'
    >>> worker_field(RunConfig(cpus=1, gpus=4, algorithm="cgdp", simulate=True, batch_size=8))
    'gpus'
    """
    gpus = config.gpus if isinstance(config.gpus, int) else 0
    return "gpus" if gpus > 0 and (config.cpus == 0 or config.simulate) else "cpus"


def sweep_batch(batch_size: int, workers: int, first: int, mode: str) -> int:
    """The global batch of a run on `workers` workers.

    >>> [sweep_batch(64, w, 1, "strong") for w in (1, 2, 4)]
    [64, 64, 64]
    >>> [sweep_batch(64, w, 1, "weak") for w in (1, 2, 4)]
    [64, 128, 256]
    """
    return batch_size if mode == "strong" else max(1, round(batch_size * workers / first))


def _check(workers: Any, mode: Any) -> list[int]:
    if mode not in MODES:
        raise ConfigError("mode", f"one of {list(MODES)}", mode)
    try:
        ws = [int(w) for w in workers]
    except (TypeError, ValueError):
        raise ConfigError("workers", "a non-empty list of whole numbers >= 1", workers) from None
    if not ws or any(w < 1 for w in ws) or any(isinstance(w, bool) for w in workers):
        raise ConfigError("workers", "a non-empty list of whole numbers >= 1", workers)
    return ws


def sweep_configs(config: RunConfig, workers: Sequence[int] = (1, 2, 4), mode: str = "strong") -> list[RunConfig]:
    """One validated config per worker count (all checked before any run starts).

    Args:
        config: the run to repeat (its `out` is dropped; `sweep` sets one per run).
        workers: worker counts, in the order to run them.
        mode: "strong" or "weak".
    Returns:
        The configs, in `workers` order.
    Raises:
        ConfigError: a bad mode or worker list, or a combination the config rejects
            (e.g. a batch smaller than the workers), naming the field.
    """
    ws = _check(workers, mode)
    field = worker_field(config)
    other = "gpus" if field == "cpus" else "cpus"
    keep = config.simulate and field == "gpus"          # a simulated CPU master stays as it is
    return [config.replace(**{field: w, other: getattr(config, other) if keep else 0, "out": None,
                              "batch_size": sweep_batch(config.batch_size, w, ws[0], mode)})
            for w in ws]


def scaling_row(result: RunResult, workers: int, mode: str, run_dir: str | None = None) -> dict[str, Any]:
    """The sweep row of one finished run (speedup / efficiency filled in by `add_scaling`)."""
    from .costmodel import training_throughput

    s = result.summary
    cfg = s.get("config") or {}
    sps = s["samples_per_s"] if "steady" in s else training_throughput(result)   # older run dirs
    wall = s.get("wall_time_s") or 0.0
    return {"workers": workers, "batch_size": cfg.get("batch_size"), "samples_per_s": sps,
            "speedup": math.nan, "efficiency": math.nan, "comm_fraction": s.get("comm_fraction"),
            "final_test_accuracy": s.get("final_test_accuracy"), "wall_time_s": s.get("wall_time_s"),
            "status": s.get("status"), "steps": s.get("steps"), "algorithm": s.get("algorithm"),
            "mode": mode, "wall_samples_per_s": s.get("samples", 0) / wall if wall > 0 else 0.0,
            "run_dir": run_dir, "simulated": bool(s.get("simulated", False)), "sim_wall_s": s.get("sim_wall_s"),
            "steady_reached": bool((s.get("steady") or {}).get("reached", False)),
            "other_cores": (s.get("machine") or {}).get("other_cores"), "machine_note": s.get("machine_note")}


def add_scaling(table: pd.DataFrame) -> pd.DataFrame:
    """A copy of `table` with speedup and efficiency against its first row.

    >>> t = add_scaling(pd.DataFrame({"workers": [1, 2, 4], "samples_per_s": [100.0, 180.0, 300.0]}))
    >>> t["speedup"].tolist(), t["efficiency"].tolist()
    ([1.0, 1.8, 3.0], [1.0, 0.9, 0.75])
    """
    out = table.copy()
    if not len(out):
        return out
    w0, s0 = float(out["workers"].iloc[0]), float(out["samples_per_s"].iloc[0] or 0.0)
    sps = out["samples_per_s"].astype(float)
    out["speedup"] = sps / s0 if s0 > 0 else math.nan
    out["efficiency"] = out["speedup"] * w0 / out["workers"].astype(float)
    return out
