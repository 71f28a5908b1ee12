"""The one measurement (workbench.measure): steady state, its throughput, shares, and the
time identities of every run, checked against plain-loop oracles and on real runs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import measure
from workbench.algorithms import REGISTRY


def rows(worker: int, compute: np.ndarray, samples: int = 8, offset: float = 0.0, comm: float = 0.0) -> pd.DataFrame:
    """One sequential worker's step rows: each step starts when the previous one ended."""
    length = compute + comm
    return pd.DataFrame({"worker": worker, "step": np.arange(len(compute)), "time": offset + np.cumsum(length),
                         "samples": samples, "compute_s": compute, "comm_s": comm, "wait_s": 0.0})


def test_the_warm_up_of_the_first_steps_is_left_out():
    # sgd's shape: steps 0 and 1 take 0.11 s and 0.44 s, then 120 us
    compute = np.r_[0.11, 0.44, np.full(20000, 120e-6)]
    s = measure.steady(rows(0, compute, samples=32))
    assert s.reached
    assert s.samples_per_s == pytest.approx(32 / 120e-6, rel=1e-9)      # the plain loop's rate, exactly
    assert s.compute_share == pytest.approx(1.0)


def test_a_run_too_short_for_the_time_rule_still_drops_the_warm_up_steps():
    compute = np.r_[0.11, 0.44, np.full(5, 0.01)]
    s = measure.steady(rows(0, compute))
    assert not s.reached
    assert s.start_s == pytest.approx(0.11 + 0.44 + 0.01)   # after steps 0, 1, 2
    assert s.samples_per_s == pytest.approx(8 / 0.01)


@pytest.mark.parametrize("cut_fraction", [0.1, 0.137])
def test_one_worker_rate_is_exact_wherever_the_window_opens(monkeypatch, cut_fraction):
    monkeypatch.setattr(measure, "WARMUP_FRACTION", cut_fraction)   # opens mid-step for 0.137
    s = measure.steady(rows(0, np.full(100, 0.01), samples=4))
    assert s.samples_per_s == pytest.approx(400.0, rel=1e-9)


def test_many_asynchronous_workers_add_up_with_nothing_lost_at_the_opening():
    # 8 workers for 5 s, steps of different lengths, phase-shifted: the aggregate rate is the sum
    lengths = [0.010 + 0.001 * w for w in range(8)]
    df = pd.concat([rows(w, np.full(int((5.0 - 0.003 * w) / d), d), samples=16, offset=0.003 * w)
                    for w, d in enumerate(lengths)])
    expected = sum(16 / d for d in lengths)
    assert measure.steady(df).samples_per_s == pytest.approx(expected, rel=0.01)


def test_shares_are_of_the_booked_time_and_sum_to_one():
    df = rows(0, np.full(50, 0.006), comm=0.002).assign(wait_s=0.002, time=lambda d: d["time"] + 0.002 * (d.index + 1))
    s = measure.steady(df)
    assert (s.compute_share, s.comm_share, s.wait_share) == pytest.approx((0.6, 0.2, 0.2))
    assert s.comm_fraction == pytest.approx(0.4)


def test_the_input_is_not_changed():
    df = rows(0, np.full(30, 0.01))
    before = df.copy()
    measure.steady(df), measure.steady_steps(df), measure.training_span(df)
    pd.testing.assert_frame_equal(df, before)


def test_live_steady_agrees_with_steady_on_the_same_rows():
    df = rows(0, np.r_[0.2, np.full(200, 0.01)])
    live = measure.LiveSteady()
    live.add([{"kind": "step", **r} for r in df.to_dict("records")])
    assert live.rate() == pytest.approx(measure.steady(df).samples_per_s)


@pytest.mark.parametrize("called, first, ended, train", [(0.0, 2.0, 10.0, 7.0), (5.0, 4.0, 9.0, 1.0),
                                                         (0.0, 3.0, 3.5, 2.0), (0.0, None, 1.0, 0.0)])
def test_timing_identities_hold_even_on_disagreeing_clocks(called, first, ended, train):
    t = measure.timing(called=called, first_step_wall=first, ended=ended, train_s=train)
    assert t["wall_time_s"] == pytest.approx(t["startup_s"] + t["train_time_s"] + t["teardown_s"])
    assert min(t.values()) >= 0


