"""What the figures of one run draw, computed without plotly: its records turned into
loss curves, time windows, smoothed rates, breakdown totals, the lr used, tournament
graphs and cgdp's timeline, each as a list of `Series` (`ui/series.py`: name, x, y, where
it goes, trace style); the live figures' series of each new batch (`live_series`). The
runs' names and colours are here too; several runs' figures (scaling, comparison) are
`ui/sweepdata.py`'s.

`workbench.ui.figures` turns these series into plotly traces (static figures, and live
FigureWidgets that append each new batch); the dashboard and the HTML report therefore
show the same quantities. Nothing here imports plotly or ipywidgets, so the maths of the
figures is testable (and doctested) without the UI stack. Functions never modify the
DataFrames or records they get; the few that keep live state say which argument they
update.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import measure
from ..results import EVAL_COLUMNS, STEP_COLUMNS, TOURNAMENT_COLUMNS, RecordBatch, RunResult, RunTally, batch_columns
from .series import Series, Table, column, group_rows, n_rows

__all__ = [
    "PALETTE",
    "COMPONENTS",
    "COMPONENT_NAMES",
    "COMPONENT_COLORS",
    "STATIC_POINTS",
    "LIVE_POINTS",
    "TIME_BINS",
    "STEPS_PER_BIN",
    "SMOOTH_BINS",
    "LIVE_SMOOTHING",
    "MAX_MARKERS",
    "MAX_WORKER_ROWS",
    "MAX_WORKER_TRACES",
    "X_TITLES",
    "run_label",
    "run_color",
    "step_progress",
    "chunk_means",
    "ema",
    "eval_name",
    "TRAIN_ROLE",
    "SMOOTHED",
    "progress_series",
    "align_to_first_step",
    "WINDOW_COLUMNS",
    "Window",
    "auto_bins",
    "time_bins",
    "time_windows",
    "running_mean",
    "worker_style",
    "throughput_series",
    "breakdown_totals",
    "add_totals",
    "breakdown_series",
    "lr_series",
    "planned_series",
    "lineage_series",
    "FIGURE_KEYS",
    "LiveState",
    "live_series",
]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")   # one colour per run (plotly's D3 palette)
COMPONENTS = measure.COMPONENTS  # the time breakdown, as STEP_COLUMNS name it
COMPONENT_NAMES = {"compute_s": "compute", "comm_s": "comm", "wait_s": "wait"}
COMPONENT_COLORS = {"compute_s": "#2ca02c", "comm_s": "#d62728", "wait_s": "#bbbbbb"}
STATIC_POINTS = 5000     # points per trace in a static figure (longer series are thinned)
LIVE_POINTS = 600        # points per live trace: bounds the cost of each redraw (kernel and browser)
TIME_BINS = 40           # time windows of the static throughput / breakdown figures (at most)
STEPS_PER_BIN = 5        # ... each holding about this many steps per worker at least
SMOOTH_BINS = 3          # throughput: running mean over this many windows
LIVE_SMOOTHING = 0.6     # live throughput: weight of the previous value in its moving average
MAX_MARKERS = 30         # markers drawn per eval trace (300 evaluations would draw a dotted bar)
MAX_WORKER_ROWS = 8      # breakdown over time: one row per worker for the first 8 workers
# Per-worker lines (throughput, lr) for the first 16 workers only: a simulated run of 1024
# workers would otherwise draw 1024 traces; "all workers" still counts every worker.
MAX_WORKER_TRACES = 16
X_TITLES = {"time": "time (s)", "epoch": "epoch"}


def run_label(result: RunResult, index: int | None = None) -> str:
    """A short name for a run: `#2 sync_sgd P=2 B=64` (the index is 0-based, shown 1-based).

    >>> import pandas as pd
    >>> r = RunResult(summary={"config": {"algorithm": "sgd", "batch_size": 32}, "workers": [{}]},
    ...               steps=pd.DataFrame(), evals=pd.DataFrame())
    >>> run_label(r, 0)
    '#1 sgd P=1 B=32'
    """
    s = result.summary
    cfg = s.get("config") or {}
    algorithm = s.get("algorithm") or cfg.get("algorithm") or "run"
    parts = [str(algorithm)]
    if s.get("workers"):
        parts.append(f"P={len(s['workers'])}")
    if cfg.get("batch_size") is not None:
        parts.append(f"B={cfg['batch_size']}")
    label = " ".join(parts)
    return label if index is None else f"#{index + 1} {label}"


# Knobs a run's name shows when they are not at their usual value, whatever the run before
# (what users vary most; each only when it applies), beside those that changed since that run.
NAMED_KNOBS = {"optimizer": "sgd", "compression": "none"}
NAME_SKIP = ("out", "algorithm", "cpus", "gpus", "batch_size")   # said already (the head), or not the run's own
NAME_PARTS = 4              # at most this many knobs named; the rest counted


def _knob_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def run_name(index: int, config: dict, workers: int, previous: dict | None = None) -> str:
    """A run's name in the dashboard's legend, status line and runs tab: its number, algorithm,
    workers and batch, then what differs from the run before it (and its update rule or
    compression when not the usual ones), e.g. `#3 sync_sgd P=2 B=32 optimizer=lamb lr=0.003`.

    >>> run_name(2, {"algorithm": "sync_sgd", "batch_size": 32, "optimizer": "lamb", "lr": 0.003, "seed": 0},
    ...          2, {"algorithm": "sync_sgd", "batch_size": 32, "optimizer": "sgd", "lr": 0.1, "seed": 0})
    '#3 sync_sgd P=2 B=32 optimizer=lamb lr=0.003'
    >>> run_name(0, {"algorithm": "diloco", "batch_size": 64, "tau": 8, "compression": "none"}, 4)
    '#1 diloco P=4 B=64'

    A field the run before did not have (the dashboard leaves out knobs that do not apply:
    `controls.applying`) is named only off its default:

    >>> run_name(1, {"algorithm": "sync_sgd", "batch_size": 64, "split": "equal", "latency_ms": 2.0}, 2,
    ...          {"algorithm": "sync_easgd", "batch_size": 64, "tau": 8})
    '#2 sync_sgd P=2 B=64 latency_ms=2'

    Runs that differ only by their seed (rounds of the same config) say so:

    >>> run_name(3, {"algorithm": "sgd", "batch_size": 32, "seed": 1}, 1, {"algorithm": "sgd", "batch_size": 32, "seed": 0})
    '#4 sgd P=1 B=32 seed=1'
    """
    from ..config import RunConfig
    head = f"#{index + 1} {config.get('algorithm', 'run')} P={workers} B={config.get('batch_size')}"

    def changed(k: str) -> bool:   # a field the run before did not have (a knob of this algorithm only): named off its default
        if previous is None:
            return False
        if k in previous:
            return config.get(k) != previous.get(k)
        field = RunConfig.model_fields.get(k)
        return field is None or config.get(k) != field.default
    keys = [k for k in config if k not in NAME_SKIP and (
        changed(k) or (k in NAMED_KNOBS and config.get(k) not in (None, NAMED_KNOBS[k])))]
    parts = [f"{k}={_knob_text(config[k])}" for k in keys[:NAME_PARTS]]
    if len(keys) > NAME_PARTS:
        parts.append(f"+{len(keys) - NAME_PARTS} more")
    return " ".join([head, *parts])


def run_color(index: int) -> str:
    """The colour of the `index`-th run (cycles through PALETTE).

    >>> run_color(0), run_color(len(PALETTE))
    ('#1f77b4', '#1f77b4')
    """
    return PALETTE[index % len(PALETTE)]

# ------------------------------------------------------------------------------ progress
def step_progress(steps: Table) -> dict[str, np.ndarray]:
    """One point per step: sample-weighted mean loss over workers, latest time and epoch.

    >>> p = step_progress({"step": [0, 0, 1], "time": [0.1, 0.2, 0.3], "epoch": [0.5, 0.5, 1.0],
    ...                    "loss": [1.0, 3.0, 2.0], "samples": [1, 3, 4]})
    >>> p["loss"].tolist(), p["time"].tolist()
    ([2.5, 2.0], [0.2, 0.3])
    """
    step = column(steps, "step")
    uniq, inv = np.unique(step, return_inverse=True)
    m = len(uniq)
    loss, samples = column(steps, "loss", float), column(steps, "samples", float)
    ws = np.bincount(inv, samples, minlength=m)
    wl = np.bincount(inv, loss * samples, minlength=m)
    mean = np.bincount(inv, loss, minlength=m) / np.bincount(inv, minlength=m)
    out = {"step": uniq, "loss": np.where(ws > 0, wl / np.where(ws > 0, ws, 1.0), mean)}
    for c in ("time", "epoch"):
        latest = np.full(m, -np.inf)
        np.maximum.at(latest, inv, column(steps, c, float))
        out[c] = latest
    return out


def chunk_means(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` points: means of y over runs of consecutive points, each placed
    at its run's last x (so the newest point stays where it was). The live view's
    decimation: a batch of 5,000 steps adds 100 points that still carry every loss.

    >>> x, y = chunk_means(np.arange(6.0), np.array([1.0, 3, 5, 7, 9, 11]), 3)
    >>> x.tolist(), y.tolist()
    ([1.0, 3.0, 5.0], [2.0, 6.0, 10.0])
    """
    n = len(x)
    if n <= max_points:
        return np.asarray(x, float), np.asarray(y, float)
    size = math.ceil(n / max_points)
    ends = np.arange(n - 1, -1, -size)[::-1]          # chunks counted back from the last point
    starts = np.concatenate([[0], ends[:-1] + 1])
    sums = np.add.reduceat(np.asarray(y, float), starts)
    return np.asarray(x, float)[ends], sums / (ends - starts + 1)


