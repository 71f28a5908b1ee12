"""From series to plotly traces, and the figures' axes kept readable.

A figure's `Series` (`ui/series.py`) become traces here: `add_series` adds them to a static
figure, `extend_series` appends a live batch to the traces of the same name, both cutting
long traces by the extremes-keeping rule. The axes: a log axis labelled by decades or by
whole 1-2-5 numbers (`log_decades`), the loss axis's scale and its range over the runs
that did not diverge (`set_loss_scale`, `fit_loss_axis`), an accuracy axis within [0, 1]
(`fit_fraction_axis`). A long session's loss curves: the smoothed train-loss line
(`apply_smoothing`) and older runs thinned and faded (`retire_runs`). Every function
takes a figure (static, or live inside `batch_update`) and returns it; `ui/figures.py`
builds the figures from these.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

try:
    import plotly.graph_objects as go
except ImportError as _exc:      # the lab extra: one line that says so, not a bare ModuleNotFoundError
    from ..util.extras import missing_extra
    raise missing_extra("figures", _exc) from None

from .figdata import LIVE_POINTS, SMOOTHED, STATIC_POINTS, TRAIN_ROLE, ema
from .series import Series, as_array, decimate_all, thin_all


def _new_trace(s: Series, x: Any, y: Any, text: Any, colors: Any) -> Any:
    kw: dict[str, Any] = dict(s.style)
    if text is not None:
        kw["text"] = list(text)
    if colors is not None:
        kw["marker_color"] = list(colors)
    if s.trace == "bar":
        return go.Bar(name=s.name, x=x, y=y, **kw)
    return go.Scatter(name=s.name, x=x, y=y, **kw)


def _decimated(s: Series, max_points: float, *seqs: Any) -> list:
    """A line's points in x order, cut to at most about `max_points` by a rule that keeps
    each bin's lowest and highest value (`series.extremes`); bars are only thinned."""
    if not s.thin:
        return thin_all(math.inf, *seqs)
    if s.trace == "bar":
        return thin_all(max_points, *seqs)
    return decimate_all(max_points, *seqs)


def add_series(fig: Any, series: Iterable[Series], max_points: int = STATIC_POINTS) -> Any:
    """Add each series as a new trace (thinned to `max_points`); returns `fig`."""
    for s in series:
        x, y, text, colors = _decimated(s, max_points, s.x, s.y, s.text, s.colors)
        fig.add_trace(_new_trace(s, x, y, text, colors), row=s.row, col=s.col)
    return fig


def _concat(old: Any, new: Sequence) -> np.ndarray:
    new = as_array(new)
    if old is None or len(old) == 0:
        return new
    old = as_array(old)
    if old.dtype != new.dtype:
        old, new = old.astype(object), new.astype(object)
    return np.concatenate([old, new])


def extend_series(fig: Any, series: Iterable[Series], max_points: int = LIVE_POINTS) -> Any:
    """Append each series to the trace of the same name (created if missing); returns `fig`.

    Call inside `fig.batch_update()` on a FigureWidget so the frontend redraws once.
    A trace longer than `max_points` is decimated by x bins that keep each bin's lowest and
    highest point (`series.extremes`: no spike lost, no gap wider than two bins, stable
    when a trace is decimated again at every redraw), so each redraw costs at most a few
    thousand points whatever the run's length.
    """
    traces = {t.name: t for t in fig.data}
    for s in series:
        t = traces.get(s.name)
        if t is None:
            add_series(fig, [s], max_points)
            traces[s.name] = fig.data[-1]
            continue
        if s.mode == "replace":
            x, y, text, colors = s.x, s.y, s.text, s.colors
        else:
            x, y = _concat(t.x, s.x), _concat(t.y, s.y)
            text = None if s.text is None else _concat(t.text, s.text)
            colors = None if s.colors is None else _concat(t.marker.color, s.colors)
        x, y, text, colors = _decimated(s, max_points, x, y, text, colors)
        t.x, t.y = x, y
        if text is not None:
            t.text = list(text)
        if colors is not None:
            t.marker.color = list(colors)
    return fig


def is_widget(fig: Any) -> bool:
    """Whether `fig` is a plotly FigureWidget, without importing the widget module.

    `go.FigureWidget` is loaded on first access, and loading it imports ipywidgets and
    nbformat (about 4 s in a fresh process here): a static report must not pay for a
    check whose answer it knows. A figure can only be a widget once that module is loaded.
    """
    module = sys.modules.get("plotly.graph_objs._figurewidget")
    return module is not None and isinstance(fig, module.FigureWidget)


