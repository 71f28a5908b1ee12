"""Link calibration from an exchange micro-benchmark (workbench.analysis.linkfit): the fit
against known alpha / beta, its uncertainty, the physical bound, the held-out error."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.analysis import linkfit

P, ALPHA, BETA = 2, 20e-6, 1 / 2e9
SIZES = np.array([4e4, 2e5, 1e6, 4e6, 2e7])


def timings(alpha=ALPHA, beta=BETA, noise=0.0, seed=0, repeats=3):
    rng = np.random.default_rng(seed)
    n = np.repeat(SIZES, repeats)
    A, B = 2 * (P - 1), 2 * (P - 1) / P * n          # the ring's terms for 2 workers (costmodel)
    t = (A * alpha + B * beta) * (1 + noise * rng.standard_normal(len(n)))
    return pd.DataFrame({"n_bytes": n, "workers": P, "seconds": t})


def test_the_fit_recovers_known_parameters_within_their_stated_uncertainty():
    f = linkfit.fit_link(timings(noise=0.05))
    assert f.alpha == pytest.approx(ALPHA, abs=4 * f.alpha_se + 1e-7)
    assert f.beta == pytest.approx(BETA, abs=4 * f.beta_se)
    assert 0 < f.alpha_se < ALPHA and 0 < f.beta_se < BETA
    assert f.bounded == ""
    assert len(f.held_out) == len(SIZES) * 3 and f.held_out_error < 0.25


def test_a_bandwidth_below_memcpy_over_the_factor_is_held_at_the_bound():
    slow = timings(beta=1 / 0.022e9)                # the 0.022 GB/s once fitted on this machine
    memcpy = 5e9
    f = linkfit.fit_link(slow, memcpy_bps=memcpy)
    assert f.bounded.startswith("bandwidth >= memcpy / 8")
    assert f.bandwidth_gbps == pytest.approx(memcpy / linkfit.MEMCPY_FACTOR / 1e9)
    assert f.alpha >= 0
    free = linkfit.fit_link(slow)                   # without the bound the fit follows the data
    assert free.bandwidth_gbps == pytest.approx(0.022, rel=1e-6)


def test_calibrate_takes_the_benchmarked_link_over_the_runs_comm_times():
    import workbench as wb
    from workbench.analysis.costmodel import calibrate
    result = wb.run(wb.RunConfig(algorithm="sync_sgd", cpus=2, steps=40, dataset="digits", batch_size=64),
                    cluster="threads", progress=False)
    f = linkfit.fit_link(timings(noise=0.02))
    cal = calibrate([result], link=f)
    assert (cal.alpha, cal.beta, cal.how) == (f.alpha, f.beta, "benchmark")
    assert cal.link("measured").beta == f.beta
    assert calibrate([result]).how != "benchmark"


def test_one_size_cannot_separate_alpha_from_beta():
    t = timings()
    with pytest.raises(ValueError, match="table: exchange timings at 2 or more sizes, got 1"):
        linkfit.fit_link(t[t["n_bytes"] == SIZES[0]])


def test_the_input_is_not_changed():
    t = timings(noise=0.05)
    before = t.copy()
    linkfit.fit_link(t, memcpy_bps=1e10)
    pd.testing.assert_frame_equal(t, before)


@pytest.mark.slow
@pytest.mark.cluster
def test_the_benchmark_times_the_shared_memory_allreduce_at_three_sizes(client):
    table = linkfit.exchange_benchmark(client, repeats=10)
    assert list(table["n_bytes"]) == [4 * n for n in linkfit.SIZES] and (table["seconds"] > 0).all()
    memcpy = linkfit.memcpy_rate()
    f = linkfit.fit_link(table, memcpy_bps=memcpy)
    assert f.bandwidth_gbps >= memcpy / linkfit.MEMCPY_FACTOR / 1e9 * (1 - 1e-9) and f.alpha >= 0
    assert len(f.held_out) == 3


def test_benchmark_link_fits_the_benchmark_bounded_by_memcpy_and_calibrate_keeps_how_sure(monkeypatch):
    # The benchmark's timings injected (never the machine's speed): benchmark_link fits them
    # under the memcpy bound, and calibrate carries the fit's uncertainty and held-out error.
    import workbench as wb
    from workbench.analysis.costmodel import calibrate
    slow = timings(beta=1 / 0.022e9)
    monkeypatch.setattr(linkfit, "exchange_benchmark", lambda client, sizes, repeats: slow)
    f = linkfit.benchmark_link(object(), memcpy_bps=5e9)
    assert f.bounded.startswith("bandwidth >= memcpy / 8") and f.bandwidth_gbps == pytest.approx(5 / 8)
    result = wb.run(wb.RunConfig(algorithm="sync_sgd", cpus=2, steps=20, dataset="digits", batch_size=64),
                    cluster="threads", progress=False)
    cal = calibrate([result], link=f)
    assert cal.how == "benchmark" and cal.link_fit == f.summary()
    assert cal.link_fit["held_out_error"] == pytest.approx(f.held_out_error) and f.held_out_error > 0.25
    text = cal.describe()
    assert "benchmarked: 0.625 +-" in text and "held-out error" in text and "bound: bandwidth >= memcpy / 8" in text
    assert calibrate([result]).link_fit is None
    with pytest.raises(wb.ConfigError, match="^link: a linkfit.LinkFit"):
        calibrate([result], link="benchmark")