def ema(values: Sequence, weight: float) -> np.ndarray:
    """Exponential moving average with TensorBoard's weight (0 = none, 0.99 = very smooth),
    debiased so that the first value is not pulled towards 0.

    >>> [round(float(v), 3) for v in ema([1.0, 1.0, 4.0], 0.5)]
    [1.0, 1.0, 2.714]
    >>> ema([2.0, 4.0], 0.0).tolist()
    [2.0, 4.0]
    """
    y = np.asarray(values, float)
    if weight <= 0 or len(y) == 0:
        return y.copy()
    if not weight < 1:
        raise ValueError(f"weight: a number in [0, 1), got {weight!r}")
    out = np.empty_like(y)
    acc, norm = 0.0, 0.0
    for i, v in enumerate(y):
        if not math.isfinite(v):
            out[i] = v
            continue
        acc = weight * acc + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out[i] = acc / norm
    return out


def eval_name(label: str, worker: Any, what: str) -> str:
    """Trace name of an eval series: LTFB trainers get their own, others one per run.

    >>> eval_name("#1 ltfb", "trainer-1", "test accuracy")
    '#1 ltfb: test accuracy (trainer-1)'
    >>> eval_name("#1 sgd", "0", "test accuracy")
    '#1 sgd: test accuracy'
    """
    w = str(worker)
    return f"{label}: {what} ({w})" if w.startswith("trainer") else f"{label}: {what}"


