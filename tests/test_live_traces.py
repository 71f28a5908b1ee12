"""Live figures hold the shape of what the run directory holds, however the live batches
were cut: the traces drawn from the live stream alone (no final redraw) end at the run's
last step and have no gap wider than the span of one live block of steps
(`results.live_width`: at most 1% of the planned steps), measured on the run's own records."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench import RunConfig, measure
from workbench.results import LOG_FIELDS, STEP_COLUMNS, Collector, StepLog, live_width, pack_rows
from workbench.ui import figdata as FD
from workbench.ui import figures as F
from workbench.ui import series as S
from workbench.ui import traces as T


class _Live:
    """The dashboard's live path (on_record -> live_series -> extend_series), no final redraw."""

    def __init__(self):
        self.figs = {k: F.live_base(k, 1) for k in ("progress_time", "progress_epoch")}
        self.state = FD.LiveState(label="run", color="#000")
        self.points = dict.fromkeys(self.figs, 0)       # points handed to each figure's train-loss trace

    def __call__(self, batch):
        for key, series in FD.live_series(batch, self.state).items():
            if key in self.figs and series:
                self.points[key] += sum(len(s.x) for s in series if s.name == "run")
                T.extend_series(self.figs[key], series)


def _largest_block_span(x: np.ndarray, width: int) -> float:
    """The largest x distance across `width` consecutive steps of `x` (sorted, origin first)."""
    w = min(width, len(x) - 1)
    return float((x[w:] - x[:-w]).max())