def as_widget(fig: Any, live: bool = True) -> Any:
    """`fig` as a FigureWidget (a new one holding its whole state) when `live`, else as is.

    Live figures are built as plain Figures and turned into a widget at the end, so the
    widget's first message to the frontend already carries every trace and the layout.
    """
    if live and not is_widget(fig):
        from .plotly_widget import whole_state_widget  # imports ipywidgets: live figures only
        return whole_state_widget(fig)
    return fig


def wrap_title(text: str, width: int) -> str:
    """`text` broken into lines of at most `width` characters at spaces (plotly's <br>), for a
    title that would otherwise run past a narrow figure's edge.

    >>> wrap_title("lr schedule: no scaling, lr 0.1, gradual warmup 44 steps", 30)
    'lr schedule: no scaling, lr<br>0.1, gradual warmup 44 steps'
    """
    import textwrap
    return "<br>".join(textwrap.wrap(text, width)) or text


def apply_smoothing(fig: Any, weight: float, only: str | None = None) -> Any:
    """Draw each run's train loss smoothed (`ema` with `weight`) over its raw points, which
    fade; weight 0 removes the smoothed lines. On a log loss axis the average is taken of
    the logarithms (a geometric mean), so early large losses do not hold the line above
    the data. `only`: the run (its train trace's name) whose line changed; the others are
    left as they are (a live redraw touches one run, not every run of a long session).
    Works on static and live progress figures (call inside `batch_update` on a live one);
    returns `fig`."""
    log = fig.layout.yaxis.type == "log"
    traces = {t.name: t for t in fig.data}
    for t in list(fig.data):
        if t.meta != TRAIN_ROLE or (only is not None and t.name != only):
            continue
        twin = traces.get(t.name + SMOOTHED)
        if weight <= 0 or t.y is None or not len(t.y):
            t.opacity = None
            if twin is not None:
                twin.x, twin.y = [], []
            continue
        raw = np.asarray(t.y, float)
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                y = np.exp(ema(np.log(np.where(raw > 0, raw, np.nan)), weight))
        else:
            y = ema(raw, weight)
        x = np.asarray(t.x, float)
        t.opacity = 0.3
        if twin is None:
            fig.add_trace(go.Scatter(name=t.name + SMOOTHED, x=x, y=y, mode="lines", showlegend=False,
                                     line={"color": t.line.color, "width": 2}, legendgroup=t.legendgroup,
                                     hovertemplate="smoothed %{y:.4g}<extra>" + t.name + "</extra>",
                                     xaxis=t.xaxis, yaxis=t.yaxis))
            traces[t.name + SMOOTHED] = fig.data[-1]
        else:
            twin.x, twin.y = x, y
    return fig


OLD_POINTS = 150      # points per trace of a finished run once a newer one is drawn
OLD_OPACITY = 0.45    # ... and how far it fades


def retire_runs(fig: Any, keep: int, current: str | None = None, points: int = OLD_POINTS) -> Any:
    """A long session's progress figure: every run but `current` thinned to `points` per
    trace (the extremes-keeping rule, `series.decimate_all`) and faded; only the newest
    `keep` runs (legend groups, in drawing order) kept at all. Each redraw and the browser
    then carry a bounded number of points however many runs were drawn. Returns `fig`."""
    groups: list[str] = []
    for t in fig.data:
        g = t.legendgroup or t.name
        if g not in groups:
            groups.append(g)
    old = [g for g in groups if g != current]
    drop = set(old[:max(0, len(old) - max(keep - (current is not None), 0))])
    if drop:
        fig.data = tuple(t for t in fig.data if (t.legendgroup or t.name) not in drop)
    for t in fig.data:
        if (t.legendgroup or t.name) == current or t.x is None:
            continue
        if len(t.x) > points:
            t.x, t.y = decimate_all(points, np.asarray(t.x, float), np.asarray(t.y, float))
        t.opacity = OLD_OPACITY if t.meta != TRAIN_ROLE else min(t.opacity or 1.0, 0.2)
    return fig


LEGEND_ROW_PX = 19            # a row of the horizontal legend at font size 10
LEGEND_CHAR_PX = 6.2          # ... and the width of one character of an entry, plus its sample line
LEGEND_ENTRY_PX = 46


