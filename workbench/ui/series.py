"""The data every figure is made of: its runs as tables, `Series`, thinning, column helpers.

A figure's runs come as a `RunResult`, a run directory or a list of record dicts
(`Source`, `as_result`, `results_of`); what a figure draws is a list of `Series` (one
trace's data and where it goes), made by the `*_series` functions of `ui/figdata.py` (one
run) and `ui/sweepdata.py` (several runs). Long series are cut by rules that keep the
first point (`thin`) or each bin's extremes (`extremes`, `decimate_all`); the live path's
batches are column mappings rather than DataFrames (`Table`, `column`, `n_rows`). NumPy
and pandas only: no plotly.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..results import EVAL_COLUMNS, STEP_COLUMNS, TOURNAMENT_COLUMNS, RunResult

Source = Any  # a RunResult, a run directory (str / Path) or a list of record dicts


# ------------------------------------------------------------------------------ inputs
def records_to_tables(records: Iterable[dict]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Split streamed records into (steps, evals, tournaments) tables, without "kind".

    Args:
        records: flat record dicts as `workbench.results` defines them; other kinds
            (events) are ignored.
    Returns:
        Three DataFrames with the columns of STEP_COLUMNS, EVAL_COLUMNS and
        TOURNAMENT_COLUMNS (less "kind"); empty ones when no such record came.

    >>> steps, evals, tours = records_to_tables([{"kind": "eval", "worker": "0", "step": 3,
    ...     "epoch": 1.0, "time": 0.5, "train_loss": 1.0, "test_loss": 1.1, "test_accuracy": 0.5}])
    >>> len(steps), len(evals), list(evals.columns)[:3]
    (0, 1, ['worker', 'step', 'epoch'])
    """
    rows: dict[str, list[dict]] = {"step": [], "eval": [], "tournament": []}
    for r in records:
        bucket = rows.get(r.get("kind"))
        if bucket is not None:
            bucket.append(r)
    return (pd.DataFrame(rows["step"], columns=list(STEP_COLUMNS)).drop(columns="kind"),
            pd.DataFrame(rows["eval"], columns=list(EVAL_COLUMNS)).drop(columns="kind"),
            pd.DataFrame(rows["tournament"], columns=list(TOURNAMENT_COLUMNS)).drop(columns="kind"))


def as_result(source: Source) -> RunResult:
    """A `RunResult` from a result, a run directory or a list of records.

    Args:
        source: a `RunResult`, a path to a run directory, or a list of record dicts.
    Returns:
        The `RunResult` (records get a minimal summary: status "running").
    Raises:
        TypeError: for anything else, naming the value.
    """
    if isinstance(source, RunResult):
        return source
    if isinstance(source, (str, os.PathLike)):
        return RunResult.load(source)
    if isinstance(source, (list, tuple)) and all(isinstance(r, dict) for r in source):
        steps, evals, tours = records_to_tables(source)
        return RunResult(summary={"status": "running", "config": {}, "workers": []},
                         steps=steps, evals=evals, tournaments=tours)
    raise TypeError(f"source: a RunResult, a run directory or a list of records, got {type(source).__name__}")


def results_of(sources: Source | Sequence[Source]) -> list[RunResult]:
    """One source or several -> a list of RunResults (a list of dicts is one run's records)."""
    if isinstance(sources, RunResult) or isinstance(sources, (str, os.PathLike)):
        return [as_result(sources)]
    if isinstance(sources, (list, tuple)) and sources and all(isinstance(r, dict) for r in sources):
        return [as_result(sources)]
    return [as_result(s) for s in sources]


# ------------------------------------------------------------------------------ series
@dataclass(frozen=True)
class Series:
    """One trace's worth of data and where it goes; `name` is its key in live figures.

    `mode="append"` series add points to a live trace of the same name; `"replace"` ones
    (totals, tables) overwrite it. `text` / `colors` are per-point hover texts and marker
    colours, kept in step with x and y. `thin=False` keeps every point (edge lists, whose
    (start, end, None) triples thinning would break).
    """

    name: str
    x: Sequence
    y: Sequence
    row: int = 1
    col: int = 1
    trace: str = "scatter"                         # "scatter" | "bar"
    style: dict = field(default_factory=dict)      # plotly trace properties (magic underscores)
    mode: str = "append"                           # "append" | "replace"
    text: Sequence | None = None
    colors: Sequence | None = None
    thin: bool = True


def thin(values: Sequence, max_points: int) -> list:
    """Every k-th value counted back from the last, k chosen so at most `max_points` remain,
    and the first value.

    Keeping the first matters: a live trace is thinned again at every redraw, and
    counting back from the last alone drops the oldest point each time, so the start
    of a long run crept out of the plot (the lr plot of a 20,000-step run began at
    step 13,556).

    Args:
        values: a sequence.
        max_points: how many values at most, >= 2.
    Returns:
        A new list; the first and the last value are always kept.

    >>> thin(list(range(10)), 4)
    [0, 3, 6, 9]
    >>> thin(list(range(11)), 4)
    [0, 2, 6, 10]
    >>> thin([1, 2], 5)
    [1, 2]
    """
    values = list(values)
    n = len(values)
    if n <= max_points:
        return values
    stride = math.ceil((n - 1) / max(1, max_points - 1))
    idx = list(range(n - 1, -1, -stride))[::-1]
    if idx[0] != 0:
        idx = [0] + idx[1:] if len(idx) >= max_points else [0] + idx
    return [values[i] for i in idx]


