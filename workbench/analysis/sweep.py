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
whether the run was long enough for that rule, and `run_note` says it in words (with a run
that learned nothing, `workbench.learning`, and more CPU workers than cores,
`util.machine.crowding_note`); `other_cores` and `machine_note` say how
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

This module holds the sweep's plan and maths (`Sweep`: the arguments checked once, the
configs of each point and the rounds each runs; one row per run, speedup and efficiency);
running the points is `workbench.sweep` (`workbench.api.sweep`, `api.run_sweep` for a
`Sweep` planned already, as the CLI does), which sits above the runs it starts, so this
module never imports the entry point.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..config import ConfigError, ConfigTypeError, RunConfig
from ..measure import MAX_ROUNDS, ROUNDS, Repeats, notes
from ..results.result import RunResult

MODES = ("strong", "weak")
SWEEP_COLUMNS = ("workers", "batch_size", "samples_per_s", "speedup", "efficiency", "comm_fraction",
                 "final_test_accuracy", "final_val_accuracy", "wall_time_s", "status", "steps", "algorithm", "mode",
                 "wall_samples_per_s", "run_dir", "simulated", "sim_wall_s", "steady_reached", "other_cores", "machine_note",
                 "calibration_kept", "run_note", "blas_threads", "rounds", "samples_per_s_lo", "samples_per_s_hi",
                 "spread", "resolved", "resolution_note", "speedup_lo", "speedup_hi")
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
    """The worker counts as whole numbers: a list, or the text a person types ("1,2,4", as the
    CLI's --workers and the dashboard's box take it; a string was read character by character:
    "12" as 1 and 2, "1,2" refused).

    >>> _check("1, 2,4", "strong"), _check([1, 2], "weak")
    ([1, 2, 4], [1, 2])
    """
    if mode not in MODES:
        raise ConfigError("mode", f"one of {list(MODES)}", mode)
    given = workers
    if isinstance(workers, str):
        workers = [w for w in workers.replace(" ", "").split(",") if w]
    allowed = 'a non-empty list of whole numbers >= 1 (or their text: "1,2,4")'
    try:
        ws = [int(w) for w in workers]
    except (TypeError, ValueError):
        raise ConfigError("workers", allowed, given) from None
    if not ws or any(w < 1 for w in ws) or any(isinstance(w, bool) for w in workers):
        raise ConfigError("workers", allowed, given)
    return ws


def sweep_configs(config: RunConfig, workers: Sequence[int] = (1, 2, 4), mode: str = "strong") -> list[RunConfig]:
    """One validated config per worker count (all checked before any run starts).

    Args:
        config: the run to repeat (its `out` is dropped; `sweep` sets one per run).
        workers: worker counts, in the order to run them (a list, or the text "1,2,4").
        mode: "strong" or "weak".
    Returns:
        The configs, in `workers` order.
    Raises:
        ConfigError: a bad mode or worker list, or a combination the config rejects
            (e.g. a batch smaller than the workers), naming the field.
    """
    from ..problem import Problem

    ws = _check(workers, mode)
    field = worker_field(config)
    other = "gpus" if field == "cpus" else "cpus"
    keep = config.simulate and field == "gpus"          # a simulated CPU master stays as it is
    out = []
    for w in ws:
        where = f"at every point of the {mode} sweep (the point on {w} workers"
        batch = sweep_batch(config.batch_size, w, ws[0], mode)
        try:
            c = config.replace(**{field: w, other: getattr(config, other) if keep else 0, "out": None,
                                  "batch_size": batch})
        except ConfigError as exc:
            raise ConfigError(exc.field, f"{exc.allowed} {where})", exc.value) from None
        # the run's plan from the dataset's entry (nothing loaded): a batch larger than the
        # training set, or a schedule longer than the run, fails here, before the first point
        n_train = Problem.from_config(c).shape.n_train
        if c.batch_size > n_train:
            raise ConfigError("batch_size", f"at most the training set size ({n_train}) {where} "
                              f"has batch_size {c.batch_size})", c.batch_size)
        try:
            _ = Problem.from_config(c).plan      # builds (and so checks) the schedule
        except ConfigError as exc:
            raise ConfigError(exc.field, f"{exc.allowed} {where})", exc.value) from None
        except ValueError as exc:
            raise ConfigError("workers", f"points whose run can be planned {where}: {exc})", w) from None
        out.append(c)
    return out


