"""Which training settings learn best, and how sure that is: a grid over config fields.

`wb.grid(config, {"lr": [0.01, 0.03, 0.1], "batch_size": [64, 256]}, seeds=[0, 1, 2])`
runs every combination of the values once per seed (the seeds in the outer loop, so a grid
stopped part-way has every point's first seeds), and tabulates each point over its seeds:
the mean of the metric (final test accuracy, or for a language model the final test loss),
its standard deviation and range, and the point's other numbers (its samples/s as a sweep
gives a point's rounds: the median with the interval that holds it). The best point is named,
and each other point is compared with it by the difference of the two means against two
standard errors of that difference: the seeds' (Welch's: each point's own spread) and, for an
accuracy, the test rows' (an accuracy is a share of n test rows: each its 95% Wilson
interval's half width over z, `learning.accuracy_se`, which is not 0 at p = 1; the two taken
as independent, an upper bound when both score the same rows). A point within them is
**not distinguishable** from the best; one seed measures no spread, so nothing is told apart,
and the table says so. This module plans and tabulates; `api.grid` runs the points.
"""
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..config import ConfigError, RunConfig
from ..learning import accuracy_se
from ..measure import median_rate, notes, relative_spread

NOT_VARIED = ("seed", "out", "resume", "scheduler")   # a grid's own (seeds), or where it runs, not what it trains
MAX_RUNS = 1000
METRICS = {"final_test_accuracy": "higher", "final_test_loss": "lower", "best_test_loss": "lower",
           # a validation set's (`val_fraction`): choosing by them leaves the test set out of the choice
           "final_val_accuracy": "higher", "final_val_loss": "lower", "best_val_loss": "lower"}
VALIDATION = ("final_val_accuracy", "final_val_loss", "best_val_loss", "test_accuracy_at_best_val")
SHOWN = ("final_test_accuracy", "final_test_loss", "best_test_loss", "samples_per_s", "wall_time_s", "steps")