# ------------------------------------------------------------------------------ real runs
def check_identities(result) -> None:
    s = result.summary
    assert s["wall_time_s"] == pytest.approx(s["startup_s"] + s["train_time_s"] + s["teardown_s"], abs=1e-9)
    for key in ("startup_s", "train_time_s", "teardown_s"):
        assert s[key] >= 0, (key, s[key])
    assert s["train_time_s"] == pytest.approx(measure.train_time(result.steps))
    st = measure.steady(result.steps)
    assert s["samples_per_s"] == pytest.approx(st.samples_per_s)
    assert s["comm_fraction"] == pytest.approx(st.comm_fraction)
    assert s["steady"]["reached"] == st.reached


@pytest.mark.parametrize("algorithm", sorted(set(REGISTRY) | {"sgd"}))
def test_every_algorithm_on_threads_obeys_the_time_identities(algorithm, tiny):
    extra = {"round_size": 10} if algorithm == "ltfb" else {}
    result = wb.run(tiny(algorithm=algorithm, cpus=1 if algorithm == "sgd" else 2, steps=40, **extra),
                    cluster="threads", progress=False)
    assert result.status == "completed"
    check_identities(result)


def test_a_simulated_run_obeys_the_time_identities_in_virtual_seconds(tiny):
    result = wb.run(tiny(algorithm="async_sgd", cpus=8, simulate=True, steps=40), progress=False)
    check_identities(result)
    assert result.summary["startup_s"] == 0.0 and result.summary["sim_startup_s"] >= 0


@pytest.mark.slow
@pytest.mark.cluster
def test_a_dask_run_obeys_the_time_identities(client, tiny):
    result = wb.run(tiny(algorithm="sync_sgd", cpus=2, steps=200), cluster=client, progress=False)
    check_identities(result)
    assert result.summary["startup_s"] > 0


def test_every_consumer_reads_the_same_steady_throughput(tmp_path, tiny):
    from workbench.analysis import costmodel, sweep
    from workbench.bench import throughput as bench
    result = wb.run(tiny(algorithm="sync_sgd", cpus=2, steps=60), cluster="threads", progress=False)
    expected = result.summary["samples_per_s"]
    assert costmodel.training_throughput(result) == pytest.approx(expected)
    assert bench.steady_throughput(result.steps) == pytest.approx(expected)
    assert sweep.scaling_row(result, 2, "strong")["samples_per_s"] == pytest.approx(expected)
    loaded = wb.load(result.save(tmp_path / "run"))
    assert measure.steady(loaded.steps).samples_per_s == pytest.approx(expected, rel=1e-9)


def test_a_steady_window_too_short_to_time_says_so_and_leaves_the_rate_alone():
    # The quickstart lesson's run (sync_sgd, digits, 2 workers, 2 epochs) reached its steady
    # state by the step count with a window of 14 ms (2026-12-07, load 4.4) and printed
    # 158,552 samples/s with no note; the same config for 10 epochs (a 218 ms window) measured
    # 43,027. Two workers' 44 steps of 1 ms: the window opens at 10% of 44 ms, closes at 44 ms.
    quick = pd.concat([rows(w, np.full(44, 1e-3), samples=32) for w in (0, 1)], ignore_index=True)
    s = measure.steady(quick)
    assert s.reached and (s.start_s, s.end_s) == pytest.approx((0.0044, 0.044))
    assert s.samples_per_s == pytest.approx(2 * 32 / 1e-3, rel=1e-9)     # the rate is the plain loop's, as before
    summary = {"steady": s.to_dict(), "workers": [{"rank": 0}, {"rank": 1}]}
    assert measure.notes(summary) == [
        "its steady window lasted 39.6 ms (under 200 ms): one 10 ms pause of the OS or the garbage collector "
        "moves its samples/s by about 25%; train about 6x the steps or epochs for a rate to compare"]
    # ten times the step length: a 396 ms window says nothing more
    long = pd.concat([rows(w, np.full(44, 1e-2), samples=32) for w in (0, 1)], ignore_index=True)
    assert measure.notes({"steady": measure.steady(long).to_dict(), "workers": [{}, {}]}) == []
    # a simulated run's clock is virtual: no pause of this machine's is in it
    assert measure.notes({**summary, "simulated": True}) == []