@dataclass(frozen=True)
class Sweep:
    """A scaling sweep, checked once before any point runs: the config at each worker count
    (`sweep_configs`), whether the points run simulated, and the rounds each point runs (at
    least `rounds`; repeated while its rate is not known to +-5%, up to `max_rounds` rounds or
    `budget_s` seconds: `measure.Repeats`). Make one with `Sweep.plan`; `api.run_sweep` runs it.
    """

    config: RunConfig
    workers: tuple[int, ...]
    mode: str
    configs: tuple[RunConfig, ...]
    simulated: bool
    rounds: int
    max_rounds: int
    budget_s: float | None

    @classmethod
    def plan(cls, config: RunConfig | Mapping[str, Any], workers: Sequence[int] = (1, 2, 4), mode: str = "strong",
             *, simulate: bool = False, rounds: int | None = None, max_rounds: int | None = None,
             budget_s: float | None = None) -> Sweep:
        """Check a sweep's arguments (`api.sweep`'s) and plan its points.

        Args:
            config: the run (a RunConfig or a dict of its fields).
            workers: worker counts (a list, or the text "1,2,4"); speedup is against the first.
            mode: "strong" or "weak".
            simulate: every point on the simulated cluster (also when `config.simulate`).
            rounds: runs of each point at least (default `measure.ROUNDS`; 1 simulated).
            max_rounds: runs of a point at most while its rate is not known to +-5%
                (default `measure.MAX_ROUNDS`, at least `rounds`; simulated: `rounds`).
            budget_s: seconds after which no point repeats; None: no time cap.
        Returns:
            The checked `Sweep`.
        Raises:
            ConfigError: a bad argument, naming it (`ConfigTypeError` for a wrong type).
        """
        if not isinstance(config, (RunConfig, Mapping)):
            raise ConfigTypeError("config", "a RunConfig or a dict of its fields", config)
        if not isinstance(simulate, bool):
            raise ConfigTypeError("simulate", "True or False", simulate)
        if not isinstance(config, RunConfig):   # a dict may hold simulation fields (device=...) for simulate=True
            config = RunConfig.from_dict({**config, "simulate": True} if simulate else dict(config))
        simulated = simulate or config.simulate
        if simulated:
            from ..config.registry import specs
            fixed = specs()[config.algorithm].workers
            if fixed is not None:
                raise ConfigError("algorithm", f"a parallel algorithm with simulate ({config.algorithm} runs on "
                                  f"{fixed} worker whatever the sweep varies; sweep sync_sgd instead, which computes "
                                  "the same updates)", config.algorithm)
            config = config.replace(simulate=True)
        if rounds is None:
            rounds = 1 if simulated else ROUNDS
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigTypeError("rounds", "a whole number of rounds >= 1", rounds)
        if max_rounds is None:
            max_rounds = rounds if simulated else max(rounds, MAX_ROUNDS)
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < rounds:
            raise ConfigTypeError("max_rounds", f"a whole number of rounds >= rounds ({rounds})", max_rounds)
        if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, (int, float))
                                     or not budget_s > 0):
            raise ConfigTypeError("budget_s", "seconds > 0, or None for no time cap", budget_s)
        configs = sweep_configs(config, workers, mode)
        return cls(config=config, workers=tuple(_check(workers, mode)), mode=mode, configs=tuple(configs),
                   simulated=simulated, rounds=rounds, max_rounds=max_rounds, budget_s=budget_s)

    def config_at(self, workers: int) -> RunConfig:
        """The config of the point on `workers` workers."""
        return self.configs[self.workers.index(workers)]

    @property
    def largest(self) -> RunConfig:
        """The config of the point with the most workers (the machine's checks are made on it)."""
        return self.config_at(max(self.workers))

    def repeats(self) -> Repeats:
        """A fresh record of the rounds each point has run and still needs (`measure.Repeats`)."""
        return Repeats(list(self.workers), min_rounds=self.rounds, max_rounds=self.max_rounds, budget_s=self.budget_s)


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
            "final_val_accuracy": s.get("final_val_accuracy"),   # rows held out (`val_fraction`): beside the test's
            "status": s.get("status"), "steps": s.get("steps"), "algorithm": s.get("algorithm"),
            "mode": mode, "wall_samples_per_s": s.get("samples", 0) / wall if wall > 0 else 0.0,
            "run_dir": run_dir, "simulated": bool(s.get("simulated", False)), "sim_wall_s": s.get("sim_wall_s"),
            "steady_reached": bool((s.get("steady") or {}).get("reached", False)),
            "other_cores": (s.get("machine") or {}).get("other_cores"), "machine_note": s.get("machine_note"),
            # a simulated run on this machine's core timed while busy: not kept, so not the next run's numbers
            "calibration_kept": s.get("calibration_kept"),
            # the run's notes as the CLI and the report say them (`measure.notes`), the machine's in its own column
            "run_note": "; ".join(n for n in notes(s) if n != s.get("machine_note")) or None,
            "blas_threads": s.get("blas_threads")}


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