def as_array(values: Sequence | None) -> np.ndarray | None:
    """Numbers as a float array (plotly validates arrays without a per-point loop, and a
    FigureWidget ships them as binary buffers); None, strings and colours stay lists."""
    if values is None:
        return None
    arr = np.asarray(values)
    if arr.dtype.kind in "biuf":
        return arr.astype(float)
    return arr.astype(object)


def extremes(x: Sequence, y: Sequence, max_points: int) -> np.ndarray:
    """Indices of at most about `max_points` points that keep a line's shape: the x range is
    cut into `max_points // 2` equal bins and each bin keeps its lowest and its highest y
    (in x order), so no spike and no dip is lost; the first and last points are kept.

    Stable under repetition, which a live trace needs (it is decimated again at every
    redraw): decimating decimated points keeps the same extremes, and a continuous series
    never has a gap wider than two bins (2 / (max_points // 2) of its x range). Points
    whose x or y is not finite (NaN: a missing value) are kept as they are only when few.
    Args:
        x, y: numbers of the same length, x in increasing order.
        max_points: about how many points to keep, >= 4.
    Returns:
        Sorted indices into x and y.

    >>> x = np.arange(10.0); y = np.array([0, 9, 1, 1, 1, 1, 1, 1, -5, 0.0])
    >>> extremes(x, y, 4).tolist()     # two bins, x < 4.5 and the rest: each keeps its min and max
    [0, 1, 5, 8, 9]
    >>> extremes(x, y, 100).tolist() == list(range(10))
    True
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n <= max_points:
        return np.arange(n)
    bins = max(1, max_points // 2)
    lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
    width = (hi - lo) / bins if hi > lo else 1.0
    b = np.clip(((x - lo) / width).astype(np.int64, copy=False) if hi > lo else np.zeros(n, np.int64), 0, bins - 1)
    yy = np.where(np.isfinite(y), y, np.nan)
    keep = np.zeros(n, dtype=bool)
    keep[[0, n - 1]] = True
    # x is sorted, so each bin is one run of rows: per run, the first row holding its min
    # and the first holding its max (linear: reduceat over the runs, no sort)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    run = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    for values in (yy, -yy):
        filled = np.where(np.isnan(values), np.inf, values)
        at_min = np.flatnonzero(filled == np.minimum.reduceat(filled, starts)[run])
        keep[at_min[np.r_[True, run[at_min][1:] != run[at_min][:-1]]]] = True
    keep |= ~np.isfinite(y) & (np.count_nonzero(~np.isfinite(y)) <= max_points // 10)
    return np.flatnonzero(keep)


def decimate_all(max_points: float, *seqs: Sequence | None) -> list:
    """`seqs` (x, y, then per-point extras or None) sorted by x and cut to the points
    `extremes` keeps; as arrays. Non-numeric x (categories) are only cut by `thin_all`."""
    arrays = [as_array(s) for s in seqs]
    x = arrays[0]
    if x.dtype.kind != "f" or len(x) <= max_points:
        if x.dtype.kind == "f" and len(x) > 1 and np.any(np.diff(x) < 0):
            order = np.argsort(x, kind="stable")
            return [None if a is None else a[order] for a in arrays]
        return thin_all(max_points, *arrays) if x.dtype.kind != "f" else arrays
    order = np.argsort(x, kind="stable")
    arrays = [None if a is None else a[order] for a in arrays]
    y = arrays[1]
    if y.dtype.kind != "f":
        return thin_all(max_points, *arrays)
    idx = extremes(arrays[0], y, int(max_points))
    return [None if a is None else a[idx] for a in arrays]


def thin_all(max_points: int, *seqs: Sequence | None) -> list:
    arrays = [as_array(s) for s in seqs]
    n = len(arrays[0])
    if n <= max_points:
        return arrays
    idx = np.asarray(thin(range(n), max_points))
    return [None if a is None else a[idx] for a in arrays]


# ------------------------------------------------------------------------------ tables
Table = Any  # a DataFrame, or a mapping column -> array (the live path's batches: no pandas)


def records_to_columns(records: Iterable[dict], kind: str, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """The records of one kind as column arrays (the live path: cheaper than a DataFrame).

    >>> cols = records_to_columns([{"kind": "step", "worker": 0, "loss": 1.5}, {"kind": "eval"}],
    ...                           "step", ("kind", "worker", "loss"))
    >>> sorted(cols), cols["loss"].tolist()
    (['loss', 'worker'], [1.5])
    """
    rows = [r for r in records if r.get("kind") == kind]
    return {c: np.asarray([r.get(c) for r in rows]) for c in columns if c != "kind"}


def column(table: Table, name: str, dtype: Any = None) -> np.ndarray:
    """Column `name` of a DataFrame or a column mapping as an array (cast to `dtype`)."""
    arr = np.asarray(table[name])
    return arr if dtype is None else arr.astype(dtype)


def n_rows(table: Table) -> int:
    """The rows of a DataFrame or a column mapping (0 for an empty mapping)."""
    if isinstance(table, pd.DataFrame):
        return len(table)
    return len(next(iter(table.values()))) if len(table) else 0


def _key(k: Any) -> Any:
    return k.item() if isinstance(k, np.generic) else k


def group_rows(keys: np.ndarray) -> list[tuple[Any, np.ndarray]]:
    """(key, row indices) per distinct key: keys sorted, rows in their original order.

    >>> [(k, i.tolist()) for k, i in group_rows(np.array([1, 0, 1]))]
    [(0, [1]), (1, [0, 2])]
    """
    if len(keys) == 0:
        return []
    uniq, inv = np.unique(keys, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    bounds = np.cumsum(np.bincount(inv, minlength=len(uniq)))[:-1]
    return [(_key(k), idx) for k, idx in zip(uniq, np.split(order, bounds))]