def legend_rows(names: Iterable[str], width_px: float) -> int:
    """Rows a horizontal legend of `names` takes in a figure `width_px` wide (entries flow left
    to right and wrap, as plotly lays them out; an estimate from the characters' width).

    >>> legend_rows(["#1 sync_sgd P=2 B=64"] * 3, 560), legend_rows(["#1 sync_sgd P=2 B=64"] * 12, 560)
    (1, 4)
    """
    rows, used = 0, width_px
    for name in names:
        w = LEGEND_ENTRY_PX + LEGEND_CHAR_PX * len(name)
        if used + w > width_px:
            rows, used = rows + 1, 0.0
        used += w
    return rows


def fit_legend_height(fig: Any, base_px: int, width_px: float = 560, free_rows: int = 2) -> Any:
    """Grow a figure with a horizontal legend under it by the legend's rows past `free_rows`,
    so that many runs' entries do not squeeze the plots (ten runs left the loss panel 100 px
    of a 460 px figure); back to `base_px` when they are cleared. Returns `fig`."""
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    extra = max(0, legend_rows(names, width_px) - free_rows)
    height = base_px + LEGEND_ROW_PX * extra
    if fig.layout.height != height:
        fig.layout.height = height
    return fig


def fit_loss_axis(fig: Any, leave_out: Iterable[str] = ()) -> Any:
    """The loss axis (row 1) over the runs not `leave_out` (diverged runs: their loss of
    1e21 would squash every other curve into a line): an explicit range over the others'
    positive finite losses, padded a tenth; autorange when nothing is left out. The left-out
    runs stay drawn, running off the top. Returns `fig`."""
    leave_out = set(leave_out)
    if not leave_out:
        fig.layout.yaxis.autorange = True
        return fig
    values = [np.asarray(t.y, float) for t in fig.data
              if (t.yaxis in (None, "y")) and (t.legendgroup or t.name) not in leave_out and t.y is not None]
    values = np.concatenate(values) if values else np.array([])
    values = values[np.isfinite(values) & (values > 0)] if len(values) else values
    if not len(values):
        return fig
    lo, hi = float(values.min()), float(values.max())
    if fig.layout.yaxis.type == "log":
        lo, hi = math.log10(lo), math.log10(hi)
    pad = 0.1 * max(hi - lo, 1e-9)
    fig.layout.yaxis.update(autorange=False, range=[lo - pad, hi + pad])
    return fig


def set_loss_scale(fig: Any, log: bool) -> Any:
    """The loss axis (row 1 of a progress figure) on a log or a linear scale; returns `fig`."""
    fig.layout.yaxis.type = "log" if log else "linear"
    return log_decades(fig, "y")


def log_decades(fig: Any, axis: str = "y", narrow_ticks: bool | None = None) -> Any:
    """A log axis that spans a decade or more labels decades only (1, 10, 100 ...; the 2 ... 9
    between them are unlabelled minor ticks), where plotly's own ticks label 2 and 5 of every
    decade; a narrower one (where a decade tick alone would label nothing) gets whole numbers
    at its 1-2-5 values (`narrow_log_ticks`, `tick_label`: 500k, 1M, 2M), not plotly's bare
    digits (3, 2, 1M, 9, 8). A linear axis gets its automatic ticks back. Returns `fig`.

    Args:
        fig: a figure; `axis` names its axis as traces do ("y", "y2", "x").
        narrow_ticks: set a narrow axis's tick values (they hold for the data seen now). None:
            only on a static figure; a live one, whose data goes on arriving, keeps plotly's
            own ticks unless its caller runs this at every redraw (`update_scaling`) and says True.

    >>> import plotly.graph_objects as go
    >>> fig = go.Figure(go.Scatter(x=[1, 2], y=[3.0, 3000.0])).update_yaxes(type="log")
    >>> log_decades(fig).layout.yaxis.dtick, fig.layout.yaxis.minor.showgrid
    (1, True)
    >>> narrow = log_decades(go.Figure(go.Scatter(x=[1, 2], y=[3.0, 9.0])).update_yaxes(type="log"))
    >>> narrow.layout.yaxis.dtick is None, narrow.layout.yaxis.ticktext
    (True, ('3', '4', '5', '6', '7', '8', '9'))
    >>> log_decades(narrow.update_yaxes(type="linear")).layout.yaxis.tickvals is None
    True
    """
    letter = axis[0]
    key = f"{letter}axis{axis[1:]}"
    ax = fig.layout[key]
    values = [np.asarray(getattr(t, letter), dtype=float) for t in fig.data
              if getattr(t, letter) is not None and (getattr(t, f"{letter}axis", None) or letter) == axis
              and np.asarray(getattr(t, letter)).dtype.kind in "biuf"]
    v = np.concatenate(values) if values else np.empty(0)
    v = v[np.isfinite(v) & (v > 0)]
    wide = ax.type == "log" and len(v) and np.log10(v.max()) - np.log10(v.min()) >= 1.0
    ours = ax.tickmode == "array" and ax.tickvals is not None and \
        list(ax.ticktext or ()) == [tick_label(t) for t in ax.tickvals]
    reset = {"tickmode": None, "tickvals": None, "ticktext": None} if ours else {}
    if wide:
        ax.update(dtick=1, minor={"dtick": "D1", "ticks": "inside", "ticklen": 3, "showgrid": True,
                                  "gridcolor": "rgba(0,0,0,0.04)"}, **reset)
    elif ax.type == "log" and len(v) and (not is_widget(fig) if narrow_ticks is None else narrow_ticks):
        # plotly labels a narrow log axis's 2 ... 9 ticks with the bare digit ("3, 2, 1M, 9, 8"):
        # whole numbers at 1-2-5 instead (1 ... 9 where fewer than two 1-2-5 values fall inside)
        ticks = narrow_log_ticks(float(v.min()), float(v.max()))
        ax.update(dtick=None, minor=None, tickmode="array", tickvals=ticks, ticktext=[tick_label(t) for t in ticks])
    else:
        ax.update(dtick=None, minor=None, **reset)
    return fig