def test_a_short_window_note_reaches_the_run_line_and_explain(tmp_path, tiny, capsys):
    from workbench.analysis.explain import explain
    from workbench.apps.cli import _report_run
    config = tiny(algorithm="sync_sgd", cpus=2, steps=60).replace(out=str(tmp_path / "run"))
    result = wb.run(config, cluster="threads", progress=False)
    result.summary["machine_note"] = None   # (this machine's load is not what this test is about)
    # a 46 ms window, as the audit's, of a steady state reached: whether this 60-step run reached
    # its own is the machine's (a pause in its last steps leaves under 10 a worker in the window:
    # 2 runs of 40 at load 12.5), and a window not reached gets no window note, by its rule
    result.summary["steady"].update(reached=True, start_s=1.0, end_s=1.046)
    said = ("its steady window lasted 46 ms (under 200 ms): one 10 ms pause of the OS or the garbage collector "
            "moves its samples/s by about 22%; train about 5x the steps or epochs for a rate to compare")
    _report_run(result, config)
    assert f"  note: {said}" in capsys.readouterr().out.splitlines()
    assert f"  note: the 2-worker run: {said}" in explain([result])[0].text().splitlines()
    result.summary["steady"].update(start_s=1.0, end_s=2.0)          # a second: nothing to say
    _report_run(result, config)
    assert "steady window lasted" not in capsys.readouterr().out
    assert "steady window lasted" not in explain([result])[0].text()


# ------------------------------------------------------------------ a scaling point, repeated
def test_repeats_interleave_what_is_left_and_stop_on_the_time_budget():
    # Injected rates and clock: the rounds never depend on the machine's speed.
    from workbench.measure import Repeats, relative_spread
    now = [0.0]
    rep = Repeats([1, 2, 4], min_rounds=3, max_rounds=20, budget_s=14.0, clock=lambda: now[0])
    rates = {1: [100, 100, 100], 2: [180, 100, 260] * 10, 4: [300, 310, 305]}
    seen = []
    while todo := rep.next_round():
        seen.append(list(todo))
        for p in todo:
            rep.add(p, rates[p][rep.rounds(p)])
        now[0] += 4.0                                   # each round takes 4 s
    assert seen == [[1, 2, 4]] * 3 + [[2]]             # after 3 rounds only the unsettled point, then 16 s >= 14 s
    assert rep.known(1) and rep.known(4) and not rep.known(2) and rep.out_of == "14 s"
    assert rep.note(2) == f"not resolved: +-{relative_spread([180, 100, 260, 180]):.0%} over 4 rounds (target +-5%; budget: 14 s)"
    assert rep.note(1) == ""
    # a failed run (no rate) never makes a point known; a stopped point says how far it got
    rep = Repeats([1], min_rounds=3, max_rounds=3)
    assert rep.next_round() == [1]
    rep.add(1, None)
    assert rep.note(1) == "not resolved: 1 of 3 rounds measured (stopped)"
    for _ in range(2):
        rep.next_round()
        rep.add(1, None)
    assert rep.next_round() == [] and not rep.known(1) and rep.note(1).startswith("not resolved: no rate measured")
    with pytest.raises(ValueError, match="max_rounds: a whole number >= rounds"):
        Repeats([1], min_rounds=3, max_rounds=2)


def test_a_spread_under_one_percent_is_printed_with_its_decimal_not_as_zero():
    """Six demo rounds of which four agree within 0.4% (as `make demo` measured on 2026-12-06:
    87,577-108,059 samples/s) have a spread of 0.2%: printed "+-0%" it reads as a rate known
    exactly; the text keeps one decimal below 1% and whole percents from there."""
    from workbench.measure import relative_spread, spread_text
    rounds = [103_810, 87_577, 108_059, 104_246, 104_092, 103_808]
    spread = relative_spread(rounds)
    assert 0.001 < spread < 0.005
    assert spread_text(spread) == f"+-{spread:.1%}" != "+-0%"
    assert spread_text(0.25) == "+-25%" and spread_text(0.0094) == "+-0.9%" and spread_text(0.0096) == "+-1%"
    assert spread_text(float("nan")) == "no rate measured"
