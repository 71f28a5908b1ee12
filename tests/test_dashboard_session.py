"""The dashboard over a long session (issue 48, item 4): older runs' curves thinned and faded,
a diverged run kept off the loss axis's range, run names that say what changed, and a runs
tab that sorts numerically with the status line's numbers. Timings (Stop, a simulation
beside 20 drawn runs) are dashbench's (`python -m workbench.ui.dashbench --what session`),
not asserted here."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")

from workbench.config import RunConfig  # noqa: E402
from workbench.ui import dashboard as D  # noqa: E402
from workbench.ui import figdata as FD  # noqa: E402
from workbench.ui import figures as F  # noqa: E402
from workbench.ui import liverun as LR  # noqa: E402
from workbench.ui import traces as T  # noqa: E402
from workbench.ui.report import format_cell, runs_html  # noqa: E402

BASE = RunConfig(algorithm="sync_sgd", dataset="digits", model="mlp", hidden=[64], cpus=2, batch_size=32, epochs=3,
                 seed=0)
DIVERGES = {"lr": 10.0, "batch_size": 8}   # loss ~1e36 before it turns NaN


def _groups(fig) -> list[str]:
    return list(dict.fromkeys(t.legendgroup or t.name for t in fig.data))


@pytest.fixture(scope="module")
def session():
    mp = pytest.MonkeyPatch()
    mp.setattr(LR, "KEEP_RUNS", 3)
    dash = D.Dashboard(cluster="threads", config=BASE)
    for changes in ({}, {"optimizer": "lamb", "lr": 0.003}, DIVERGES, {"optimizer": "adamw", "lr": 0.003}, {}):
        dash.config = BASE.replace(**changes)
        assert dash.run(), dash.status_text
        dash.wait(300)
    yield dash
    mp.undo()


def test_older_runs_are_thinned_faded_and_at_most_keep_runs_remain(session):
    fig = session.figures["progress_time"]
    groups = _groups(fig)
    assert groups == session.labels[-3:]                   # the newest three runs' curves, oldest dropped
    current = groups[-1]
    for t in fig.data:
        if (t.legendgroup or t.name) != current:
            assert len(t.x) <= T.OLD_POINTS and t.opacity is not None and t.opacity < 1, t.name


def test_a_diverged_run_stays_off_the_loss_axis_range(session):
    diverged = session.labels[2]
    assert session.history[2].summary["status"] == "diverged" and diverged in session.live.off_axis
    session.config = BASE.replace(**DIVERGES)               # drawn last: its 1e36 loss is on the plot now
    assert session.run(), session.status_text
    session.wait(300)
    assert session.status_text.startswith("diverged: ") and "; worker " in session.status_text \
        and " loss became " in session.status_text.rpartition("; ")[2], session.status_text   # and why, at the end
    fig = session.figures["progress_time"]
    lo, hi = fig.layout.yaxis.range
    others = np.concatenate([np.asarray(t.y, float) for t in fig.data
                             if t.yaxis in (None, "y") and (t.legendgroup or t.name) not in session.live.off_axis])
    assert hi < 3 and 10 ** hi >= np.nanmax(others[others > 0]) and 10 ** lo <= np.nanmin(others[others > 0])
    assert max(np.nanmax(np.asarray(t.y, float)) for t in fig.data if t.legendgroup == session.labels[-1]) > 1e10
    session.log_loss.value = False                          # the range follows the scale
    lo, hi = session.figures["progress_time"].layout.yaxis.range
    assert hi < 100
    session.log_loss.value = True


def test_run_names_say_what_changed(session):
    assert session.labels[1].startswith("#2 sync_sgd P=2 B=32") and "optimizer=lamb" in session.labels[1]
    assert "lr=0.003" in session.labels[1]
    assert "batch_size" not in session.labels[2] and "B=8" in session.labels[2] and "lr=10" in session.labels[2]


def test_the_runs_tab_sorts_numerically_and_says_the_status_lines_numbers(session):
    table = session.runs_table()
    assert list(table["run"]) == session.labels
    last = session.history[-2].summary             # a completed run: its status line's rate is in the tab
    rate = f"{last['samples_per_s']:,.0f}"
    assert format_cell(float(table["samples_per_s"].iloc[-2])) == rate
    ten = pd.DataFrame({"run": [f"#{k} sync_sgd P=2" for k in (10, 9, 2, 1)], "samples_per_s": [1.0, 2.0, 3.0, 4.0]})
    page = runs_html(ten, "run", False)
    assert [page.index(f"#{k} sync_sgd") for k in (1, 2, 9, 10)] == sorted(page.index(f"#{k} sync_sgd")
                                                                         for k in (1, 2, 9, 10))


def test_smoothing_one_run_leaves_the_others_alone():
    import plotly.graph_objects as go
    fig = F._progress_base("time")
    for name in ("a", "b"):
        fig.add_trace(go.Scatter(name=name, x=[0, 1, 2], y=[3.0, 2.0, 1.0], meta=FD.TRAIN_ROLE, legendgroup=name),
                      row=1, col=1)
    T.apply_smoothing(fig, 0.5, only="b")
    names = [t.name for t in fig.data]
    assert "b" + FD.SMOOTHED in names and "a" + FD.SMOOTHED not in names
    T.apply_smoothing(fig, 0.5)
    assert "a" + FD.SMOOTHED in [t.name for t in fig.data]
    assert not math.isnan(fig.data[-1].y[-1])


def test_a_long_sessions_legend_grows_the_loss_figure_instead_of_squeezing_its_plots():
    """Ten runs' legend entries under the loss figure took 5 rows and left the loss panel about
    100 px of 460: the figure grows by the rows past two, and shrinks back when cleared."""
    import plotly.graph_objects as go
    fig = go.Figure(layout={"height": 460})
    for k in range(1, 11):
        fig.add_scatter(name=f"#{k} sync_easgd P=2 B=512 tau=8", x=[0], y=[1])
        fig.add_scatter(name=f"#{k} sync_easgd P=2 B=512 tau=8: test loss", x=[0], y=[1], showlegend=False)
    rows = T.legend_rows([f"#{k} sync_easgd P=2 B=512 tau=8" for k in range(1, 11)], 560)
    assert rows >= 4
    assert T.fit_legend_height(fig, base_px=460).layout.height == 460 + T.LEGEND_ROW_PX * (rows - 2)
    fig.data = ()
    assert T.fit_legend_height(fig, base_px=460).layout.height == 460


def test_the_dashboards_loss_figures_follow_their_legend(session):
    dash = session
    names = [t.name for t in dash.figures["progress_time"].data if t.showlegend is not False and t.name]
    extra = max(0, T.legend_rows(names, 560) - 2)
    assert dash.figures["progress_time"].layout.height == LR.PROGRESS_HEIGHT_PX + T.LEGEND_ROW_PX * extra
    dash.clear()
    assert dash.figures["progress_time"].layout.height == LR.PROGRESS_HEIGHT_PX