def narrow_log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis spanning less than a decade or so: the 1-2-5 values in
    [lo, hi], or every 1 ... 9 value when fewer than two of those fall inside (with the
    nearest 1-2-5 values around the range when that finds fewer than two too).

    >>> narrow_log_ticks(3e5, 2.4e6)
    [500000.0, 1000000.0, 2000000.0]
    >>> narrow_log_ticks(0.31, 0.9)
    [0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    >>> narrow_log_ticks(410.0, 430.0)
    [200.0, 500.0]
    """
    def values(mantissas: tuple[int, ...]) -> list[float]:
        out = []
        for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
            out += [float(f"{m}e{k}") for m in mantissas]
        return sorted(out)
    inside = [t for t in values((1, 2, 5)) if lo <= t <= hi]
    if len(inside) < 2:
        inside = [t for t in values(tuple(range(1, 10))) if lo <= t <= hi]
    if len(inside) < 2:   # a very narrow range: the 1-2-5 values around it
        around = values((1, 2, 5))
        inside = [max([t for t in around if t <= lo], default=lo), min([t for t in around if t >= hi], default=hi)]
    return inside


def tick_label(value: float) -> str:
    """A tick's number as a researcher writes it: SI from 1000 up (300k, 1.5M), plain below.

    >>> [tick_label(v) for v in (0.05, 0.5, 2.0, 300.0, 2000.0, 1.5e6, 3e9)]
    ['0.05', '0.5', '2', '300', '2k', '1.5M', '3G']
    """
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def fit_fraction_axis(fig: Any, axis: str = "y2", pad: float = 0.05) -> Any:
    """An accuracy axis spans its traces' values padded by `pad` of their spread (at least
    0.02), clipped to [0, 1]: plotly's autorange of one value, or of a flat trace, gave
    -0.5..1.5 (sim_icpe's accuracy axis ran from -0.5 to 1). No values: left to plotly.

    >>> import plotly.graph_objects as go
    >>> fig = go.Figure(go.Scatter(x=[1, 2], y=[0.9, 0.9], yaxis="y2"))
    >>> tuple(round(v, 3) for v in fit_fraction_axis(fig).layout.yaxis2.range)
    (0.88, 0.92)
    >>> tuple(fit_fraction_axis(go.Figure(go.Scatter(x=[1, 2], y=[0.0, 1.0], yaxis="y2"))).layout.yaxis2.range)
    (0.0, 1.0)
    """
    values = [np.asarray(t.y, dtype=float) for t in fig.data
              if t.y is not None and (getattr(t, "yaxis", None) or "y") == axis and len(t.y)]
    v = np.concatenate(values) if values else np.empty(0)
    v = v[np.isfinite(v)]
    if not len(v):
        return fig
    margin = max(0.02, pad * float(v.max() - v.min()))
    fig.update_layout({f"yaxis{axis[1:]}": {"range": [max(0.0, float(v.min()) - margin),
                                                      min(1.0, float(v.max()) + margin)]}})
    return fig