SHORT_LABEL = "too short for a steady state"   # the figure's rings and the calibration's sentence


def too_short(table: pd.DataFrame) -> np.ndarray:
    """Which sweep rows' runs were too short for a steady state: `steady_reached` False, the
    one rule (`workbench.measure.steady_window`: fewer than `MIN_STEADY_STEPS` steps a worker
    after the warm-up) by which a row's throughput leaves start-up out, and which its
    `run_note` says in words. The figure rings these rows and the calibration counts them;
    a table without the column (written before it existed) marks none.

    >>> too_short(pd.DataFrame({"steady_reached": [False, True]})).tolist()
    [True, False]

    A simulated run is judged by the same rule: its first steps fill the pipeline (an
    asynchronous run's staleness, a master's first copy), in virtual time as in real time.

    >>> too_short(pd.DataFrame({"steady_reached": [False], "simulated": [True]})).tolist()
    [True]
    >>> too_short(pd.DataFrame({"wall_time_s": [0.3]})).tolist()
    [False]
    """
    if "steady_reached" not in table:
        return np.zeros(len(table), dtype=bool)
    return ~table["steady_reached"].fillna(True).astype(bool).to_numpy()


def table_simulated(table: pd.DataFrame) -> bool | str:
    """Whether a sweep table's runs were simulated: True, False or "mixed" (`simulated_of`)."""
    if "simulated" not in table or not len(table):
        return False
    flags = {bool(v) for v in table["simulated"].fillna(False)}
    return "mixed" if len(flags) > 1 else flags == {True}


GAP_RATIO = 2.0   # the runs' own exchanges this many times the benchmarked link's: said in words


def exchange_gap(cal: Any) -> str:
    """A sentence when the runs' own exchanges took much longer than the benchmarked link
    gives for them ("" otherwise, or without a benchmark): the benchmark times the exchange
    alone, while in a run it also waits for the other workers (their compute, the machine's
    other work on the same cores). The cost model predicts with the benchmarked link, and
    `explain` (the dashboard's why tab) reads the run's own exchange times: this is why the
    two can answer "do N workers beat one?" differently on a busy machine.

    >>> from workbench.analysis.costmodel import Calibration
    >>> pts = pd.DataFrame({"workers": [2], "A": [2.0], "B": [4e5], "comm_s": [1.9e-3]})
    >>> cal = Calibration(compute={}, alpha=9e-6, beta=1e-10, n_params=1, how="benchmark", points=pts)
    >>> exchange_gap(cal)[:96]
    'In the runs themselves an exchange took 1.9 ms a step on 2 workers, 33x the 58.00 us the benchma'
    >>> exchange_gap(Calibration(compute={}, alpha=9e-6, beta=1e-10, n_params=1, how="fit", points=pts))
    ''
    """
    from ..measure import duration_text
    points = getattr(cal, "points", None)
    if cal.how != "benchmark" or points is None or not len(points):
        return ""
    largest = points.sort_values("workers").iloc[-1]
    link = cal.alpha * float(largest["A"]) + cal.beta * float(largest["B"])
    ran = float(largest["comm_s"])
    if not (link > 0 and ran > GAP_RATIO * link):
        return ""
    return (f"In the runs themselves an exchange took {duration_text(ran)} a step on {int(largest['workers'])} "
            f"workers, {ran / link:.0f}x the {duration_text(link)} the benchmarked link gives: the benchmark times "
            "the exchange alone, while in a run it also waits for the other workers (their compute, and other "
            "work on the same cores). The predictions use the link, so they leave that wait out; the why tab "
            "(<code>workbench explain</code>) reads the runs' own exchange times, which is why the two can "
            "answer differently on a busy machine.")