def _check(live: _Live, steps, width: int) -> None:
    """The live traces against the run's own step records (the records' clock, not shifted).
    Assumes a synchronous run: each step's latest end comes after the previous step's."""
    full = FD.step_progress(steps)                        # one point per step: its latest end, its epoch
    t0 = float(measure.step_starts(steps).min())
    off = live.state.t_offset or 0.0
    first_block_end = float(np.sort(full["time"])[min(width, len(full["time"])) - 1])
    # The live clock's origin is the start of a row of the first batch: not before the run's
    # first step, and within its first block (invisible at 1% of the run).
    # (1 us: the rows' own rounding of booked seconds against their clock)
    assert max(t0, 0.0) - 1e-6 <= off <= first_block_end + 1e-9, (off, t0, first_block_end)
    n_blocks = -(-len(full["step"]) // width)
    for key, col, origin, shift in (("progress_time", "time", max(off, 0.0), off), ("progress_epoch", "epoch", 0.0, 0.0)):
        trace = {t.name: t for t in live.figs[key].data}["run"]
        xs = np.asarray(trace.x, float) + shift             # back on the records' clock
        ref = np.r_[origin, np.sort(full[col])]
        span = float(ref[-1] - ref[0])
        assert np.all(np.diff(xs) >= 0), key                # in x order
        assert xs[-1] == pytest.approx(ref[-1], rel=1e-9, abs=1e-12), key   # the run's last step, exactly
        gaps = np.diff(np.r_[origin, xs])
        if live.points[key] <= FD.LIVE_POINTS:
            # Not decimated: every block's latest end is a point, so between two neighbouring
            # points lie fewer than `width` of the run's own step ends (a stall in the records is
            # a gap in the records too, and is not held against the live trace).
            assert len(xs) >= n_blocks, (key, len(xs), n_blocks)
            eps = 1e-9 * span                               # the shift off and back on the records' clock
            a, b = np.r_[origin, xs[:-1]], xs
            inside = np.searchsorted(ref, b - eps, "left") - np.searchsorted(ref, a + eps, "right")
            worst = int(np.argmax(inside))
            assert inside.max() <= width - 1, (key, int(inside.max()), width, a[worst], b[worst])
        else:
            # Decimated (`series.extremes`, LIVE_POINTS // 2 bins): two bins more at most.
            bound = _largest_block_span(ref, width) + 2 * span / (FD.LIVE_POINTS // 2)
            assert gaps.max() <= bound * (1 + 1e-9), (key, gaps.max(), bound, span)


def _two_workers(n: int, seed: int = 0) -> dict[int, np.ndarray]:
    """Step rows (LOG_FIELDS) of two synchronous workers: uneven steps, one 50-step stall,
    a clock that started 0.5 s before the first step."""
    rng = np.random.default_rng(seed)
    out = {}
    base = 0.5 + np.cumsum(rng.uniform(0.5e-3, 3e-3, n))  # every step ends after both workers' previous one
    base[n // 3:] += 50 * 2e-3                              # an evaluation between two steps
    for rank in (0, 1):
        rows = np.zeros((n, len(LOG_FIELDS)))
        compute = rng.uniform(0.1e-3, 0.3e-3, n)
        rows[:, 0] = np.arange(n)
        rows[:, 1] = base - rng.uniform(0.0, 0.1e-3, n)     # ends a little before the step's barrier
        rows[:, 2] = np.exp(-np.arange(n) / 200) + 0.01 * rank
        rows[:, 3], rows[:, 4], rows[:, 5] = 0.1, 16, compute
        rows[:, 7] = np.diff(np.r_[0.5, rows[:, 1]]) - compute  # waiting books the rest of the step
        out[rank] = rows
    return out


@pytest.mark.parametrize("cuts", ["whole run in one batch", "every 7 steps", "random, workers apart"])
def test_live_traces_end_at_the_last_step_and_have_no_wide_gap_however_batches_are_cut(cuts):
    """The same rows streamed in differently cut live batches (the worker's StepLog, the
    client's Collector, the dashboard's live path) give traces held to the same bounds."""
    n, rng = 600, np.random.default_rng(1)
    rows = _two_workers(n)
    width = live_width(n)
    assert width == 3 and width <= 0.01 * n            # blocks of at most 1% of the run
    logs = {rank: StepLog() for rank in rows}
    live = _Live()
    collector = Collector(live, width=width, size=2)
    epoch_of = lambda s: np.asarray(s) / 100          # noqa: E731 (100 steps an epoch)
    cut = {"whole run in one batch": {r: [n] for r in rows},
           "every 7 steps": {r: list(range(7, n, 7)) + [n] for r in rows},
           "random, workers apart": {r: sorted(set(rng.integers(1, n, 40).tolist()) | {n}) for r in rows}}[cuts]
    done = {r: 0 for r in rows}
    for k in range(n):                               # both workers log step k, then flush where cut
        for rank in rows:
            logs[rank].add(*rows[rank][k])
            if k + 1 in cut[rank]:
                rows_sent = pack_rows(logs[rank].take(epoch_of))
                collector.add_live({"rank": rank, "started": 0.0, "rows": rows_sent, "records": []})
                done[rank] = k + 1
    assert done == {0: n, 1: n}
    for rank in rows:                                # the loops' results: nothing left unsent
        collector.add_steps(rank, logs[rank].columns(epoch_of))
    steps = collector.table("step", STEP_COLUMNS)
    _check(live, steps, width)


@pytest.mark.slow
def test_a_simulated_256_worker_run_is_drawn_whole_live(no_dask):
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", simulate=True, cpus=256,
                    cpu_device="power8", batch_size=256, steps=40, seed=0)
    live = _Live()
    result = wb.run(cfg, on_record=live, progress=False)
    assert result.summary["status"] == "completed" and result.summary["steps"] == 40
    _check(live, result.steps, live_width(40))                  # every step: far below the cap


@pytest.mark.slow
def test_a_long_dask_run_is_drawn_whole_live(client):
    """A real run: its batches leave the workers whenever the machine lets them; the bounds
    are those of the deterministic test above, on this run's own records."""
    cfg = RunConfig(algorithm="sync_sgd", dataset="digits", model="softmax", cpus=2, batch_size=16,
                    epochs=6, seed=0)                            # 534 steps: blocks of 3
    live = _Live()
    result = wb.run(cfg, cluster=client, on_record=live, progress=False)
    planned = result.summary["total_steps_planned"]
    assert result.summary["status"] == "completed" and result.summary["steps"] == planned == 534
    _check(live, result.steps, live_width(planned))


def test_a_trace_decimated_at_every_redraw_keeps_its_start_and_its_extremes():
    """The old rule (every k-th point, again at every redraw) thinned the oldest points
    away: a 24 s run's loss jumped from 0.006 s to 11.38 s in one straight line."""
    fig = F.live_base("progress_time", 1)
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 100.0, 20000)
    loss = np.exp(-t / 30) + 0.01 * rng.standard_normal(len(t))
    loss[7777] = 5.0                                             # one spike early in the run
    for lo in range(0, len(t), 100):                             # 200 batches of 100 steps
        T.extend_series(fig, [S.Series("run", t[lo:lo + 100], loss[lo:lo + 100])])
    trace = fig.data[0]
    xs, ys = np.asarray(trace.x), np.asarray(trace.y)
    assert len(xs) <= FD.LIVE_POINTS + 2
    assert np.diff(xs).max() <= 0.01 * 100.0
    assert ys.max() == 5.0 and ys.min() == pytest.approx(loss.min())


def _extremes_by_loop(x, y, max_points):
    """The rule of `series.extremes` as a plain loop over bins: the oracle."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n <= max_points:
        return list(range(n))
    bins = max(1, max_points // 2)
    lo, hi = x.min(), x.max()
    keep = {0, n - 1}
    members: dict[int, list[int]] = {}
    for i in range(n):
        k = min(int((x[i] - lo) / ((hi - lo) / bins)), bins - 1) if hi > lo else 0
        members.setdefault(k, []).append(i)
    for rows in members.values():
        finite = [i for i in rows if np.isfinite(y[i])]
        if finite:
            keep.add(min(finite, key=lambda i: (y[i], i)))
            keep.add(min(finite, key=lambda i: (-y[i], i)))
        else:
            keep.add(rows[0])                      # an all-missing bin: its first row
    missing = [i for i in range(n) if not np.isfinite(y[i])]
    if len(missing) <= max_points // 10:
        keep.update(missing)
    return sorted(keep)


def test_extremes_keeps_each_bins_first_min_and_max_like_a_plain_loop():
    """Ties (integer losses), missing values, a flat x and bins of one row, against the loop."""
    rng = np.random.default_rng(1)
    for trial in range(120):
        n = int(rng.integers(2, 800))
        x = np.zeros(n) if trial % 5 == 0 else np.sort(rng.random(n)) * (1e6 if trial % 2 else 1.0)
        y = rng.integers(0, 4, n).astype(float) if trial % 2 else rng.standard_normal(n)
        if trial % 3 == 0:
            y[rng.random(n) < 0.05] = np.nan
        max_points = int(rng.integers(4, 120))
        assert S.extremes(x, y, max_points).tolist() == _extremes_by_loop(x, y, max_points), (trial, n, max_points)


def _steps(worker, steps, t0, dt, samples=32):
    return [{"kind": "step", "worker": worker, "step": s, "epoch": 0.0, "time": t0 + (s + 1) * dt, "loss": 1.0,
             "lr": 0.1, "samples": samples, "compute_s": dt, "comm_s": 0.0, "wait_s": 0.0} for s in steps]


def test_all_workers_is_the_sum_of_the_workers_still_running():
    """Live, "all workers" is the sum of each worker's smoothed rate (a batch that holds some
    workers' newest steps and not others' undercounted them all), and a worker lost stops
    counting at its `worker_lost` event (its last rate stayed in the sum)."""
    state = FD.LiveState(label="run", color="#000", n_workers=2)
    rate = lambda out, name: [s for s in out["throughput"] if s.name == name][0].y[-1]   # noqa: E731
    out = FD.live_series(_steps(0, range(10), 0.0, 0.01) + _steps(1, range(10), 0.0, 0.02), state)
    assert rate(out, "all workers") == pytest.approx(rate(out, "worker 0") + rate(out, "worker 1"))
    assert rate(out, "all workers") == pytest.approx(32 / 0.01 + 32 / 0.02)
    lost = [{"kind": "event", "event": "worker_lost", "worker": 1, "time": 0.2, "message": "worker 1 was lost"}]
    out = FD.live_series(lost + _steps(0, range(10, 30), 0.0, 0.01), state)
    assert rate(out, "all workers") == pytest.approx(rate(out, "worker 0")) == pytest.approx(32 / 0.01)