@dataclass(frozen=True)
class GridPlan:
    """A checked grid: the base config, the values of each varied field (in order), the
    seeds and the metric that ranks the points."""

    config: RunConfig
    values: dict[str, list[Any]]
    seeds: tuple[int, ...]
    metric: str

    @classmethod
    def make(cls, config: RunConfig, values: dict[str, Any], seeds: Any = (0,), metric: str | None = None) -> GridPlan:
        """Check everything before any run: each field a config field one may vary, each list
        of values non-empty, every combination a valid config (a bad one named with its
        values), the seeds whole numbers >= 0, the metric one of `METRICS`.

        >>> p = GridPlan.make(RunConfig(algorithm="sgd"), {"lr": [0.01, 0.1]}, seeds=[0, 1])
        >>> [p.label(q) for q in p.points()], p.metric, p.n_runs
        (['lr=0.01', 'lr=0.1'], 'final_test_accuracy', 4)
        """
        if not isinstance(config, RunConfig):
            raise ConfigError("config", "a RunConfig", type(config).__name__)
        if isinstance(values, Mapping):
            values = dict(values)
        if not isinstance(values, dict) or not values:
            raise ConfigError("values", "a dict of config field -> list of values, e.g. {'lr': [0.01, 0.1]}", values)
        checked: dict[str, list[Any]] = {}
        for field, vals in values.items():
            if field not in RunConfig.model_fields:
                raise ConfigError("values", f"config fields (RunConfig's: python -m workbench schema); {field!r} "
                                            "is not one", field)
            if field in NOT_VARIED:
                raise ConfigError("values", f"a field other than {', '.join(NOT_VARIED)} (seeds are the grid's "
                                            "own: seeds=[...])", field)
            if isinstance(vals, (str, bytes)) or not hasattr(vals, "__iter__"):
                raise ConfigError(field, "a list of values to try", vals)
            vals = list(vals)
            if not vals:
                raise ConfigError(field, "at least one value to try", vals)
            checked[field] = vals
        try:
            seed_list = tuple(int(s) for s in (seeds if hasattr(seeds, "__iter__") else [seeds]))
        except (TypeError, ValueError):
            raise ConfigError("seeds", "whole numbers >= 0, e.g. [0, 1, 2]", seeds) from None
        if not seed_list or min(seed_list) < 0 or len(set(seed_list)) != len(seed_list):
            raise ConfigError("seeds", "distinct whole numbers >= 0, at least one", list(seed_list))
        if metric is None:   # by the validation set where the config holds one out
            from ..config import is_text_dataset
            held = "val" if config.val_fraction else "test"
            metric = f"final_{held}_loss" if is_text_dataset(config.dataset) else f"final_{held}_accuracy"
        if metric not in METRICS:
            raise ConfigError("metric", f"one of {', '.join(METRICS)}", metric)
        plan = cls(config, checked, seed_list, metric)
        if "_val_" in metric and not all(plan.config_at(p, seed_list[0]).val_fraction for p in plan.points()):
            raise ConfigError("metric", "a test metric, or val_fraction > 0 at every point (a validation metric "
                              "needs a validation set)", metric)
        if plan.n_runs > MAX_RUNS:
            raise ConfigError("values", f"at most {MAX_RUNS} runs (points x seeds)",
                              f"{len(plan.points())} points x {len(seed_list)} seeds")
        for point in plan.points():   # every combination a valid run, before any runs
            try:
                plan.config_at(point, seed_list[0])
            except (ConfigError, ValueError) as exc:
                raise ConfigError("values", f"combinations that make a valid run ({plan.label(point)}: "
                                            f"{str(exc).splitlines()[0]})", plan.label(point)) from None
        return plan

    def points(self) -> list[dict[str, Any]]:
        """Every combination, the first field's values outermost."""
        fields = list(self.values)
        return [dict(zip(fields, combo)) for combo in itertools.product(*self.values.values())]

    @property
    def n_runs(self) -> int:
        return len(self.points()) * len(self.seeds)

    def config_at(self, point: dict[str, Any], seed: int) -> RunConfig:
        return self.config.replace(**point, seed=seed)

    def test_rows(self, point: dict[str, Any]) -> int | None:
        """How many rows the set the metric scores has at `point` (the test set, or the
        validation set for a validation metric: its dataset's shape; None if unknown)."""
        from ..problem import Problem
        try:
            shape = Problem.from_config(self.config_at(point, self.seeds[0])).shape
        except (ConfigError, ValueError, OSError, TypeError):
            return None
        return int(shape.n_val if "_val_" in self.metric else shape.n_test)

    @property
    def rows_name(self) -> str:
        """What the metric's rows are called: "validation rows" or "test rows"."""
        return "validation rows" if "_val_" in self.metric else "test rows"

    @staticmethod
    def label(point: dict[str, Any]) -> str:
        return ", ".join(f"{k}={_value(v)}" for k, v in point.items())

    @staticmethod
    def slug(point: dict[str, Any], seed: int) -> str:
        """A folder name for one run: `lr0.01-batch_size64-s0`.

        >>> GridPlan.slug({"lr": 0.01, "hidden": [64, 32]}, 2)
        'lr0.01-hidden64_32-s2'
        """
        parts = [f"{k}{re.sub(r'[^A-Za-z0-9.]+', '_', _value(v)).strip('_')}" for k, v in point.items()]
        return "-".join([*parts, f"s{seed}"])