TRAIN_ROLE = "train loss"        # `meta` of a run's train-loss trace (smoothing finds it by this)
SMOOTHED = " (smoothed)"         # suffix of its smoothed companion trace


def progress_series(steps: Table, evals: Table, x: str, label: str, color: str,
                    max_points: int | None = None) -> list[Series]:
    """Loss (row 1) and test accuracy (row 2) of one run against `x` ("time" | "epoch").

    One legend entry per run: its train loss (solid) is named `label`; its test loss
    (dashed) and test accuracy share its legend group, so clicking the run's entry
    shows or hides all three.

    Args:
        steps, evals: the run's (or a batch's) step and eval tables.
        x: the x column, "time" or "epoch".
        label, color: the run's name and colour.
        max_points: at most this many train-loss points (`chunk_means`); None keeps one per step.
    Returns:
        Series named "<label>" (train loss), "<label>: test loss", "<label>: test accuracy", and
        "<label>: validation loss" with a validation set (LTFB trainers: one test series per
        trainer, "(trainer-k)" appended).
    """
    if x not in X_TITLES:
        raise ValueError(f"x: one of {list(X_TITLES)}, got {x!r}")
    out: list[Series] = []
    group = {"legendgroup": label}
    if n_rows(steps):
        p = step_progress(steps)
        xs, ys = p[x], p["loss"]
        if max_points is not None:
            xs, ys = chunk_means(xs, ys, max_points)
        out.append(Series(label, xs, ys, row=1,
                          style={"mode": "lines", "line_color": color, "line_width": 1.5, "meta": TRAIN_ROLE,
                                 "hovertemplate": "train loss %{y:.4g}<extra>" + label + "</extra>", **group}))
    if n_rows(evals):
        t, xs = column(evals, "time", float), column(evals, x, float)
        test_loss, acc = column(evals, "test_loss", float), column(evals, "test_accuracy", float)
        has_val = "val_loss" in evals and np.isfinite(column(evals, "val_loss", float)).any()   # `val_fraction`
        val_loss = column(evals, "val_loss", float) if has_val else None
        for worker, idx in group_rows(column(evals, "worker").astype(str)):
            idx = idx[np.argsort(t[idx], kind="stable")]
            trainer = str(worker).startswith("trainer")
            out.append(Series(eval_name(label, worker, "test loss"), xs[idx], test_loss[idx], row=1,
                              style={"mode": "lines+markers", "line_color": color, "marker_size": 5,
                                     "marker_maxdisplayed": MAX_MARKERS,
                                     "line_dash": "dot" if trainer else "dash", "showlegend": False, **group}))
            if val_loss is not None:   # the rows held out of the training set: what chose the kept parameters
                out.append(Series(eval_name(label, worker, "validation loss"), xs[idx], val_loss[idx], row=1,
                                  style={"mode": "lines+markers", "line_color": color, "marker_size": 5,
                                         "marker_symbol": "diamond", "marker_maxdisplayed": MAX_MARKERS,
                                         "line_dash": "dashdot", "showlegend": False, **group}))
            out.append(Series(eval_name(label, worker, "test accuracy"), xs[idx], acc[idx], row=2,
                              style={"mode": "lines+markers", "line_color": color, "marker_size": 6,
                                     "marker_maxdisplayed": MAX_MARKERS,
                                     "line_dash": "dot" if trainer else "solid", "showlegend": False, **group}))
    return out


