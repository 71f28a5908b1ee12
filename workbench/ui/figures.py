"""Figures of runs: pure functions from records / `RunResult`s to plotly figures.

Every figure comes from one code path in two flavours: `live=False` gives a plain
`go.Figure` (HTML reports, papermill, batch runs) and `live=True` a `go.FigureWidget`
(the dashboard, which keeps appending to it). Live figures are built as plain ones and
wrapped at the end (`as_widget`), so a widget's first message carries its whole state.

The numbers of a figure are computed by small `*_series` functions that turn tables
(DataFrames, or column arrays for live batches) into `Series` (name, x, y, where,
style, `ui/series.py`); they live in `ui/figdata.py` (one run) and `ui/sweepdata.py`
(several runs), NumPy and pandas only. This module lays the figures out; the traces and
axes are `ui/traces.py`'s: a static figure adds the series as traces (`add_series`), the
live dashboard hands each new batch of records to `live_edits`, whose edits append the
batch's series to the traces of the same name inside `fig.batch_update()`. So a live plot and the report of the same run show the
same quantities.

Figures (each accepts one run or several; runs are overlaid, one colour per run):

- `progress_figure`: train loss, test loss and test accuracy against time or epoch;
- `throughput_figure`: samples/s of each worker (and all together) over time;
- `breakdown_figure`: where each worker's time goes (compute / comm / wait): totals per
  worker, and each worker's shares over time;
- `lr_figure`: the lr each worker actually used, per step;
- `lineage_figure`: LTFB tournaments: trainer against round, adoptions drawn as edges;
- `scaling_figure`: throughput and efficiency against workers, the ideal line, and the
  cost model's predicted curves over the measured points;
- `schedule_figure`: the lr schedule a config implies, before the run.

Runs on the simulated cluster (summary `simulated: true`) are timed in virtual seconds:
every figure of such a run says so on its time axes and rates (`mark_virtual`), so a
simulated curve is never read as a measured one.

Only `workbench.ui` imports plotly; functions never modify the DataFrames they get.
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

try:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
except ImportError as _exc:      # the lab extra: one line that says so, not a bare ModuleNotFoundError
    from ..util.extras import missing_extra
    raise missing_extra("figures", _exc) from None

from ..analysis.sweep import table_simulated
from .figdata import (
    LIVE_POINTS,
    MAX_WORKER_ROWS,
    X_TITLES,
    LiveState,
    align_to_first_step,
    breakdown_series,
    breakdown_totals,
    lineage_series,
    live_series,
    lr_series,
    planned_series,
    progress_series,
    run_color,
    run_label,
    throughput_series,
    time_bins,
)
from .series import Source, as_result, results_of
from .sweepdata import comparison_series, scaling_series
from .traces import (
    add_series,
    apply_smoothing,
    as_widget,
    extend_series,
    fit_fraction_axis,
    is_widget,
    log_decades,
    set_loss_scale,
)


def _empty(fig: Any, text: str) -> Any:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font={"color": "#888"})
    return fig


# Axis and subplot titles of real runs -> those of a simulated run's (whose clock is virtual).
VIRTUAL_TITLES = {"time (s)": "time (virtual seconds)", "seconds": "virtual seconds",
                  "samples/s": "samples per virtual second"}
MIXED_SUFFIX = " (virtual for simulated runs)"


def simulated_of(results: Sequence[Any]) -> bool | str:
    """Whether runs were simulated: True (all), False (none) or "mixed".

    >>> from workbench.results import RunResult
    >>> sim = RunResult(summary={"simulated": True}, steps=pd.DataFrame(), evals=pd.DataFrame())
    >>> real = RunResult(summary={}, steps=pd.DataFrame(), evals=pd.DataFrame())
    >>> simulated_of([sim]), simulated_of([real]), simulated_of([sim, real])
    (True, False, 'mixed')
    """
    flags = {bool((getattr(r, "summary", None) or {}).get("simulated")) for r in results}
    return "mixed" if len(flags) > 1 else flags == {True}


def mark_virtual(fig: Any, virtual: bool | str = True) -> Any:
    """Title the time axes (and rates) of `fig` in virtual seconds, or back in seconds.

    Args:
        fig: any of this module's figures (static or live).
        virtual: True (a simulated run), False (a real one), "mixed" (runs of both
            overlaid: the titles say the time is virtual for the simulated ones).
    Returns:
        `fig`, its axis titles and subplot titles rewritten (`VIRTUAL_TITLES`).

    >>> fig = mark_virtual(throughput_figure([]))
    >>> fig.layout.xaxis.title.text, fig.layout.yaxis.title.text
    ('time (virtual seconds)', 'samples per virtual second')
    >>> mark_virtual(fig, False).layout.xaxis.title.text
    'time (s)'
    """
    def to_real(text: str) -> str:
        text = text.replace(MIXED_SUFFIX, "")
        for real, sim in VIRTUAL_TITLES.items():
            text = text.replace(sim, real)
        return text

    def convert(text: str | None, whole: bool) -> str | None:
        if not text:
            return text
        text = to_real(text)
        if not virtual:
            return text
        if virtual == "mixed":
            return text + MIXED_SUFFIX if (text in VIRTUAL_TITLES if whole else
                                           any(k in text for k in VIRTUAL_TITLES)) else text
        if whole:
            return VIRTUAL_TITLES.get(text, text)
        return text.replace("samples/s", VIRTUAL_TITLES["samples/s"])

    def axis(ax: Any) -> None:
        ax.title.text = convert(ax.title.text, whole=True)

    with fig.batch_update() if is_widget(fig) else contextlib.nullcontext():
        fig.for_each_xaxis(axis)
        fig.for_each_yaxis(axis)
        for a in fig.layout.annotations:     # subplot titles, e.g. "throughput (samples/s)"
            a.text = convert(a.text, whole=False)
    return fig


# A horizontal legend under a figure, anchored to the bottom of the whole figure (container
# coordinates): plotly then widens the bottom margin to hold it below the x-axis title. One
# placed in plot coordinates (y = -0.14 of the plot's height) sat on the x-axis title whenever
# the plot was short or the legend took a second row (seen in a browser with 3 or more runs).
BOTTOM_LEGEND = {"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 0, "yanchor": "bottom",
                 "font": {"size": 10}}


def _base(**subplots: Any) -> Any:
    """An empty static figure with our template and margins, laid out by make_subplots."""
    # The template goes in at construction: setting it later first copies plotly's default one.
    layout = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 60, "b": 40},
              "legend": {"font": {"size": 10}}}
    return make_subplots(figure=go.Figure(layout=layout), **subplots)


def _progress_base(x: str) -> Any:
    fig = _base(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.6, 0.4],
                subplot_titles=("loss (solid: train, dashed: test, dash-dot: validation if held out)", "test accuracy"))
    fig.update_xaxes(title_text=X_TITLES[x], row=2, col=1)
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", row=2, col=1)
    # The loss axis can switch to a log scale (a warm-up spike dominates a linear one).
    buttons = [{"label": "loss: linear", "method": "relayout", "args": [{"yaxis.type": "linear"}]},
               {"label": "loss: log", "method": "relayout", "args": [{"yaxis.type": "log"}]}]
    if x == "time":
        fig.update_xaxes(rangemode="tozero")          # t = 0: the first training step
    fig.update_layout(title=f"loss and test accuracy against {x}", height=520, legend_groupclick="togglegroup",
                      legend=BOTTOM_LEGEND, margin_b=70,
                      updatemenus=[{"type": "buttons", "direction": "right", "buttons": buttons, "showactive": True,
                                    "x": 1.0, "xanchor": "right", "y": 1.12, "yanchor": "bottom",
                                    "pad": {"r": 0, "t": 0}, "font": {"size": 10}}])
    return fig


def progress_figure(results: Source | Sequence[Source], x: str = "time", live: bool = False,
                    labels: Sequence[str] | None = None, smoothing: float = 0.0, log_loss: bool = False) -> Any:
    """Loss and test accuracy of one or several runs against time or epoch.

    Args:
        results: a RunResult / run directory / record list, or a list of them (overlaid).
        x: "time" (seconds since each run's first step) or "epoch".
        live: a FigureWidget instead of a Figure.
        labels: one name per run (default `run_label`).
        smoothing: `ema` weight for the train loss (0: raw only).
        log_loss: the loss axis on a log scale (buttons in the figure switch it too).
    Returns:
        The figure; row 1 loss (train: line, test: dashed), row 2 test accuracy; one
        legend entry per run.
    """
    if x not in X_TITLES:
        raise ValueError(f"x: one of {list(X_TITLES)}, got {x!r}")
    fig = _progress_base(x)
    for i, r in enumerate(results_of(results)):
        label = labels[i] if labels else run_label(r, i)
        r = align_to_first_step(r)
        add_series(fig, progress_series(r.steps, r.evals, x, label, run_color(i)))
        if not live:
            _mark_best(fig, r, x, label, run_color(i))
    mark_virtual(fig, simulated_of(results_of(results)))
    set_loss_scale(fig, log_loss)
    apply_smoothing(fig, smoothing)
    fit_fraction_axis(fig, "y2")
    return as_widget(fig, live)


def _mark_best(fig: Any, result: Any, x: str, label: str, color: str) -> None:
    """A star on the test loss where a run that learned its training set by heart was at its
    best (`summary["overfit_note"]`; `learning.best_test_loss`): the parameters kept there."""
    from .. import learning
    found = learning.best_test_loss(result.evals) if result.summary.get("overfit_note") else None
    if found is None:
        return
    best = found[1]
    fig.add_trace(go.Scatter(x=[float(best[x])], y=[float(best["test_loss"])], mode="markers",
                             name=f"{label}: lowest test loss", legendgroup=label, showlegend=False,
                             marker={"symbol": "star", "size": 14, "color": color, "line": {"width": 1, "color": "#222"}},
                             hovertemplate=f"lowest test loss %{{y:.4g}} after {int(best['step']) + 1} steps "
                                           "(its parameters kept: params_best.npy)<extra>" + label + "</extra>"),
                  row=1, col=1)


def _throughput_base() -> Any:
    fig = _base(rows=1, cols=1)
    fig.update_layout(title="throughput per worker (smoothed)", height=360, hovermode="x unified")
    fig.update_xaxes(title_text="time (s)", rangemode="tozero")
    fig.update_yaxes(title_text="samples/s", rangemode="tozero")
    return fig


def throughput_figure(result: Source, live: bool = False, bins: int | None = None) -> Any:
    """Samples/s of each worker over time (and all workers together, dashed), smoothed
    over SMOOTH_BINS time windows.

    Args:
        result: one run (RunResult, run directory or records).
        live: a FigureWidget instead of a Figure.
        bins: time windows (default `auto_bins`).
    Returns:
        The figure: one trace per worker ("worker k", the first MAX_WORKER_TRACES) and
        "all workers".
    """
    r = align_to_first_step(as_result(result))
    fig = mark_virtual(_throughput_base(), simulated_of([r]))
    if not len(r.steps):
        return as_widget(_empty(fig, "no steps recorded"), live)
    return as_widget(add_series(fig, throughput_series(time_bins(r.steps, bins))), live)


def breakdown_titles(n_workers: int) -> list[str]:
    """The time-breakdown figure's panel titles: the bars, then one per worker row (the first
    MAX_WORKER_ROWS; the first row's title says so when there are more workers). The bars are
    the three timed parts, not a worker's whole time: evaluations and the engine's own work are
    outside them (a 2-worker local_sgd run: bars of 4.3 s in 5.3 s of training), so their title
    names the parts ("total time per worker" read as all of it).

    >>> breakdown_titles(16)[:2]
    ['compute + comm + wait', 'worker 0: share of time (the first 8 of 16)']
    """
    n = max(1, min(int(n_workers or 1), MAX_WORKER_ROWS))
    shown = "" if int(n_workers or 1) <= n else f" (the first {n} of {int(n_workers)})"
    return ["compute + comm + wait"] + [f"worker {k}: share of time{shown if k == 0 else ''}" for k in range(n)]


def _breakdown_base(n_workers: int) -> Any:
    n = max(1, min(int(n_workers or 1), MAX_WORKER_ROWS))
    specs = [[{"rowspan": n}, {}]] + [[None, {}] for _ in range(n - 1)]
    titles = breakdown_titles(n_workers)
    height = max(340, 130 * n + 140)
    # ~32 px between two workers' panels (the plot area is the height less ~170 px of margins), so a
    # panel's title never sits on the panel above's axis; at most 0.3 of the plot in all
    spacing = min(0.3 / n, 32 / (height - 170)) if n > 1 else 0.0
    fig = _base(rows=n, cols=2, specs=specs, column_widths=[0.35, 0.65], shared_xaxes="columns",
                subplot_titles=titles, vertical_spacing=spacing)
    fig.update_layout(title="where the time goes (compute / comm / wait)", barmode="stack", margin_t=90,
                      height=height)
    # subplot titles a size smaller: at 14 px a 21-character title overran its 0.35-wide
    # column onto the next column's "100%" tick in a 562 px dashboard column
    fig.update_annotations(font_size=12)
    fig.update_xaxes(title_text="seconds", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)        # worker 0 on top, as the rows on the right
    for k in range(n):
        fig.update_yaxes(range=[0, 100], ticksuffix="%", row=k + 1, col=2)
    fig.update_xaxes(title_text="time (s)", row=n, col=2)
    for k in range(n):
        fig.update_xaxes(rangemode="tozero", row=k + 1, col=2)
    return fig


def breakdown_figure(result: Source, live: bool = False, bins: int | None = None) -> Any:
    """Where each worker's time goes: compute, communication, waiting.

    Args:
        result: one run.
        live: a FigureWidget instead of a Figure.
        bins: time windows of the over-time panels (default `auto_bins`).
    Returns:
        The figure: horizontal bars "compute", "comm", "wait" (y = worker), and per worker row
        stacked areas "worker k compute" / "worker k comm" / "worker k wait" in percent.
    """
    r = align_to_first_step(as_result(result))
    n_workers = r.steps["worker"].nunique() if len(r.steps) else len(r.summary.get("workers", [])) or 1
    fig = mark_virtual(_breakdown_base(n_workers), simulated_of([r]))
    if not len(r.steps):
        return as_widget(_empty(fig, "no steps recorded"), live)
    n = max(1, min(int(n_workers), MAX_WORKER_ROWS))
    series = breakdown_series(breakdown_totals(r.steps), time_bins(r.steps, bins), n)
    return as_widget(add_series(fig, series), live)


def _lr_base(title: str = "lr actually used") -> Any:
    fig = _base(rows=1, cols=1)
    fig.update_layout(title=title, height=320)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="lr", rangemode="tozero")
    return fig


def lr_figure(result: Source, live: bool = False, plan: Any = None) -> Any:
    """The lr each worker actually used, per step, optionally over the planned schedule.

    Args:
        result: one run.
        live: a FigureWidget instead of a Figure.
        plan: an `optim.Plan` whose schedule is drawn dashed ("planned").
    Returns:
        The figure: one trace per worker ("worker k"), and "planned" when given.
    """
    r = as_result(result)
    fig = _lr_base()
    if plan is not None:
        add_series(fig, planned_series(plan))
    if not len(r.steps) and plan is None:
        return as_widget(_empty(fig, "no steps recorded"), live)
    return as_widget(add_series(fig, lr_series(r.steps)), live)


def schedule_figure(plan: Any, live: bool = False) -> Any:
    """The lr schedule a config implies, drawn before the run (the dashboard's preview).

    Args:
        plan: an `optim.Plan` (`workbench.algorithms.base.run_plan(config, n_train)`).
        live: a FigureWidget instead of a Figure.
    Returns:
        The figure: "planned" and, with warmup, "end of warmup"; the title is the
        schedule in words.
    """
    fig = _lr_base(title=plan.schedule_text)
    return as_widget(add_series(fig, planned_series(plan)), live)


def _lineage_base() -> Any:
    fig = _base(rows=1, cols=1)
    fig.update_layout(title="LTFB tournaments: adoptions (red) and lineages (colours)", height=340)
    fig.update_xaxes(title_text="round")
    fig.update_yaxes(title_text="trainer", dtick=1)
    return fig


def lineage_figure(result: Source, live: bool = False) -> Any:
    """The tournament lineage of an LTFB run (an annotated empty figure for other runs).

    Args:
        result: one run.
        live: a FigureWidget instead of a Figure.
    Returns:
        The figure with traces "kept", "adopted", "trainers" (none without tournaments).
    """
    r = as_result(result)
    fig = _lineage_base()
    if not len(r.tournaments):
        return as_widget(_empty(fig, "no tournaments in this run (LTFB only)"), live)
    return as_widget(add_series(fig, lineage_series(r.tournaments, {})), live)


def _scaling_base(mode: str = "") -> Any:
    # the unit on the axis: as a subplot title, "throughput (samples per virtual second, log-log)"
    # ran past the figure's left edge in a 562 px column
    fig = _base(rows=1, cols=2, subplot_titles=("throughput (log-log)", "efficiency"))
    fig.update_xaxes(title_text="workers", type="log", dtick=math.log10(2))
    fig.update_yaxes(type="log", title_text="samples/s", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", tickformat=".0%", row=1, col=2)
    fig.update_layout(title=f"{mode + ' ' if mode else ''}scaling", height=400, hovermode="closest",
                      legend=BOTTOM_LEGEND)
    return fig


def scaling_figure(table: pd.DataFrame, predicted: pd.DataFrame | None = None, live: bool = False,
                   error: float | None = None, mode: str = "") -> Any:
    """Measured scaling (throughput, efficiency vs workers) with the ideal line and
    the cost model's predictions drawn over the measured points; throughput on log-log
    axes, runs too short for a steady state ringed (`analysis.sweep.too_short`).

    Args:
        table: a sweep table (may be empty: the dashboard fills it as runs end).
        predicted: `costmodel.predict` output, one curve per network.
        live: a FigureWidget instead of a Figure.
        error: the model's mean relative error on the measured points, shown in the title.
        mode: "strong" or "weak", for the title.
    Returns:
        The figure (traces as `scaling_series` names them).
    """
    fig = mark_virtual(_scaling_base(mode), table_simulated(table))
    add_series(fig, scaling_series(table, predicted))
    log_decades(fig, "y")
    if error is not None:
        fig.update_layout(title=f"{fig.layout.title.text}: prediction error on measured points {error:.0%}")
    return as_widget(fig, live)


def update_scaling(fig: Any, table: pd.DataFrame, predicted: pd.DataFrame | None = None,
                   error: float | None = None) -> Any:
    """Redraw a live scaling figure from the sweep table so far (its traces in one batch_update,
    then the throughput axis's ticks for the data now drawn)."""
    with fig.batch_update():
        mark_virtual(fig, table_simulated(table))
        extend_series(fig, scaling_series(table, predicted))
        if error is not None:
            base = (fig.layout.title.text or "scaling").split(":")[0]
            fig.layout.title.text = f"{base}: prediction error on measured points {error:.0%}"
    # after the batch: inside it the traces still read as the last redraw's data
    return log_decades(fig, "y", narrow_ticks=True)      # at every redraw: the ticks follow the data


def grid_figure(runs: pd.DataFrame, plan: Any) -> Any:
    """A grid's runs (`grid_runs.csv`'s rows, `analysis.grid`): the metric against the first
    varied field, one dot a seed and the seeds' mean joined by a line, one colour for each
    combination of the other fields; a log axis for positive numbers spanning 10x or more."""
    from ..analysis.grid import GridPlan
    fields = list(plan.values)
    x_field, others, metric = fields[0], fields[1:], plan.metric
    done = runs[runs["status"] == "completed"] if len(runs) else runs
    fig = _base(rows=1, cols=1)
    groups = done.groupby(others, sort=False) if others and len(done) else [((), done)]
    for i, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        name = GridPlan.label(dict(zip(others, key))) or metric.replace("_", " ")
        colour = run_color(i)
        means = g.groupby(x_field, sort=False)[metric].mean()
        fig.add_trace(go.Scatter(x=g[x_field], y=g[metric], mode="markers", name=f"{name}: each seed",
                                 legendgroup=name, marker={"color": colour, "opacity": 0.45, "size": 7}))
        fig.add_trace(go.Scatter(x=means.index, y=means.to_numpy(), mode="lines+markers", name=f"{name}: mean",
                                 legendgroup=name, line={"color": colour}))
    xs = [v for v in plan.values[x_field] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(xs) == len(plan.values[x_field]) and min(xs) > 0 and max(xs) >= 10 * min(xs):
        fig.update_xaxes(type="log")
    fig.update_xaxes(title_text=x_field)
    fig.update_yaxes(title_text=metric.replace("_", " "))
    fig.update_layout(title=f"{metric.replace('_', ' ')} over seeds{(' by ' + ', '.join(others)) if others else ''}",
                      height=420, hovermode="closest", legend=BOTTOM_LEGEND)
    return fig


def comparison_figure(results: Sequence[Source], labels: Sequence[str] | None = None, live: bool = False) -> Any:
    """Several runs side by side: throughput, and where the time went (from summaries).

    Args:
        results: runs (RunResults or run directories).
        labels: one name per run (default `run_label`).
        live: a FigureWidget instead of a Figure.
    Returns:
        The figure: bars "samples/s" (one per run) and stacked "compute share",
        "comm share", "wait share".
    """
    runs = results_of(results)
    labels = list(labels) if labels else [run_label(r, i) for i, r in enumerate(runs)]
    fig = _base(rows=1, cols=2, subplot_titles=("throughput (samples/s)", "share of worker time"))
    fig.update_layout(title="runs compared", barmode="stack", height=380)
    fig.update_yaxes(tickformat=".0%", range=[0, 1], row=1, col=2)
    mark_virtual(fig, simulated_of(runs))
    return as_widget(add_series(fig, comparison_series(runs, labels)), live)


def run_figures(result: Source, live: bool = False, include_empty: bool = False) -> dict[str, Any]:
    """Every figure of one run, keyed by FIGURE_KEYS (lineage only for LTFB runs).

    Args:
        result: one run.
        live: FigureWidgets instead of Figures.
        include_empty: keep the lineage figure even without tournaments.
    """
    r = as_result(result)
    figs = {
        "progress_time": progress_figure(r, "time", live),
        "progress_epoch": progress_figure(r, "epoch", live),
        "throughput": throughput_figure(r, live),
        "breakdown": breakdown_figure(r, live),
        "lr": lr_figure(r, live),
    }
    if include_empty or len(r.tournaments):
        figs["lineage"] = lineage_figure(r, live)
    return figs


def _without_buttons(fig: Any) -> Any:
    fig.layout.updatemenus = ()          # (update_layout merges lists: it cannot remove them)
    return fig


def live_base(key: str, n_workers: int = 1, simulated: bool = False) -> Any:
    """An empty FigureWidget for one of FIGURE_KEYS, laid out as the static figure is
    (time axes in virtual seconds for a `simulated` run)."""
    makers = {   # the dashboard has its own log-scale control next to the live progress plots
        "progress_time": lambda: _without_buttons(_progress_base("time")),
        "progress_epoch": lambda: _without_buttons(_progress_base("epoch")),
        "throughput": _throughput_base,
        "breakdown": lambda: _breakdown_base(n_workers),
        "lr": _lr_base,
        "lineage": _lineage_base,
    }
    if key not in makers:
        raise ValueError(f"key: one of {list(makers)}, got {key!r}")
    return as_widget(mark_virtual(makers[key](), simulated))


def live_edits(records: Any, state: LiveState, max_points: int = LIVE_POINTS) -> dict[str, Callable[[Any], Any]]:
    """What a batch of records adds to the live figures: FIGURE_KEYS -> an edit `fig -> fig`
    that appends the batch's series (`figdata.live_series`) to the traces of the same name
    (`extend_series`). The dashboard hands each edit to its figure's slot, which applies it
    inside one `batch_update` (or once a view can take it).

    Args:
        records: the batch (a `RecordBatch` or record dicts; not modified).
        state: the run's LiveState (advanced by the batch).
        max_points: points kept per trace.
    Returns:
        The edits of the figures this batch adds to (none for an empty series).
    """
    return {key: functools.partial(extend_series, series=series, max_points=max_points)
            for key, series in live_series(records, state).items() if series}


def cgdp_timeline_figure(result: Source, worker: int = 0, title: str | None = None) -> Any:
    """One cgdp iteration of a simulated run on a time line (`figdata.cgdp_timeline_rows`):
    a device's forward and backward passes, its chunk copies to the host, the host's sum
    and update of each part, the copies back and the next forward pass, in virtual
    seconds. With `weight_return` chunks the copies back overlap the backward pass and the
    next forward waits only for the chunk updated last."""
    from .figdata import cgdp_timeline_rows
    res = as_result(result)
    rows = cgdp_timeline_rows(res, worker)
    fig = go.Figure()
    colours = {"forward": "#4c78a8", "backward": "#72b7b2", "waiting": "#bab0ac"}
    lanes = [f"device {worker}: compute", f"device {worker} -> host", "host: sum and update", f"host -> device {worker}"]
    for row in rows:
        key = next((k for k in colours if row["what"].startswith(k)), None)
        colour = colours.get(key, {"device": "#f58518", "host:": "#e45756"}.get(row["lane"].split()[0], "#54a24b"))
        if row["lane"].startswith("host ->"):
            colour = "#54a24b"
        fig.add_bar(y=[row["lane"]], x=[row["end"] - row["start"]], base=[row["start"]], orientation="h",
                    marker_color=colour, marker_line_color="white", marker_line_width=1, showlegend=False,
                    hovertemplate=f"{row['what']}<br>%{{base:.4f}} to %{{x:.4f}} s later<extra></extra>")
    mode = (res.summary or {}).get("cgdp_timeline", {}) or {}
    fig.update_layout(barmode="overlay", title=title or f"cgdp: one iteration (weights returned "
                      f"{'chunk by chunk' if mode.get('weight_return') == 'chunks' else 'whole'})",
                      xaxis_title="virtual seconds", height=320,
                      yaxis={"categoryorder": "array", "categoryarray": list(reversed(lanes))})
    return fig