def describe_calibration(cal: Any, error: float | None, table: pd.DataFrame) -> str:
    """The cost model's state in sentences (the scaling tab), as HTML.

    Args:
        cal: a `costmodel.Calibration`.
        error: mean relative error of its predictions on the measured points.
        table: the sweep table it was fitted on.
    """
    n = len(table)
    ws = ", ".join(str(int(w)) for w in table["workers"]) if n else "-"
    parts = [f"The cost model was fitted on {n} run{'s' if n != 1 else ''} (on {ws} workers)."]
    if n and table_simulated(table) is True:
        parts.append("They were simulated: it was fitted to their virtual times, so it restates what the "
                     "simulated device and network profiles imply (not a measurement of this machine).")
    for kind, (c0, c1) in cal.compute.items():
        parts.append(f"A {kind.upper()} worker computes one sample in {c1 * 1e6:.3g} µs, plus "
                     f"{c0 * 1e3:.3g} ms per step.")
    if cal.overhead_s:
        parts.append(f"Each step also spends {cal.overhead_s * 1e3:.3g} ms outside compute and communication.")
    bw = f"{1 / cal.beta / 1e9:.3g} GB/s" if cal.beta > 0 else "unlimited bandwidth"
    how = {"fit": "both fitted to the measured communication times",
           "beta": "the bandwidth fitted to the measured communication times, the latency kept at its "
                   f"default for {cal.network} (the runs could not tell the two apart)",
           "default": f"both the defaults for {cal.network}: the runs measured no communication",
           "benchmark": "both from this machine's link, the exchange timed alone on the sweep's cluster at "
                        "several sizes"}.get(cal.how, cal.how)
    parts.append(f"A message costs {cal.alpha * 1e6:.3g} µs of latency (alpha) and {cal.beta * 1e9:.3g} ns "
                 f"per byte (beta, {bw}): {how}. The model has {cal.n_params:,} parameters of 4 bytes.")
    if error is not None and math.isfinite(error):
        parts.append(f"On the measured points its predictions are off by {error:.0%} on average.")
    gap = exchange_gap(cal)
    if gap:
        parts.append(gap)
    short = int(too_short(table).sum()) if n else 0
    if short:
        from ..measure import MIN_STEADY_STEPS
        parts.append(f"<b>{short} of {n} runs were {SHORT_LABEL}</b> (fewer than {MIN_STEADY_STEPS} steps a "
                     "worker after the warm-up; ringed in the figure): their throughput includes start-up "
                     "effects, so it is not a steady measurement. Run more steps before reading their efficiency.")
    return " ".join(parts)


def fit_cost_model(results: Sequence[RunResult], table: pd.DataFrame, config: RunConfig, workers: Sequence[int],
                   mode: str, network: str, link: Any = None) -> tuple[Any, pd.DataFrame, float]:
    """Calibrate the cost model on a sweep's runs and predict its curves (the scaling tab).

    Args:
        results: the sweep's RunResults.
        table: its table (`sweep`), to measure the predictions' error on.
        config: the swept config (algorithm, batch and the algorithm's own knobs).
        workers: the worker counts swept; predictions go from the first to max(64, 8 x the largest)
            in powers of two.
        mode: "strong" or "weak".
        network: a `costmodel.NETWORKS` name to predict for besides the calibrated one.
        link: a `linkfit.LinkFit` (`linkfit.benchmark_link(client)`): the calibrated link is
            then the benchmarked one, with its uncertainty (`costmodel.calibrate(link=)`).
    Returns:
        (calibration, predicted table, mean relative error on the measured points). The
        error reads the measured points with the terms of the transport they ran on
        (`costmodel.allreduce_of`: shared memory's or threads' barrier meetings), as the
        calibration does; the predicted curves are the standard ring's.
    """
    from . import costmodel

    cal = costmodel.calibrate(list(results), link=link)
    ran_on = {costmodel.run_allreduce(r.summary) for r in results}
    top = max(64, 8 * max(workers))
    knobs = {"tau": config.tau, "round_size": config.round_size, "tournament_size": config.tournament_size,
             "optimizer": config.optimizer, "accumulate": config.accumulate,
             **costmodel.trainers_knob(config.algorithm, config)}
    every = knobs.get("trainers", 1)           # LTFB's trainers divide every worker count, as in its runs
    pred_ws = sorted({workers[0], *[2 ** k for k in range(21) if workers[0] <= 2 ** k <= top and 2 ** k % every == 0]})
    predicted = costmodel.predict(cal, config.algorithm, pred_ws, config.batch_size, mode,
                                  networks=[costmodel.MEASURED, network], **knobs)
    measured = {"allreduce": ran_on.pop()} if len(ran_on) == 1 else {}
    _, error = costmodel.compare(cal, table, config.algorithm, **knobs, **measured)
    return cal, predicted, error