def align_to_first_step(result: RunResult) -> RunResult:
    """The run with t = 0 at its first training step (a copy; the input is not changed).

    Records put t = 0 at the first step already; older run directories, and runs whose
    clock started before the cluster or the data were ready, had start-up in their time
    axis, which squashed every other run of a comparison into its first fraction.
    """
    steps = result.steps
    if not len(steps):
        return result
    t0 = float(measure.step_starts(steps).min())
    if not (math.isfinite(t0) and t0 > 0):
        return result
    evals = result.evals.assign(time=(result.evals["time"] - t0).clip(lower=0.0)) if len(result.evals) else result.evals
    tours = result.tournaments
    if len(tours) and "time" in tours:
        tours = tours.assign(time=tours["time"] - t0)
    return RunResult(summary=result.summary, steps=steps.assign(time=steps["time"] - t0), evals=evals,
                     tournaments=tours, params=result.params)


# ------------------------------------------------------------------------------ time windows
WINDOW_COLUMNS = ("x", "width", "samples", *COMPONENTS)
Window = dict  # column (WINDOW_COLUMNS) -> array, one entry per time window


def _worker_groups(steps: Table) -> list[tuple[Any, np.ndarray]]:
    return group_rows(column(steps, "worker")) + [("all", np.arange(n_rows(steps)))]


