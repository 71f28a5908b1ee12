"""Figures and reports built from recorded runs carry the expected traces."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from workbench import RunConfig
from workbench.api import run, save
from workbench.maths.optim import make_plan
from workbench.maths.schedules import lr_table
from workbench.results import RunResult
from workbench.ui import figdata as FD
from workbench.ui import figures as F
from workbench.ui import series as S
from workbench.ui import traces as T
from workbench.ui.report import summary_table, write_comparison_report, write_report


@pytest.fixture(scope="module")
def sync_result() -> RunResult:
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, dataset="digits", batch_size=64, epochs=2, eval_every=8)
    return run(cfg, cluster="threads")


@pytest.fixture(scope="module")
def sgd_result() -> RunResult:
    return run(RunConfig(algorithm="sgd", dataset="digits", batch_size=64, epochs=2, eval_every=8))


def traces(fig) -> dict:
    return {t.name: t for t in fig.data}


def records_of(result: RunResult) -> list[dict]:
    """The records a run streamed, rebuilt from its tables, in time order."""
    recs = [{"kind": "step", **r} for r in result.steps.to_dict("records")]
    recs += [{"kind": "eval", **r} for r in result.evals.to_dict("records")]
    recs += [{"kind": "tournament", **r} for r in result.tournaments.to_dict("records")]
    return sorted(recs, key=lambda r: r["time"])


def tournament_table() -> pd.DataFrame:
    """Two LTFB rounds of 4 trainers: round 1 trainer 1 adopts 0's model, round 2 trainer 3 adopts 1's."""
    rows = []
    lineage = {k: f"t{k}@r0" for k in range(4)}
    for rnd, pairs, adopters in ((1, {0: 1, 1: 0, 2: 3, 3: 2}, {1}), (2, {0: 2, 2: 0, 1: 3, 3: 1}, {3})):
        for trainer in range(4):
            partner = pairs[trainer]
            adopted = trainer in adopters
            if adopted:
                lineage[trainer] = f"{lineage[partner]}>t{trainer}@r{rnd}"
            rows.append({"round": rnd, "step": 50 * rnd, "time": float(rnd), "trainer": trainer,
                         "partner": partner, "own_score": 0.5, "partner_score": 0.6 if adopted else 0.4,
                         "adopted": adopted, "lr": 0.1, "lineage": lineage[trainer]})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ progress
def test_progress_figure_has_one_set_of_traces_per_run(sync_result, sgd_result):
    fig = F.progress_figure([sync_result, sgd_result], x="time")
    names = [t.name for t in fig.data]
    assert names == ["#1 sync_sgd P=2 B=64", "#1 sync_sgd P=2 B=64: test loss",
                     "#1 sync_sgd P=2 B=64: test accuracy", "#2 sgd P=1 B=64",
                     "#2 sgd P=1 B=64: test loss", "#2 sgd P=1 B=64: test accuracy"]
    # one legend entry per run (its train loss); its test curves toggle with it
    assert [t.name for t in fig.data if t.showlegend is not False] == ["#1 sync_sgd P=2 B=64", "#2 sgd P=1 B=64"]
    assert {t.legendgroup for t in fig.data[:3]} == {"#1 sync_sgd P=2 B=64"}
    assert fig.data[1].line.dash == "dash" and fig.data[0].line.dash is None
    t = traces(fig)
    steps = sync_result.steps
    assert len(t["#1 sync_sgd P=2 B=64"].x) == steps["step"].nunique()
    assert len(t["#1 sync_sgd P=2 B=64: test accuracy"].y) == len(sync_result.evals) > 2
    np.testing.assert_allclose(t["#1 sync_sgd P=2 B=64: test accuracy"].y, sync_result.evals["test_accuracy"])
    # one colour per run
    assert t["#1 sync_sgd P=2 B=64"].line.color != t["#2 sgd P=1 B=64"].line.color
    assert isinstance(fig, go.Figure) and not isinstance(fig, go.FigureWidget)


def test_the_accuracy_axis_fits_its_values_inside_0_to_1(sync_result):
    """sim_icpe's accuracy axis ran from -0.5 to 1 (plotly's autorange of a flat trace)."""
    fig = F.progress_figure(sync_result, x="epoch")
    acc = sync_result.evals["test_accuracy"]
    lo, hi = fig.layout.yaxis2.range
    assert 0.0 <= lo <= acc.min() and acc.max() <= hi <= 1.0
    assert hi - lo <= (acc.max() - acc.min()) * 1.1 + 0.04 + 1e-12     # padded by 5% a side (at least 0.02)
    flat = T.fit_fraction_axis(go.Figure(go.Scatter(x=[0, 1], y=[1.0, 1.0], yaxis="y2")))
    assert tuple(flat.layout.yaxis2.range) == (0.98, 1.0)


def test_progress_against_epoch_uses_epochs_and_step_loss(sync_result):
    fig = F.progress_figure(sync_result, x="epoch")
    t = traces(fig)
    np.testing.assert_allclose(t["#1 sync_sgd P=2 B=64: test loss"].x, sync_result.evals["epoch"])
    # sync workers report the same global loss: the per-step mean is that loss
    first = sync_result.steps[sync_result.steps["step"] == 0]["loss"].iloc[0]
    assert t["#1 sync_sgd P=2 B=64"].y[0] == pytest.approx(first)
    assert max(t["#1 sync_sgd P=2 B=64"].x) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="x: one of"):
        F.progress_figure(sync_result, x="step")


def test_ltfb_trainers_get_their_own_accuracy_traces(sync_result):
    evals = pd.concat([sync_result.evals.assign(worker="trainer-0"),
                       sync_result.evals.assign(worker="trainer-1")])
    r = RunResult(summary=sync_result.summary, steps=sync_result.steps, evals=evals)
    names = [t.name for t in F.progress_figure(r).data]
    assert "#1 sync_sgd P=2 B=64: test accuracy (trainer-0)" in names
    assert "#1 sync_sgd P=2 B=64: test accuracy (trainer-1)" in names


# ------------------------------------------------------------------------------ per worker
def test_a_slow_first_step_leaves_its_windows_at_zero_not_out_and_a_late_worker_starts_late():
    # worker 0's first step runs from 0 to 3.0 (a busy machine's stall): windows 0-1 saw it working
    # and completing nothing, 0 samples/s, not a gap; worker 1 starts at 2.2: its windows from there
    steps = pd.DataFrame({"worker": [0, 0, 0, 1, 1], "time": [3.0, 3.5, 4.0, 2.6, 3.9],
                          "samples": [2, 2, 2, 2, 2], "compute_s": [3.0, 0.5, 0.5, 0.4, 1.0],
                          "comm_s": [0.0] * 5, "wait_s": [0.0] * 5})
    w = FD.time_bins(steps, bins=4)
    assert w[0]["x"].tolist() == [0.5, 1.5, 2.5, 3.5] and w[0]["samples"].tolist() == [0, 0, 2, 4]
    assert w[1]["x"].tolist() == [2.5, 3.5] and w[1]["samples"].tolist() == [2, 2]
    assert w["all"]["x"].tolist() == [0.5, 1.5, 2.5, 3.5] and w["all"]["samples"].sum() == 10


def test_throughput_bins_conserve_samples_and_the_figure_draws_a_smoothed_series(sync_result):
    steps = FD.align_to_first_step(sync_result).steps          # what the figure draws: t = 0 at the first step
    bins = FD.time_bins(steps, 20)
    width = steps["time"].max() / 20
    assert float(np.sum(bins["all"]["samples"])) == pytest.approx(steps["samples"].sum())
    assert float(np.sum(bins[1]["samples"])) == pytest.approx(steps.query("worker == 1")["samples"].sum())
    fig = F.throughput_figure(sync_result, bins=20)
    t = traces(fig)
    assert set(t) == {"worker 0", "worker 1", "all workers"}
    raw = bins["all"]["samples"] / bins["all"]["width"]
    np.testing.assert_allclose(t["all workers"].y, FD.running_mean(raw, FD.SMOOTH_BINS))
    assert np.std(t["all workers"].y) < np.std(raw)          # smoothed, and still the same mean rate
    assert np.mean(t["all workers"].y) == pytest.approx(np.mean(raw), rel=0.1)
    assert abs(float(width) - float(bins["all"]["width"][0])) < 1e-9
    # a run of 2 x 44 steps gets about 5 steps per window: a curve, not 2 points
    n = len(traces(F.throughput_figure(sync_result))["all workers"].x)
    assert FD.auto_bins(steps) == 44 // FD.STEPS_PER_BIN and n == FD.auto_bins(steps)
    # (every window from the first step's start is drawn, however long that step took)
    # workers at the same rate stay visible: different widths and dashes
    assert (t["worker 0"].line.width, t["worker 0"].line.dash) != (t["worker 1"].line.width, t["worker 1"].line.dash)


def test_time_axes_start_at_the_first_step(sync_result):
    late = RunResult(summary=sync_result.summary, steps=sync_result.steps.assign(time=sync_result.steps["time"] + 6.0),
                     evals=sync_result.evals.assign(time=sync_result.evals["time"] + 6.0))
    fig = F.progress_figure([sync_result, late])
    first = [min(t.x) for t in fig.data if t.meta == FD.TRAIN_ROLE]
    assert first[0] == pytest.approx(first[1]) and first[1] < 1.0
    assert min(F.throughput_figure(late).data[0].x) < 1.0
    assert late.steps["time"].min() > 6.0                  # the input was left alone


def test_loss_smoothing_and_log_scale():
    steps = pd.DataFrame({"worker": 0, "step": range(50), "epoch": np.linspace(0, 1, 50), "time": np.arange(50.0),
                          "loss": [1.0 + (i % 2) for i in range(50)], "samples": 8, "compute_s": 0.5,
                          "comm_s": 0.0, "wait_s": 0.0, "lr": 0.1, "staleness": 0.0, "bytes_sent": 0.0})
    r = RunResult(summary={"config": {"algorithm": "sgd"}}, steps=steps, evals=pd.DataFrame(columns=steps.columns))
    plain = F.progress_figure(r)
    assert len(plain.data) == 1 and plain.layout.yaxis.type in (None, "linear")
    fig = F.progress_figure(r, smoothing=0.9, log_loss=True)
    t = traces(fig)
    smooth = t["#1 sgd" + FD.SMOOTHED]
    assert fig.layout.yaxis.type == "log" and t["#1 sgd"].opacity < 1
    assert np.ptp(smooth.y[10:]) < 0.5 * np.ptp(t["#1 sgd"].y)      # the zig-zag between 1 and 2 flattens
    assert smooth.y[-1] == pytest.approx(1.5, abs=0.1) and smooth.showlegend is False
    # on a log axis the smoothing averages logarithms: 1 and 100 alternating give ~10, not ~50
    zigzag = steps.assign(loss=[1.0 if i % 2 else 100.0 for i in range(50)])
    r2 = RunResult(summary=r.summary, steps=zigzag, evals=r.evals)
    geo = traces(F.progress_figure(r2, smoothing=0.9, log_loss=True))["#1 sgd" + FD.SMOOTHED].y[-1]
    lin = traces(F.progress_figure(r2, smoothing=0.9))["#1 sgd" + FD.SMOOTHED].y[-1]
    assert geo == pytest.approx(10.0, rel=0.3) and lin == pytest.approx(50.5, rel=0.1)
    T.apply_smoothing(fig, 0.0)
    assert len(traces(fig)["#1 sgd" + FD.SMOOTHED].y) == 0 and traces(fig)["#1 sgd"].opacity is None
    # the figure's own buttons switch the loss axis
    assert [b.args[0]["yaxis.type"] for b in fig.layout.updatemenus[0].buttons] == ["linear", "log"]


def test_chunk_means_keep_every_loss_and_the_last_point():
    x, y = np.arange(1000.0), np.arange(1000.0) % 7
    cx, cy = FD.chunk_means(x, y, 100)
    assert len(cx) == 100 and cx[-1] == 999.0
    assert float(np.sum(cy * 10)) == pytest.approx(float(np.sum(y)))


def test_breakdown_figure_totals_per_worker(sync_result):
    fig = F.breakdown_figure(sync_result)
    t = traces(fig)
    assert list(t["compute"].y) == ["worker 0", "worker 1"] and t["compute"].orientation == "h"
    for name, col in (("compute", "compute_s"), ("comm", "comm_s"), ("wait", "wait_s")):
        expected = sync_result.steps.groupby("worker")[col].sum().to_numpy()
        np.testing.assert_allclose(t[name].x, expected)
    # one row of shares over time per worker, normalised to percent
    assert {"worker 0 compute", "worker 0 comm", "worker 0 wait", "worker 1 wait"} <= set(t)
    assert t["worker 0 compute"].groupnorm == "percent"
    assert t["worker 0 compute"].xaxis != t["worker 1 compute"].xaxis
    # the bars are the three timed parts, not all of a worker's time (evaluations and the engine's
    # own work are outside them: 4.3 of 5.3 s in a 2-worker run), and their title says which
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0] == "compute + comm + wait" and not any("total" in a for a in titles), titles


def test_lr_figure_shows_the_lr_each_worker_used(sync_result):
    plan = make_plan(RunConfig.from_dict(sync_result.summary["config"]), 1437)
    fig = F.lr_figure(sync_result, plan=plan)
    t = traces(fig)
    w0 = sync_result.steps.query("worker == 0").sort_values("step")
    assert len(t["worker 0"].x) == len(w0)
    np.testing.assert_allclose(t["worker 0"].y, w0["lr"])
    assert "planned" in t


def test_schedule_figure_draws_the_planned_schedule():
    cfg = RunConfig(batch_size=256, base_batch=32, lr=0.05, lr_scaling="linear", warmup="gradual",
                    warmup_epochs=1, epochs=4)
    plan = make_plan(cfg, 1437)
    fig = F.schedule_figure(plan)
    t = traces(fig)
    table = lr_table(plan.schedule, plan.total_steps, 400)
    np.testing.assert_allclose(t["planned"].y, [v for _, v in table])
    assert list(t["end of warmup"].x) == [plan.warmup_steps] * 2
    assert "warmup" in fig.layout.title.text


def test_lineage_figure_draws_adoptions_as_edges():
    tours = tournament_table()
    r = RunResult(summary={"config": {}, "workers": []}, steps=pd.DataFrame(), evals=pd.DataFrame(),
                  tournaments=tours)
    t = traces(F.lineage_figure(r))
    assert len(t["trainers"].x) == len(tours) == 8
    adopted = list(t["adopted"].x), list(t["adopted"].y)
    # edges: (round-1, partner) -> (round, trainer), separated by None
    assert adopted == ([0, 1, None, 1, 2, None], [0, 1, None, 1, 3, None])
    assert len([x for x in t["kept"].x if x is None]) == 6
    # trainer 1 holds trainer 0's model after round 1: same colour as trainer 0
    colors = dict(zip(zip(t["trainers"].x, t["trainers"].y), t["trainers"].marker.color))
    assert colors[(1, 1)] == colors[(1, 0)] != colors[(1, 2)]
    assert colors[(2, 3)] == colors[(1, 0)]               # ... and passes it on to trainer 3
    assert "t0@r0&gt;t1@r1&gt;t3@r2" in "".join(t["trainers"].text).replace(">", "&gt;")


@pytest.mark.slow
def test_lineage_of_a_real_ltfb_run():
    cfg = RunConfig(algorithm="ltfb", cpus=2, trainers=2, dataset="digits", batch_size=32, round_size=10,
                    epochs=2, lr_spread=4.0)
    r = run(cfg, cluster="threads")
    assert len(r.tournaments), "ltfb recorded no tournaments"
    figs = F.run_figures(r)
    t = traces(figs["lineage"])
    assert len(t["trainers"].x) == len(r.tournaments)
    n_adopted = int(r.tournaments["adopted"].sum())
    assert len([x for x in t["adopted"].x if x is None]) == n_adopted
    names = [tr.name for tr in figs["progress_time"].data]
    assert any(n.endswith("(trainer-0)") for n in names) and any(n.endswith("(trainer-1)") for n in names)


def test_lineage_figure_without_tournaments_is_empty_but_labelled(sync_result):
    fig = F.lineage_figure(sync_result)
    assert len(fig.data) == 0
    assert "no tournaments" in fig.layout.annotations[-1].text
    assert "lineage" not in F.run_figures(sync_result)


def test_scaling_figure_draws_ideal_and_predictions_over_measured():
    table = pd.DataFrame({"workers": [1, 2, 4], "samples_per_s": [100.0, 180.0, 300.0],
                          "efficiency": [1.0, 0.9, 0.75], "status": ["completed"] * 3})
    predicted = pd.DataFrame({"workers": [1, 2, 4, 8] * 2, "network": ["measured"] * 4 + ["10GbE"] * 4,
                              "samples_per_s": [100, 190, 340, 560, 100, 150, 200, 220],
                              "efficiency": [1, 0.95, 0.85, 0.7, 1, 0.75, 0.5, 0.27]})
    fig = F.scaling_figure(table, predicted, error=0.07, mode="strong")
    t = traces(fig)
    assert list(t["measured"].y) == [100.0, 180.0, 300.0]
    assert list(t["ideal"].x) == [1, 2, 4, 8] and list(t["ideal"].y) == [100.0, 200.0, 400.0, 800.0]
    assert list(t["ideal efficiency"].y) == [1.0] * 4
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"       # throughput: log-log
    assert len(t["too short for a steady state"].x) == 0               # no steady_reached column: nothing flagged
    assert list(t["predicted: 10GbE"].y) == [100, 150, 200, 220]
    assert "predicted: calibrated efficiency" in t
    assert "7%" in fig.layout.title.text
    # the scaling figure of a sweep in progress: empty, then updated in place
    live = F.scaling_figure(table.iloc[:0], live=True)
    assert len(live.data) == 0
    F.update_scaling(live, table)
    assert list(traces(live)["measured"].x) == [1, 2, 4]


def test_scaling_rings_runs_too_short_for_a_steady_state_and_keeps_the_ideal_line_near_the_data():
    """The ring is the steady-state rule's (`steady_reached`), the one the table's note says in
    words; a run's length in seconds decides nothing (a 0.3 s run that reached its steady state
    is measured, a 5 s one that did not is not)."""
    table = pd.DataFrame({"workers": [1, 2], "samples_per_s": [1000.0, 400.0], "efficiency": [1.0, 0.2],
                          "wall_time_s": [0.3, 5.0], "steady_reached": [True, False],
                          "run_note": [None, "too short for a steady state (7 steps a worker after warm-up, 10 make one)"],
                          "status": ["completed"] * 2})
    predicted = pd.DataFrame({"workers": [1, 2, 4, 8, 64], "network": "measured",
                              "samples_per_s": [1000.0, 1500, 2000, 2500, 3000], "efficiency": [1, .75, .5, .31, .05]})
    t = traces(F.scaling_figure(table, predicted))
    short = t["too short for a steady state"]
    assert list(short.x) == [2] and list(short.y) == [400.0] and short.showlegend
    assert t["measured"].text[1].count("too short") == 1 and "too short" not in t["measured"].text[0]
    bare = traces(F.scaling_figure(table.drop(columns="run_note"), predicted))["measured"].text
    assert "(too short for a steady state)" in bare[1] and "too short" not in bare[0]   # said once without a note
    assert max(t["ideal"].x) == 8 and max(t["predicted: calibrated"].x) == 64


def test_comparison_figure_from_summaries(sync_result, sgd_result):
    t = traces(F.comparison_figure([sync_result, sgd_result]))
    assert list(t["samples/s"].y) == pytest.approx([sync_result.summary["samples_per_s"],
                                                    sgd_result.summary["samples_per_s"]])
    # each share is that component's part of the steady steps' time (workbench.measure's window)
    from workbench.measure import steady_weights
    for i, r in enumerate([sync_result, sgd_result]):
        part = steady_weights(r.steps)[0]
        sums = r.steps[["compute_s", "comm_s", "wait_s"]].mul(part, axis=0).sum()
        for name, column in (("compute share", "compute_s"), ("comm share", "comm_s"), ("wait share", "wait_s")):
            assert t[name].y[i] == pytest.approx(sums[column] / sums.sum()), (name, i)
    assert t["comm share"].y[0] > 0 and t["comm share"].y[1] == 0     # sync_sgd exchanges, sgd does not


# ------------------------------------------------------------------------------ live
def draw(figs: dict, records, state) -> None:
    """A batch drawn as the dashboard draws it (`live_edits`), straight onto the figures (no slots)."""
    for key, edit in F.live_edits(records, state).items():
        if key in figs:
            with figs[key].batch_update():
                edit(figs[key])


def test_live_figures_are_widgets_and_match_static_ones(sync_result):
    figs = {k: F.live_base(k, n_workers=2) for k in FD.FIGURE_KEYS}
    assert all(isinstance(f, go.FigureWidget) for f in figs.values())
    state = FD.LiveState(label="#1 sync_sgd P=2 B=64", color=FD.run_color(0), n_workers=2)
    draw(figs, records_of(sync_result), state)      # everything in one batch
    static = F.progress_figure(sync_result, "time")
    for name in ("#1 sync_sgd P=2 B=64", "#1 sync_sgd P=2 B=64: test accuracy"):
        np.testing.assert_allclose(traces(figs["progress_time"])[name].y, traces(static)[name].y)
    bars = traces(figs["breakdown"])
    np.testing.assert_allclose(bars["compute"].x, traces(F.breakdown_figure(sync_result))["compute"].x)


def test_live_progress_figures_leave_the_log_switch_to_the_dashboard():
    for key in ("progress_time", "progress_epoch"):
        assert not F.live_base(key).layout.updatemenus and not F.live_base(key)._widget_layout.get("updatemenus")
    assert F.progress_figure([]).layout.updatemenus            # static ones keep their buttons


def test_live_figures_carry_their_whole_state_from_the_start():
    fig = F.live_base("breakdown", n_workers=3)
    # the widget's first message already holds the layout (edits before the first view get lost)
    assert fig._widget_layout["title"]["text"].startswith("where the time goes")
    assert len(fig._widget_layout["annotations"]) == 4        # subplot titles: totals + 3 workers
    assert isinstance(F.progress_figure([], live=True), go.FigureWidget)


def test_live_updates_append_batch_by_batch(sync_result):
    figs = {k: F.live_base(k, n_workers=2) for k in FD.FIGURE_KEYS}
    state = FD.LiveState(label="run", color="#000", n_workers=2)
    recs = records_of(sync_result)
    before = [dict(r) for r in recs]
    for i in range(0, len(recs), 7):
        draw(figs, recs[i:i + 7], state)
    assert recs == before                                   # the batches were not modified
    lr = traces(figs["lr"])
    assert len(lr["worker 0"].x) == len(sync_result.steps.query("worker == 0"))
    acc = traces(figs["progress_epoch"])["run: test accuracy"]
    np.testing.assert_allclose(acc.y, sync_result.evals["test_accuracy"])
    n_batches = len(range(0, len(recs), 7))
    assert 1 < len(traces(figs["throughput"])["all workers"].x) <= n_batches
    bars = traces(figs["breakdown"])
    np.testing.assert_allclose(bars["comm"].x, sync_result.steps.groupby("worker")["comm_s"].sum(), rtol=1e-9)
    assert state.steps_seen == sync_result.steps["step"].max() + 1


def test_live_lineage_keeps_colours_across_batches():
    tours = tournament_table()
    fig = F.live_base("lineage")
    state = FD.LiveState(label="ltfb", color="#000")
    recs = [{"kind": "tournament", **r} for r in tours.to_dict("records")]
    draw({"lineage": fig}, recs[:4], state)
    draw({"lineage": fig}, recs[4:], state)
    static = traces(F.lineage_figure(RunResult({}, pd.DataFrame(), pd.DataFrame(), tours)))
    live = traces(fig)
    assert list(live["trainers"].marker.color) == list(static["trainers"].marker.color)
    assert list(live["adopted"].x) == list(static["adopted"].x)


def test_extend_series_thins_long_traces_and_keeps_the_last_point():
    fig = F.live_base("lr")
    for start in range(0, 5000, 250):
        steps = list(range(start, start + 250))
        with fig.batch_update():
            T.extend_series(fig, [S.Series("worker 0", steps, [s * 0.5 for s in steps])], max_points=100)
    t = fig.data[0]
    assert len(t.x) <= 100
    assert t.x[-1] == 4999 and t.y[-1] == pytest.approx(2499.5)
    assert t.x[0] == 0                       # thinned 20 times, the run's start stays in the plot
    assert list(t.x) == sorted(t.x)


def test_figures_do_not_modify_their_inputs(sync_result):
    steps, evals = sync_result.steps.copy(), sync_result.evals.copy()
    F.run_figures(sync_result, include_empty=True)
    pd.testing.assert_frame_equal(sync_result.steps, steps)
    pd.testing.assert_frame_equal(sync_result.evals, evals)


# ------------------------------------------------------------------------------ reports
def test_run_directory_report_has_plotly_once_and_every_figure(sync_result, tmp_path):
    path = save(sync_result, tmp_path / "run")          # api.save writes report.html
    html = (path / "report.html").read_text()
    assert html.count("* plotly.js v") == 1
    assert html.count('class="plotly-graph-div"') == 5
    for key in ("progress_time", "progress_epoch", "throughput", "breakdown", "lr"):
        assert f'id="fig-{key}"' in html
    assert "final_test_accuracy" in html and "sync_sgd" in html
    # figures and reports also accept the run directory
    assert len(F.progress_figure(path).data) == 3
    again = write_report(path, tmp_path / "again.html")
    assert again.read_text().count("* plotly.js v") == 1
    assert not list(tmp_path.glob("**/.*.tmp"))         # the temporary file was renamed away


def test_comparison_report(sync_result, sgd_result, tmp_path):
    extra = F.scaling_figure(pd.DataFrame({"workers": [1, 2], "samples_per_s": [1.0, 1.5],
                                           "efficiency": [1.0, 0.75]}))
    path = write_comparison_report([sync_result, sgd_result], tmp_path / "cmp.html", "sync <vs> sgd",
                                   notes_html="<p id='notes'>shape only</p>", figures=[extra])
    html = path.read_text()
    assert html.count("* plotly.js v") == 1
    assert html.count('class="plotly-graph-div"') == 4
    assert "<p id='notes'>shape only</p>" in html and "sync &lt;vs&gt; sgd" in html
    table = summary_table([sync_result, sgd_result])
    assert list(table["algorithm"]) == ["sync_sgd", "sgd"] and list(table["workers"]) == [2, 1]


def test_a_comparison_page_of_no_runs_is_its_notes_alone(tmp_path):
    # a reproduction whose notebook saved no run writes its page of verdicts through the
    # comparison page with no runs: the accuracy-interval column (placed beside the accuracy,
    # which a table of no runs has not) once raised ValueError there
    path = write_comparison_report([], tmp_path / "none.html", "t", notes_html="<p id='verdicts'>v</p>")
    html = path.read_text()
    assert "<p id='verdicts'>v</p>" in html and "test_accuracy_95" not in html


def test_import_workbench_loads_no_ui_stack():
    code = ("import sys, workbench, workbench.api, workbench.analysis.costmodel, workbench.analysis.sweep, "
            "workbench.ui.figdata; "
            "bad = [m for m in ('plotly', 'ipywidgets', 'anywidget') if m in sys.modules]; "
            "assert not bad, bad; "
            "import workbench.ui.report; assert 'ipywidgets' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_log_axes_label_decades_only_when_they_span_one():
    wide = pd.DataFrame({"workers": [1, 8, 64], "samples_per_s": [20.0, 150.0, 900.0],
                         "efficiency": [1.0, 0.94, 0.7], "status": ["completed"] * 3})
    fig = F.scaling_figure(wide)                   # 20 .. 1280 (the ideal line): two decades
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.dtick == 1
    assert fig.layout.yaxis.minor.dtick == "D1"    # 2 ... 9 marked, not labelled
    narrow = wide.assign(workers=[1, 2, 4], samples_per_s=[310e3, 520e3, 905e3])
    ax = F.scaling_figure(narrow).layout.yaxis     # 310k .. 1.24M (the ideal line): under a decade
    assert ax.dtick is None and ax.tickmode == "array"
    # whole numbers at the 1-2-5 values inside the data, not plotly's bare digits (3, 2, 1M, 9, 8)
    assert list(ax.tickvals) == [500e3, 1e6] and list(ax.ticktext) == ["500k", "1M"]
    live = F.scaling_figure(narrow.iloc[:0], live=True)
    F.update_scaling(live, narrow)                 # the live figure's ticks follow each redraw
    assert list(live.layout.yaxis.ticktext) == ["500k", "1M"]
    F.update_scaling(live, wide)
    assert live.layout.yaxis.dtick == 1 and live.layout.yaxis.tickvals is None
    prog = F.live_base("progress_time", 1)
    T.extend_series(prog, [S.Series("run", np.arange(50.0), np.geomspace(2.0, 0.01, 50))])
    assert T.set_loss_scale(prog, True).layout.yaxis.dtick == 1
    assert T.set_loss_scale(prog, False).layout.yaxis.dtick is None
    # a live loss axis under a decade keeps plotly's ticks (its data goes on arriving: fixed
    # values would go stale); a static one gets them set, and gives them back when linear
    T.extend_series(narrow_live := F.live_base("progress_time", 1),
                    [S.Series("run", np.arange(50.0), np.linspace(0.9, 0.31, 50))])
    assert T.set_loss_scale(narrow_live, True).layout.yaxis.tickvals is None
    static = go.Figure(go.Scatter(x=np.arange(50.0), y=np.linspace(0.9, 0.31, 50)))
    assert list(T.set_loss_scale(static, True).layout.yaxis.ticktext) == ["0.4", "0.5", "0.6", "0.7", "0.8", "0.9"]
    assert T.set_loss_scale(static, False).layout.yaxis.tickvals is None