# ROUNDS (3) and MAX_ROUNDS (8), the interleaved rounds of a real sweep's points: `measure`'s


def combine_rounds(rows: Sequence[dict[str, Any]], repeats: Any = None) -> pd.DataFrame:
    """One row per worker count from interleaved rounds (`scaling_row`s with a `round`).

    `samples_per_s` is the median over the rounds (`measure.median_rate`: the lower middle
    one of an even count), `samples_per_s_lo` / `_hi` the lowest and highest, `spread` how
    far the rounds lie from the median, relative to it (`measure.relative_spread`, the +-
    of "known to +-5%"); the row's other columns are the median round's. A point is
    **resolved** when its rate and the first point's (the speed-up's reference) are both
    known to +-`measure.TARGET_SPREAD` (5%) and their ranges do not overlap (the effect it
    shows is wider than the spread);
    otherwise `resolution_note` says, in words, that it is not resolved on this machine now,
    and why. One round measures no spread: `resolved` is then None, unless every row is
    simulated (deterministic: exact). A round that was stopped or failed beside whole
    ones is not counted (its rate is of part of a run); the point's `status` is then that
    round's, and its note says which round. How many rounds a point gets is `measure.Repeats`'s
    (`repeats`: the one that ran these rows; a spent budget goes into the note).
    Speedup and efficiency (`add_scaling`) are of the medians; `speedup_lo` / `_hi` are the
    speed-up's range between the rounds' extremes (`measure.median_speedup`, the demo's and
    `explain`'s: the slowest round over the reference's fastest, the fastest over its
    slowest), NaN for the reference itself (1.0 by definition) and where this point or the
    reference ran one round (no range measured; a simulated table's is its speed-up, exact).

    >>> rows = [{"workers": w, "samples_per_s": v, "round": r, "status": "completed"}
    ...         for r, (a, b) in enumerate([(100, 180), (102, 175), (98, 178)]) for w, v in ((1, a), (2, b))]
    >>> t = combine_rounds(rows)
    >>> t[["workers", "samples_per_s", "samples_per_s_lo", "samples_per_s_hi", "resolved"]].values.tolist()
    [[1, 100.0, 98.0, 102.0, True], [2, 178.0, 175.0, 180.0, True]]
    >>> [round(float(x), 3) for x in t.iloc[1][["speedup", "speedup_lo", "speedup_hi"]]]
    [1.78, 1.716, 1.837]
    >>> rows[3]["samples_per_s"] = 105       # round 1's 2-worker run as slow as a lone worker
    >>> combine_rounds(rows)["resolution_note"].iloc[1]
    'not resolved on this machine now: 2 workers +-21% over 3 rounds (target +-5%)'
    >>> rows[3]["samples_per_s"] = 101       # ... tight, but inside the lone worker's range
    >>> rows[1]["samples_per_s"] = rows[5]["samples_per_s"] = 100
    >>> combine_rounds(rows)["resolution_note"].iloc[1]
    'not resolved on this machine now: 2 workers 100-101 samples/s over 3 rounds overlaps 1 worker(s) 98-102'
    >>> rows[1]["samples_per_s"], rows[3]["samples_per_s"], rows[5]["samples_per_s"] = 180, 175, 178
    >>> rows[2]["samples_per_s"] = 120       # 2 workers tight again, the lone worker +-11%
    >>> combine_rounds(rows)[["resolved", "resolution_note"]].values.tolist()[1]
    [False, "not resolved on this machine now: the speed-up's reference, 1 worker, is +-11% over 3 rounds (target +-5%)"]
    """
    from ..measure import TARGET_SPREAD, median_interval, median_rate, median_speedup, relative_spread, spread_text

    by_w: dict[int, list[dict]] = {}
    for row in rows:
        by_w.setdefault(int(row["workers"]), []).append(row)
    out = []
    uncounted: dict[int, list[dict]] = {}   # rounds stopped or failed beside completed ones: not measured whole
    for w, every in by_w.items():
        group = [r for r in every if r.get("status", "completed") == "completed"] or every
        uncounted[w] = [r for r in every if r not in group]
        values = [float(r["samples_per_s"] or 0.0) for r in group]
        med = median_rate(values)
        pick = min(group, key=lambda r: abs(float(r["samples_per_s"] or 0.0) - med))
        out.append({**{k: v for k, v in pick.items() if k != "round"}, "samples_per_s": med, "rounds": len(group),
                    "samples_per_s_lo": min(values), "samples_per_s_hi": max(values),
                    "spread": relative_spread(values), "_median": median_interval(values), "_values": values})
    simulated = all(bool(r.get("simulated")) for r in out)
    first = out[0] if out else None
    for r in out:   # the speed-up's range: the one definition (`measure.median_speedup`), over the whole rounds
        ranged = first is not None and r is not first and (simulated or (r["rounds"] >= 2 and first["rounds"] >= 2))
        both = ranged and min(first["_values"]) > 0
        _, r["speedup_lo"], r["speedup_hi"] = (median_speedup(r["_values"], first["_values"]) if both
                                               else (None, math.nan, math.nan))
    for r in out:
        known = r["spread"] <= TARGET_SPREAD   # NaN (no rate): not known
        if r["rounds"] < 2 or (first is not None and first["rounds"] < 2):
            r["resolved"] = True if simulated else None
            r["resolution_note"] = "" if simulated else "one round: no spread measured"
        elif not known:
            r["resolved"] = False
            told = spread_text(r["spread"])
            r["resolution_note"] = (f"not resolved on this machine now: {r['workers']} worker"
                                    f"{'' if r['workers'] == 1 else 's'} {told} over "
                                    f"{r['rounds']} rounds (target +-{TARGET_SPREAD:.0%}"
                                    + (f"; budget: {repeats.out_of})" if getattr(repeats, "out_of", None) else ")"))
        elif r is first:
            r["resolved"], r["resolution_note"] = True, ""
        elif not first["spread"] <= TARGET_SPREAD:
            # the speed-up is this rate over the first's: unknown while the first one is
            r["resolved"] = False
            told = spread_text(first["spread"])
            r["resolution_note"] = (f"not resolved on this machine now: the speed-up's reference, {first['workers']} "
                                    f"worker{'' if first['workers'] == 1 else 's'}, is {told} over "
                                    f"{first['rounds']} rounds (target +-{TARGET_SPREAD:.0%})")
        else:
            # the intervals the spread is of (`measure.median_interval`: the whole range for 3-5 rounds, the
            # extremes outvoted from 6): a point known to +-5% is compared by what it is known to
            (lo, hi), (lo1, hi1) = r["_median"], first["_median"]
            overlap = lo <= hi1 and lo1 <= hi
            r["resolved"] = not overlap
            told = "" if (lo, hi) == (r["samples_per_s_lo"], r["samples_per_s_hi"]) else " (the interval that holds its median)"
            r["resolution_note"] = (f"not resolved on this machine now: {r['workers']} workers "
                                    f"{lo:,.0f}-{hi:,.0f} samples/s over {r['rounds']} rounds{told} overlaps "
                                    f"{first['workers']} worker(s) {lo1:,.0f}-{hi1:,.0f}") if overlap else ""
    for r in out:   # a point with a round stopped (or failed) says so: its numbers are its whole rounds'
        left = uncounted[int(r["workers"])]
        if left:
            r["status"] = left[-1]["status"]
            said = (f"round{'s' if len(left) > 1 else ''} "
                    + ", ".join(str(int(x.get("round", 0)) + 1) for x in left)
                    + f" {left[-1]['status']}: not counted ({r['rounds']} whole round{'s' if r['rounds'] != 1 else ''})")
            r["resolution_note"] = "; ".join(n for n in (said, r["resolution_note"]) if n)
    return add_scaling(pd.DataFrame(out, columns=list(SWEEP_COLUMNS)))