def auto_bins(steps: Table) -> int:
    """Time windows for a static figure: about STEPS_PER_BIN steps per worker in each,
    between 2 and TIME_BINS.

    >>> auto_bins({"worker": [0] * 1000}), auto_bins({"worker": [0, 1] * 20}), auto_bins({"worker": [0]})
    (40, 4, 2)
    """
    n = n_rows(steps)
    workers = max(1, len(np.unique(column(steps, "worker")))) if n else 1
    return int(min(TIME_BINS, max(2, n // workers // STEPS_PER_BIN)))


def time_bins(steps: Table, bins: int | None = None) -> dict[Any, Window]:
    """Per worker (and "all"), sums of samples and step times in equal time windows.

    Args:
        steps: a step table (worker, time, samples, compute_s, comm_s, wait_s).
        bins: windows between time 0 and the last step (default `auto_bins`).
    Returns:
        worker -> {x (window centre), width (s), samples, compute_s, comm_s, wait_s}
        arrays; a worker's windows before its first step started (`measure.step_starts`'s
        rule: end less the time booked) are left out. A step is counted in the window where
        it ended, so a first step that ran over several windows leaves those windows at 0
        samples/s: shown, not dropped (a busy machine's slow first step once cut 2 of 8).

    >>> w = time_bins({"worker": [0, 0], "time": [0.5, 1.0], "samples": [2, 4],
    ...                "compute_s": [0.4, 0.4], "comm_s": [0.1, 0.1], "wait_s": [0, 0]}, bins=2)
    >>> w[0]["x"].tolist(), (w[0]["samples"] / w[0]["width"]).tolist()
    ([0.25, 0.75], [4.0, 8.0])
    """
    n = n_rows(steps)
    if not n:
        return {}
    bins = auto_bins(steps) if bins is None else int(bins)
    t = column(steps, "time", float)
    edges = np.linspace(0.0, max(float(t.max()), 1e-9), bins + 1)
    centres, widths = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    b = np.clip(np.searchsorted(edges, t, side="left") - 1, 0, bins - 1)
    values = {c: column(steps, c, float) for c in ("samples", *COMPONENTS)}
    starts = np.asarray(measure.step_starts({"time": t, **{c: values[c] for c in COMPONENTS}}))
    b_start = np.clip(np.searchsorted(edges, starts, side="right") - 1, 0, bins - 1)
    out: dict[Any, Window] = {}
    for worker, idx in _worker_groups(steps):
        first = int(min(b_start[idx].min(), b[idx].min()))
        sums = {c: np.bincount(b[idx], v[idx], minlength=bins)[first:] for c, v in values.items()}
        out[worker] = {"x": centres[first:], "width": widths[first:], **sums}
    return out


def time_windows(steps: Table, last_time: dict) -> dict[Any, Window]:
    """Per worker (and "all"), sums over the window since that worker's previous batch.

    The live counterpart of `time_bins`: each batch of records gives one window per
    worker, from the last step time seen before (0 at the start) to the newest one.

    Args:
        steps: the batch's step table.
        last_time: worker -> time of the last step already counted; UPDATED in place
            (it is the live plot's memory, `LiveState.last_time`).
    Returns:
        worker -> one-window arrays as `time_bins` gives; workers whose window is
        empty are left out.
    """
    out: dict[Any, Window] = {}
    if not n_rows(steps):
        return out
    t = column(steps, "time", float)
    values = {c: column(steps, c, float) for c in ("samples", *COMPONENTS)}
    for worker, idx in _worker_groups(steps):
        t_end = float(t[idx].max())
        width = t_end - float(last_time.get(worker, 0.0))
        if width <= 0:
            continue
        last_time[worker] = t_end
        out[worker] = {"x": np.array([t_end]), "width": np.array([width]),
                       **{c: np.array([v[idx].sum()]) for c, v in values.items()}}
    return out


def _worker_name(worker: Any) -> str:
    return "all workers" if worker == "all" else f"worker {worker}"


def _rank(worker: Any, default: int) -> int:
    try:
        return int(worker)
    except (TypeError, ValueError):
        return default


def running_mean(y: np.ndarray, k: int = SMOOTH_BINS) -> np.ndarray:
    """Centred running mean over `k` values (fewer at the ends).

    >>> running_mean(np.array([0.0, 3.0, 0.0, 3.0]), 3).tolist()
    [1.5, 1.0, 2.0, 1.5]
    >>> running_mean(np.array([1.0, 3.0, 5.0]), 5).tolist()      # shorter than the window: as long as y
    [2.0, 3.0, 4.0]
    """
    y = np.asarray(y, float)
    if k <= 1 or len(y) < 2:
        return y.copy()
    # np.convolve's "same" output is as long as the longer input: keep the window within y
    # (and odd, so it stays centred)
    k = min(k, len(y) if len(y) % 2 else len(y) - 1)
    kernel = np.ones(k)
    return np.convolve(y, kernel, "same") / np.convolve(np.ones(len(y)), kernel, "same")


def worker_style(rank: int) -> dict:
    """Line style of worker `rank`: colour, and width and dash that differ by rank, so
    workers running at the same rate (every sync run) draw visibly on top of each other."""
    dashes = ("solid", "dash", "dot", "dashdot")
    return {"line_color": run_color(rank), "line_width": max(1.5, 4.0 - 1.25 * (rank % 3)),
            "line_dash": dashes[rank % len(dashes)], "opacity": 0.9}


def throughput_series(windows: dict[Any, Window], smooth: int = SMOOTH_BINS,
                      previous: dict | None = None, weight: float = LIVE_SMOOTHING) -> list[Series]:
    """samples/s of each worker ("worker k") and of all together ("all workers"), smoothed.

    Args:
        windows: `time_bins` / `time_windows` output.
        smooth: static figures: running mean over this many windows.
        previous: live figures: worker -> last smoothed rate, UPDATED in place; each new
            window's rate is averaged into it with `weight` (so a live line does not jump
            with every batch). "all workers" is then the sum of every worker's smoothed rate
            (the traces drawn and those past MAX_WORKER_TRACES): a batch holds some workers'
            newest steps and not others', so its own window undercounts them all.

    >>> prev = {}
    >>> win = {w: {"x": np.array([1.0]), "width": np.array([1.0]), "samples": np.array([s])}
    ...        for w, s in ((0, 10.0), (1, 30.0), ("all", 25.0))}
    >>> [(s.name, s.y.tolist()) for s in throughput_series(win, previous=prev)]
    [('worker 0', [10.0]), ('worker 1', [30.0]), ('all workers', [40.0])]
    """
    out = []
    order = sorted(windows, key=lambda w: w == "all")   # the workers first: live, "all" is their sum
    for i, worker in enumerate(order):
        w = windows[worker]
        rate = w["samples"] / w["width"]
        if previous is not None and worker == "all":
            rate = np.full(len(rate), sum(v for k, v in previous.items() if k != "all"))
        elif previous is not None:
            smoothed = []
            for v in rate:
                last = previous.get(worker)
                previous[worker] = v if last is None else weight * last + (1 - weight) * v
                smoothed.append(previous[worker])
            rate = np.asarray(smoothed)
        else:
            rate = running_mean(rate, smooth)
        if worker != "all" and _rank(worker, i) >= MAX_WORKER_TRACES:
            continue
        # "all workers" heads the legend: of 16 workers' lines it would be the 17th, past a scroll
        style = ({"mode": "lines", "line_color": "#333", "line_dash": "dash", "line_width": 1.5, "legendrank": 1}
                 if worker == "all" else {"mode": "lines", **worker_style(_rank(worker, i))})
        out.append(Series(_worker_name(worker), w["x"], rate, style={
            **style, "hovertemplate": "%{y:,.0f} samples/s<extra>" + _worker_name(worker) + "</extra>"}))
    return out


# ------------------------------------------------------------------------------ breakdown
def breakdown_totals(steps: Table) -> dict[Any, np.ndarray]:
    """Seconds of (compute, comm, wait) per worker, workers sorted.

    >>> t = breakdown_totals({"worker": [1, 0, 1], "compute_s": [1.0, 2.0, 3.0],
    ...                       "comm_s": [0.5, 0.0, 0.5], "wait_s": [0.0, 0.25, 0.0]})
    >>> {k: v.tolist() for k, v in t.items()}
    {0: [2.0, 0.0, 0.25], 1: [4.0, 1.0, 0.0]}
    """
    values = np.stack([column(steps, c, float) for c in COMPONENTS], axis=1) if n_rows(steps) else None
    return {w: values[idx].sum(axis=0) for w, idx in group_rows(column(steps, "worker"))}


def add_totals(a: dict[Any, np.ndarray], b: dict[Any, np.ndarray]) -> dict[Any, np.ndarray]:
    """Sum of two `breakdown_totals` (a new dict; neither input changes)."""
    out = {w: v.copy() for w, v in a.items()}
    for w, v in b.items():
        out[w] = out[w] + v if w in out else v.copy()
    return dict(sorted(out.items(), key=lambda kv: (_rank(kv[0], 1 << 30), str(kv[0]))))


def breakdown_series(totals: dict[Any, np.ndarray], windows: dict[Any, Window],
                     n_rows: int) -> list[Series]:
    """Stacked horizontal bars of each worker's compute + comm + wait seconds (column 1) and, per worker row, the shares
    of compute / comm / wait over time (column 2, stacked areas normalised to 100%).

    Args:
        totals: `breakdown_totals` of the run so far (replaces the bars).
        windows: `time_bins` / `time_windows` output.
        n_rows: worker rows in the figure (workers 0..n_rows-1 get one each).
    """
    out: list[Series] = []
    names = [_worker_name(w) for w in totals]
    for k, c in enumerate(COMPONENTS):    # one horizontal bar per worker: none hides another
        out.append(Series(COMPONENT_NAMES[c], [v[k] for v in totals.values()], names, row=1, col=1,
                          trace="bar", mode="replace",
                          style={"marker_color": COMPONENT_COLORS[c], "legendgroup": COMPONENT_NAMES[c],
                                 "orientation": "h",
                                 "hovertemplate": "%{y}: %{x:.3g} s " + COMPONENT_NAMES[c] + "<extra></extra>"}))
    for worker, w in windows.items():
        rank = _rank(worker, -1)
        if worker == "all" or not 0 <= rank < n_rows:
            continue
        keep = sum(w[c] for c in COMPONENTS) > 0
        if not keep.any():
            continue
        for k, c in enumerate(COMPONENTS):
            style = {"mode": "lines", "stackgroup": f"w{rank}", "line_width": 0.5, "showlegend": False,
                     "line_color": COMPONENT_COLORS[c], "legendgroup": COMPONENT_NAMES[c]}
            if k == 0:
                style["groupnorm"] = "percent"
            out.append(Series(f"worker {rank} {COMPONENT_NAMES[c]}", w["x"][keep], w[c][keep],
                              row=rank + 1, col=2, style=style))
    return out


# ------------------------------------------------------------------------------ lr
def lr_series(steps: Table) -> list[Series]:
    """The lr each worker used at each of its steps (one series per worker, the first
    MAX_WORKER_TRACES workers)."""
    out = []
    step, lr = column(steps, "step", float), column(steps, "lr", float)
    for i, (worker, idx) in enumerate(group_rows(column(steps, "worker"))):
        if _rank(worker, i) >= MAX_WORKER_TRACES:
            continue
        idx = idx[np.argsort(step[idx], kind="stable")]
        out.append(Series(_worker_name(worker), step[idx], lr[idx],
                          style={"mode": "lines", **worker_style(_rank(worker, i))}))
    return out


def planned_series(plan: Any, points: int = 400) -> list[Series]:
    """The planned schedule of an `optim.Plan`, and the end of warmup, as dashed lines."""
    from ..maths.schedules import lr_table

    table = lr_table(plan.schedule, plan.total_steps, points)
    steps = [t for t, _ in table]
    lrs = [v for _, v in table]
    text = [f"epoch {plan.epoch(t):.2f}" for t in steps]
    out = [Series("planned", steps, lrs, mode="replace", text=text,
                  style={"mode": "lines", "line_color": "#888", "line_dash": "dash"})]
    if plan.warmup_steps:
        top = max(lrs) if lrs else 0.0
        out.append(Series("end of warmup", [plan.warmup_steps] * 2, [0.0, top], mode="replace",
                          style={"mode": "lines", "line_color": "#bbb", "line_dash": "dot"}))
    return out


# ------------------------------------------------------------------------------ lineage
def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return bool(v) and not (isinstance(v, float) and math.isnan(v))


def _partner(v: Any) -> int | None:
    try:
        p = int(v)
    except (TypeError, ValueError):
        return None
    return p if p >= 0 else None


def _score(v: Any) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return "-"


def lineage_series(tournaments: Table, lineages: dict) -> list[Series]:
    """LTFB tournaments as a graph: trainer (y) against round (x).

    A kept model is a grey edge from (round - 1, trainer) to (round, trainer); an
    adopted one a red edge from (round - 1, partner) to (round, trainer). Each node is
    coloured by the origin of the model the trainer holds after the round: the first
    part of its lineage ("t0@r0" of "t0@r0>t2@r3", the model born in trainer 0), so a
    model spreading through the population shows as one colour; hover shows the whole
    lineage.

    Args:
        tournaments: tournament table (round, trainer, partner, own_score,
            partner_score, adopted, lineage, ...).
        lineages: lineage origin -> colour index; UPDATED in place with new origins,
            so colours stay fixed across live batches.
    Returns:
        Series "kept", "adopted", "trainers" (none for an empty table).
    """
    n = n_rows(tournaments)
    if not n:
        return []
    cols = {c: column(tournaments, c) for c in ("round", "trainer", "partner", "own_score",
                                              "partner_score", "adopted", "lineage")}
    order = np.lexsort((cols["trainer"].astype(float), cols["round"].astype(float)))
    kept_x: list = []
    kept_y: list = []
    ad_x: list = []
    ad_y: list = []
    node_x, node_y, colors, text = [], [], [], []
    for i in order:
        rnd, trainer = int(cols["round"][i]), int(cols["trainer"][i])
        partner = _partner(cols["partner"][i])
        adopted = _truthy(cols["adopted"][i]) and partner is not None
        if adopted:
            ad_x += [rnd - 1, rnd, None]
            ad_y += [partner, trainer, None]
        else:
            kept_x += [rnd - 1, rnd, None]
            kept_y += [trainer, trainer, None]
        lineage = str(cols["lineage"][i])
        origin = lineage.split(">")[0]
        if origin not in lineages:
            lineages[origin] = len(lineages)
        node_x.append(rnd)
        node_y.append(trainer)
        colors.append(run_color(lineages[origin]))
        text.append(f"trainer {trainer}, round {rnd}<br>lineage {lineage}<br>own {_score(cols['own_score'][i])}, "
                    f"partner {'-' if partner is None else partner} {_score(cols['partner_score'][i])}"
                    f"<br>{'adopted' if adopted else 'kept'}")
    return [
        Series("kept", kept_x, kept_y, thin=False,
               style={"mode": "lines", "line_color": "#ccc", "line_width": 1, "hoverinfo": "skip"}),
        Series("adopted", ad_x, ad_y, thin=False,
               style={"mode": "lines", "line_color": "#d62728", "line_width": 2.5, "hoverinfo": "skip"}),
        Series("trainers", node_x, node_y, text=text, colors=colors,
               style={"mode": "markers", "marker_size": 10, "hoverinfo": "text",
                      "marker_line_width": 1, "marker_line_color": "#333"}),
    ]

# ------------------------------------------------------------------------------ one run, live
FIGURE_KEYS = ("progress_time", "progress_epoch", "throughput", "breakdown", "lr", "lineage")


@dataclass
class LiveState:
    """What the live figures remember about the run being drawn, between batches."""

    label: str
    color: str
    n_workers: int = 1
    last_time: dict = field(default_factory=dict)        # worker -> last step time counted
    totals: dict = field(default_factory=dict)           # breakdown_totals so far
    lineages: dict = field(default_factory=dict)         # lineage id -> colour index
    tally: RunTally = field(default_factory=RunTally)    # steps seen, epoch, samples (results.RunTally)
    records: int = 0                                     # records drawn so far
    rates: dict = field(default_factory=dict)            # worker -> smoothed samples/s
    t_offset: float | None = None                        # record time of the first step's start

    @property
    def steps_seen(self) -> int:
        """Highest step + 1 drawn so far."""
        return self.tally.steps_seen


def lost_workers(records: Any) -> list[str]:
    """The ids (as text) of the workers a batch of records says were lost (`worker_lost` events).

    >>> lost_workers([{"kind": "event", "event": "worker_lost", "worker": 1, "time": 0.3},
    ...               {"kind": "event", "event": "regrouped", "worker": None, "time": 0.4}])
    ['1']
    """
    others = records.others if isinstance(records, RecordBatch) else [r for r in records if r.get("kind") != "step"]
    return [str(r["worker"]) for r in others
            if r.get("kind") == "event" and r.get("event") == "worker_lost" and r.get("worker") is not None]


def live_series(records: Any, state: LiveState) -> dict[str, list[Series]]:
    """The series a batch of records adds to each live figure; moves `state` on.

    Args:
        records: a batch as `on_record` receives it (a columnar `results.RecordBatch`, or
            record dicts; not modified).
        state: the run's LiveState (its windows, totals, lineages move on).
    Returns:
        FIGURE_KEYS -> series to pass to `extend_series`.
    """
    steps = batch_columns(records, "step", STEP_COLUMNS)      # a RecordBatch's columns as they came
    evals = batch_columns(records, "eval", EVAL_COLUMNS)
    tours = batch_columns(records, "tournament", TOURNAMENT_COLUMNS)
    state.records += len(records)
    state.tally.add(records)
    for lost in lost_workers(records):      # "all workers" sums the rates of those still running
        for key in [k for k in state.rates if k != "all" and str(k) == lost]:
            del state.rates[key]
    out: dict[str, list[Series]] = {k: [] for k in FIGURE_KEYS}
    if state.t_offset is None and state.tally.first_start is not None:   # t = 0 at the first step's start
        state.t_offset = max(0.0, state.tally.first_start)
    if state.t_offset:
        if n_rows(steps):
            steps = {**steps, "time": column(steps, "time", float) - state.t_offset}
        if n_rows(evals):
            evals = {**evals, "time": np.maximum(column(evals, "time", float) - state.t_offset, 0.0)}
    if n_rows(steps):
        state.totals = add_totals(state.totals, breakdown_totals(steps))
        windows = time_windows(steps, state.last_time)
        out["throughput"] = throughput_series(windows, previous=state.rates)
        out["breakdown"] = breakdown_series(state.totals, windows, max(1, min(state.n_workers, MAX_WORKER_ROWS)))
        out["lr"] = lr_series(steps)
    # One loss point per step block the workers streamed (`results.live_width`: blocks fixed by
    # the plan, so the points are the same however the batches were cut), not re-binned per batch.
    out["progress_time"] = progress_series(steps, evals, "time", state.label, state.color)
    out["progress_epoch"] = progress_series(steps, evals, "epoch", state.label, state.color)
    out["lineage"] = lineage_series(tours, state.lineages)
    return out


# ------------------------------------------------------------------------------ cgdp's per-iteration timeline
def cgdp_timeline_rows(result: Any, worker: int = 0) -> list[dict[str, Any]]:
    """One cgdp iteration of a simulated run as timeline rows (lane, what, start, end, in
    virtual seconds): `worker`'s compute (forward, then backward: a third and two thirds of
    its booked compute) and its wait for the weights, from its step records; its chunks'
    copies to the host, the host master's sum and update of every part, and the copies
    back, from the simulator's trace (`summary["cgdp_timeline"]`, the last completed step).
    The step's fetch and the next step's compute are included, so the overlap of the next
    forward pass with the copies back is visible. [] when the run has no trace.

    >>> cgdp_timeline_rows(type("R", (), {"summary": {}, "steps": None})())
    []
    """
    trace = (result.summary or {}).get("cgdp_timeline")
    if not trace or result.steps is None:
        return []
    step = trace["step"]
    rows: list[dict[str, Any]] = []
    steps = result.steps[result.steps["worker"] == worker].set_index("step")
    for k in (step, step + 1):
        if k not in steps.index:
            continue
        r = steps.loc[k]
        end = float(r["time"])
        fetch0 = end - float(r["comm_s"]) - float(r["wait_s"])
        c0 = fetch0 - float(r["compute_s"])
        fwd = c0 + float(r["compute_s"]) / 3.0
        rows += [{"lane": f"device {worker}: compute", "what": f"forward (step {k})", "start": c0, "end": fwd},
                 {"lane": f"device {worker}: compute", "what": f"backward (step {k})", "start": fwd, "end": fetch0}]
        if k == step:
            rows.append({"lane": f"device {worker}: compute", "what": "waiting for weights", "start": fetch0, "end": end})
    lanes = {"d2h": f"device {worker} -> host", "h2d": f"host -> device {worker}", "update": "host: sum and update"}
    for e in trace["intervals"]:
        if e["what"] != "update" and e["rank"] != worker:
            continue
        what = f"[{e['lo']}, {e['hi']})" + (f" from {e['rank']}" if e["what"] == "update" else "")
        rows.append({"lane": lanes[e["what"]], "what": what, "start": float(e["start"]), "end": float(e["end"])})
    return rows