def _value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(_value(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def grid_row(result: Any, point: dict[str, Any], seed: int, run_dir: str | None) -> dict[str, Any]:
    """One run's row of grid_runs.csv: the point, the seed and what the run reached."""
    s = result.summary
    said = [n for n in notes(s) if n != s.get("machine_note")]   # as the CLI and the report say them; the machine's
    #                                                                   has its own column
    return {"point": GridPlan.label(point),
            **{k: _value(v) if isinstance(v, (list, tuple)) else v for k, v in point.items()}, "seed": seed,
            "status": s.get("status"), **{c: s.get(c) for c in SHOWN + VALIDATION}, "note": said[0] if said else None,
            "machine_note": s.get("machine_note"), "run_dir": run_dir}


def combine(rows: list[dict[str, Any]], plan: GridPlan) -> pd.DataFrame:
    """One row per point over its seeds: `runs`, `completed`, the metric's `mean`, `std`
    (over 2 seeds or more), `min`, `max`, the other numbers' means, and the throughput as a
    sweep gives a point's rounds (`sweep.combine_rounds`, the same definitions: a mean of
    rates that moved 3x between seeds is not one rate): `samples_per_s` the median over the
    seeds (`measure.median_rate`), `samples_per_s_lo` / `_hi` the lowest and highest, and
    `spread` the +- of the interval that holds their median (`measure.relative_spread`,
    `measure.median_interval`: the whole range for 2-5 seeds, the extremes outvoted from 6;
    0 for one seed, which measures none); the first note any of its runs had, `machine_note`
    (how many of its runs other processes crowded, with the first one's `machine_note`), and
    `verdict`: "best", "a tie for the best" (two or more points with the same mean, to the
    bit: none of them is the best), "not distinguishable from the best", "worse" / "better"
    (the difference beyond two standard errors), or why it cannot be told (one seed, no
    completed run). Points in the plan's order."""
    runs = pd.DataFrame(rows)
    fields = list(plan.values)
    out = []
    for point in plan.points():
        key = {k: _value(v) if isinstance(v, (list, tuple)) else v for k, v in point.items()}
        mine = runs[runs["point"] == GridPlan.label(point)] if len(runs) else runs
        if not len(mine):
            continue
        done = mine[mine["status"] == "completed"]
        vals = done[plan.metric].astype(float).to_numpy() if len(done) else np.array([])
        vals = vals[np.isfinite(vals)]
        row = {**key, "runs": len(mine), "completed": len(done), "mean": float(vals.mean()) if len(vals) else None,
               "std": float(vals.std(ddof=1)) if len(vals) > 1 else None,
               "min": float(vals.min()) if len(vals) else None, "max": float(vals.max()) if len(vals) else None}
        for c in SHOWN:
            if c != plan.metric:
                col = pd.to_numeric(done[c], errors="coerce") if len(done) else pd.Series(dtype=float)
                row[c] = float(col.mean()) if col.notna().any() else None
        rates = (pd.to_numeric(done["samples_per_s"], errors="coerce").dropna().tolist() if len(done) else [])
        row["samples_per_s"] = median_rate(rates) if rates else None   # the sweep's point over its rounds
        row["samples_per_s_lo"] = min(rates) if rates else None
        row["samples_per_s_hi"] = max(rates) if rates else None
        row["spread"] = relative_spread(rates) if rates else None
        notes = [n for n in mine["note"].tolist() if isinstance(n, str) and n]
        row["note"] = notes[0] if notes else None
        busy = [n for n in mine.get("machine_note", pd.Series(dtype=object)).tolist() if isinstance(n, str) and n]
        row["machine_note"] = f"{len(busy)} of {len(mine)} runs on a busy machine, the first: {busy[0]}" if busy else None
        row["_vals"] = vals
        row["_n_test"] = plan.test_rows(point) if plan.metric.endswith("_accuracy") else None
        out.append(row)
    table = pd.DataFrame(out, columns=[*fields, "runs", "completed", "mean", "std", "min", "max",
                                       *[c for c in SHOWN if c != plan.metric], "samples_per_s_lo",
                                       "samples_per_s_hi", "spread", "note", "machine_note", "_vals", "_n_test"])
    table["verdict"] = _verdicts(table, plan)
    return table.drop(columns=["_vals", "_n_test"]).rename(columns={"mean": f"{plan.metric}_mean", "std": f"{plan.metric}_std",
                                                       "min": f"{plan.metric}_min", "max": f"{plan.metric}_max"})


TIE = "a tie for the best (the same mean, to the bit)"


def _verdicts(table: pd.DataFrame, plan: GridPlan) -> list[str]:
    higher = METRICS[plan.metric] == "higher"
    means = table["mean"].astype(float)
    if not means.notna().any():
        return ["no completed run"] * len(table)
    best = int(means.idxmax() if higher else means.idxmin())
    b = table.loc[best, "_vals"]
    tied = means.index[means == means[best]]   # the same mean to the bit: no point is better than the others
    out = []
    for i, row in table.iterrows():
        vals = row["_vals"]
        if not len(vals):
            out.append("no completed run")
        elif i in tied and len(tied) > 1:
            out.append(TIE)
        elif i == best:
            out.append("best")
        elif len(vals) < 2 or len(b) < 2:
            out.append("not told apart: one seed measures no spread")
        else:
            d = float(vals.mean() - b.mean())
            se_seeds = math.sqrt(vals.var(ddof=1) / len(vals) + b.var(ddof=1) / len(b))
            se_rows = _test_rows_se(float(vals.mean()), float(b.mean()), row["_n_test"], table.loc[best, "_n_test"])
            se = math.hypot(se_seeds, se_rows)
            rows_limit = f"{int(row['_n_test']):,} {plan.rows_name}" if se_rows > se_seeds else None
            why = f", with the {rows_limit}' sampling" if rows_limit else ""
            if abs(d) <= 2 * se:
                out.append("not distinguishable from the best" + (f" (on {rows_limit})" if rows_limit else ""))
            else:
                out.append(f"{'worse' if (d < 0) == higher else 'better'} than the best by {abs(d):.3g} "
                           f"(two standard errors {2 * se:.2g}{why})")
    return out


def _test_rows_se(p1: float, p2: float, n1: Any, n2: Any) -> float:
    """The standard error an accuracy difference has from the test rows alone: each accuracy
    a share of n test rows, its standard error the Wilson interval's (`learning.accuracy_se`:
    above 0 at p = 1, where sqrt(p (1 - p) / n) said 0), the two treated as independent (an
    upper bound when both score the same rows). 0 when n is unknown.

    >>> round(_test_rows_se(1.0, 0.9722, 60, 60), 4)   # (the old rule: 0.0212, 1.0's share of it 0)
    0.0295
    """
    if not n1 or not n2 or n1 != n1 or n2 != n2:
        return 0.0
    return math.hypot(accuracy_se(p1, int(n1)), accuracy_se(p2, int(n2)))


def verdict_text(table: pd.DataFrame, plan: GridPlan) -> str:
    """The grid's answer in one or two sentences: the best point, its mean and range over the
    seeds, and the points these seeds cannot tell from it."""
    m = plan.metric
    if not len(table) or table[f"{m}_mean"].isna().all():
        return "no point of the grid completed a run"
    fields = list(plan.values)
    what = m.replace("final_", "").replace("_", " ")
    tied = table[table["verdict"] == TIE]
    best = tied.iloc[0] if len(tied) else table[table["verdict"] == "best"].iloc[0]
    n = int(best["completed"])
    spread = (f" ({best[f'{m}_min']:.4g}-{best[f'{m}_max']:.4g} over {n} seeds)" if n > 1
              else " (one seed: its spread is not measured)")
    if len(tied):   # the same numbers: naming one of them "best" would rank by the table's order
        text = (f"a tie: {' and '.join(GridPlan.label({k: r[k] for k in fields}) for _, r in tied.iterrows())} "
                f"reached the same mean {what}, {best[f'{m}_mean']:.4g}{spread}, to the bit: no best among them")
    else:
        text = f"best: {GridPlan.label({k: best[k] for k in fields})}, {what} {best[f'{m}_mean']:.4g}{spread}"
    ties = table[table["verdict"].str.startswith("not distinguishable from the best")]
    if len(ties):
        rows = f" and the {plan.rows_name}' sampling" if m.endswith("_accuracy") else ""
        text += (f"; not distinguishable from it (the difference within two standard errors of the seeds' spread"
                 f"{rows}): "
                 + "; ".join(f"{GridPlan.label({k: r[k] for k in fields})} ({r[f'{m}_mean']:.4g})"
                             for _, r in ties.iterrows()))
    elif len(plan.seeds) < 2 and len(table) > 1:
        text += "; with one seed no point is told apart from it: run three seeds or more"
    return text + _busy_text(table)


def _busy_text(table: pd.DataFrame) -> str:
    """"" where no run was crowded; else the sentence the verdict ends with: how many of the
    grid's runs other processes crowded, so their samples/s compare the machine's moments.

    >>> _busy_text(pd.DataFrame({"runs": [3, 3], "machine_note": ["3 of 3 runs on a busy machine, the first: ...", None]}))
    '. The machine was busy during 3 of 6 runs (other processes used its cores): their samples/s measure the machine at that moment, not the settings'
    """
    if "machine_note" not in table:
        return ""
    busy = sum(int(str(n).split(" of ", 1)[0]) for n in table["machine_note"] if isinstance(n, str) and n)
    if not busy:
        return ""
    return (f". The machine was busy during {busy} of {int(table['runs'].sum())} runs (other processes used its "
            f"cores): their samples/s measure the machine at that moment, not the settings")
