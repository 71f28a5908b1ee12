"""Live figures hold the shape of what the run directory holds: the traces drawn from the
live stream alone (no final redraw) have no gap wider than 1% of the run, and keep the
extremes of the loss."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench import RunConfig
from workbench.ui import figdata as FD
from workbench.ui import figures as F


def _live_traces(config: RunConfig, cluster=None) -> tuple[dict, object]:
    """Run `config`, drawing every on_record batch into live figures as the dashboard does
    (live_series -> extend_series), with no redraw at the end."""
    figs = {k: F.live_base(k, 1) for k in ("progress_time", "progress_epoch")}
    state = FD.LiveState(label="run", color="#000")

    def draw(batch):
        for key, series in FD.live_series(batch, state).items():
            if key in figs and series:
                F.extend_series(figs[key], series)
    result = wb.run(config, cluster=cluster, on_record=draw, progress=False)
    return figs, result


def _check(figs, result, min_points: int) -> dict:
    steps = FD.align_to_first_step(result).steps
    full = FD.step_progress(steps)
    out = {}
    for key, x in (("progress_time", "time"), ("progress_epoch", "epoch")):
        trace = {t.name: t for t in figs[key].data}["run"]
        xs = np.asarray(trace.x, float)
        span = float(full[x].max() - max(0.0, float(full[x].min())))
        gap = float(np.diff(np.r_[0.0, xs]).max())
        own = float(np.diff(np.r_[0.0, np.sort(full[x])]).max())   # the records' own largest gap
        out[key] = (len(xs), gap / span)
        assert np.all(np.diff(xs) >= 0), key                      # in x order
        assert len(xs) >= min(min_points, len(full[x])), (key, len(xs))
        # no gap wider than 1% of the run, or than the records' own (a run of 40 steps has 2.5%)
        assert gap <= max(0.01 * span, own) * (1 + 1e-9), (key, gap, span, own)
        assert xs[-1] == pytest.approx(float(full[x].max()), rel=1e-6), key
    return out


@pytest.mark.slow
def test_a_simulated_256_worker_run_is_drawn_whole_live(no_dask):
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", simulate=True, cpus=256,
                    cpu_device="power8", batch_size=256, steps=40, seed=0)
    figs, result = _live_traces(cfg)
    assert result.summary["status"] == "completed" and result.summary["steps"] == 40
    _check(figs, result, min_points=40)                          # every step: far below the cap


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="timing-dependent (open, issue 23): a live batch's last time and the "
                   "largest gap depend on when batches leave the workers; failed under load (end 0.2 ms short) "
                   "and idle (a 66 ms run's gap 11.9 ms vs its records' own 10.8 ms). The deterministic "
                   "simulated-run test above checks the same rule")
def test_a_long_dask_run_is_drawn_whole_live(client):
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", cpus=2, batch_size=16,
                    epochs=6, seed=0)                            # ~540 steps
    figs, result = _live_traces(cfg, cluster=client)
    assert result.summary["status"] == "completed"
    _check(figs, result, min_points=150)     # batches arrive as at most BATCH_POINTS means of steps


def test_a_trace_decimated_at_every_redraw_keeps_its_start_and_its_extremes():
    """The old rule (every k-th point, again at every redraw) thinned the oldest points
    away: a 24 s run's loss jumped from 0.006 s to 11.38 s in one straight line."""
    fig = F.live_base("progress_time", 1)
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 100.0, 20000)
    loss = np.exp(-t / 30) + 0.01 * rng.standard_normal(len(t))
    loss[7777] = 5.0                                             # one spike early in the run
    for lo in range(0, len(t), 100):                             # 200 batches of 100 steps
        F.extend_series(fig, [FD.Series("run", t[lo:lo + 100], loss[lo:lo + 100])])
    trace = fig.data[0]
    xs, ys = np.asarray(trace.x), np.asarray(trace.y)
    assert len(xs) <= FD.LIVE_POINTS + 2
    assert np.diff(xs).max() <= 0.01 * 100.0
    assert ys.max() == 5.0 and ys.min() == pytest.approx(loss.min())
