"""Scaling sweeps: rows, speedup / efficiency maths, weak batches, files, early errors."""
from __future__ import annotations

import json
import math
import signal
import threading

import pandas as pd
import pytest

from workbench import ConfigError, RunConfig
from workbench.analysis.costmodel import training_throughput
from workbench.analysis.sweep import SWEEP_COLUMNS, add_scaling, sweep_configs
from workbench.api import sweep

DIGITS = dict(dataset="digits", epochs=1, seed=0)


def test_strong_sweep_rows_and_scaling_maths():
    seen = []
    table = sweep(RunConfig(algorithm="sync_sgd", batch_size=64, **DIGITS), workers=[1, 2], mode="strong",
                  cluster="threads", on_result=lambda row, result: seen.append((row, result)), rounds=1)
    assert list(table.columns) == list(SWEEP_COLUMNS)
    assert list(table.workers) == [1, 2] and list(table.batch_size) == [64, 64]
    assert list(table.status) == ["completed", "completed"]
    sps = table.samples_per_s.to_numpy()
    assert table.speedup.tolist() == pytest.approx([1.0, sps[1] / sps[0]])
    assert table.efficiency.tolist() == pytest.approx([1.0, sps[1] / sps[0] / 2])
    # each row is the run's own numbers; on_result saw each run as it ended
    assert [row["workers"] for row, _ in seen] == [1, 2]
    for (row, result), (_, t_row) in zip(seen, table.iterrows()):
        assert len(result.summary["workers"]) == row["workers"]
        assert t_row.samples_per_s == pytest.approx(training_throughput(result))
        assert t_row.final_test_accuracy == result.summary["final_test_accuracy"]
    # the same global batch on any number of workers: the same trajectory (sync_sgd)
    assert table.final_test_accuracy.iloc[0] == pytest.approx(table.final_test_accuracy.iloc[1])


def test_points_are_measured_interleaved_and_reported_as_median_and_range(tmp_path):
    order = []
    table = sweep(RunConfig(algorithm="sync_sgd", batch_size=64, steps=30, dataset="digits", seed=0), workers=[1, 2],
                  cluster="threads", rounds=3, max_rounds=3, out=tmp_path / "sw", progress=False,
                  on_result=lambda row, result: order.append((len(result.summary["workers"]), result)))
    assert [w for w, _ in order] == [1, 2, 1, 2, 1, 2]                   # interleaved
    assert list(table.workers) == [1, 2] and list(table.rounds) == [3, 3]
    for w in (1, 2):
        rates = sorted(r.summary["samples_per_s"] for n, r in order if n == w)
        row = table[table.workers == w].iloc[0]
        assert (row.samples_per_s_lo, row.samples_per_s, row.samples_per_s_hi) == pytest.approx(tuple(rates))
        assert (tmp_path / "sw" / f"w{w}" / "summary.json").exists() and (tmp_path / "sw" / f"w{w}-r3").exists()
    two = table.iloc[1]
    overlap = two.samples_per_s_lo <= table.iloc[0].samples_per_s_hi and table.iloc[0].samples_per_s_lo <= two.samples_per_s_hi
    known = table.spread.iloc[0] <= 0.05 and two.spread <= 0.05       # both rates known to +-5% (measure.Repeats)
    assert two.resolved == (known and not overlap)
    assert two.resolution_note.startswith("not resolved on this machine now") == (not two.resolved)
    assert table.speedup.iloc[1] == pytest.approx(two.samples_per_s / table.iloc[0].samples_per_s)


def _injected_rates(monkeypatch, rates):
    """Each run's samples/s taken from `rates[workers]` in turn (the runs themselves are real
    but tiny): the rounds a sweep takes then never depend on the machine's speed."""
    import workbench.analysis.sweep as sweep_mod
    real = getattr(sweep_mod.scaling_row, "real", sweep_mod.scaling_row)
    feeds = {w: iter(v) for w, v in rates.items()}

    def row(result, workers, *args, **kwargs):
        return {**real(result, workers, *args, **kwargs), "samples_per_s": float(next(feeds[workers]))}
    row.real = real
    monkeypatch.setattr(sweep_mod, "scaling_row", row)


def test_a_point_repeats_until_known_to_5_percent_or_the_budget_runs_out(monkeypatch):
    # 1 worker settles in the first 3 rounds (+-1%); 2 workers keep varying, run again alone
    # (interleaving what is left) and stop at max_rounds, saying it is not resolved and by how much.
    _injected_rates(monkeypatch, {1: [100, 101, 99], 2: [150, 200, 120, 180, 160]})
    order = []
    table = sweep(RunConfig(algorithm="sync_sgd", batch_size=64, steps=3, dataset="digits", seed=0), workers=[1, 2],
                  cluster="threads", rounds=3, max_rounds=5, progress=False,
                  on_result=lambda row, result: order.append(row["workers"]))
    assert order == [1, 2, 1, 2, 1, 2, 2, 2]
    one, two = table.iloc[0], table.iloc[1]
    # spread: half the width of the 75% interval for the median (3-5 rounds: the whole range) over the median
    assert (one.rounds, one.samples_per_s, one.spread, one.resolved) == (3, 100.0, pytest.approx(1 / 100), True)
    assert (two.rounds, two.samples_per_s, two.resolved) == (5, 160.0, False)
    assert two.spread == pytest.approx((200 - 120) / 2 / 160)
    assert two.resolution_note == ("not resolved on this machine now: 2 workers +-25% over 5 rounds "
                                   "(target +-5%; budget: 5 rounds)")
    # once the second point settles (a sixth round puts the 150 and the 200 outside: +-0.6%), the sweep stops
    _injected_rates(monkeypatch, {1: [100, 101, 99], 2: [150, 200, 160, 160, 161, 159]})
    table = sweep(RunConfig(algorithm="sync_sgd", batch_size=64, steps=3, dataset="digits", seed=0), workers=[1, 2],
                  cluster="threads", rounds=3, max_rounds=8, progress=False)
    assert table.rounds.tolist() == [3, 6] and table.resolved.tolist() == [True, True]
    with pytest.raises(ConfigError, match=r"max_rounds: a whole number of rounds >= rounds \(3\), got 2"):
        sweep(RunConfig(algorithm="sync_sgd", batch_size=64, **DIGITS), workers=[1], cluster="threads", rounds=3,
              max_rounds=2)


def test_rounds_must_be_a_whole_number():
    with pytest.raises(ConfigError, match="rounds: a whole number of rounds >= 1, got 0"):
        sweep(RunConfig(algorithm="sync_sgd", batch_size=64, **DIGITS), workers=[1], cluster="threads", rounds=0)


def test_weak_sweep_grows_the_batch_and_writes_files(tmp_path):
    out = tmp_path / "sweep"
    table = sweep(RunConfig(algorithm="sgd", batch_size=32, **DIGITS), workers=[1, 2, 4], mode="weak",
                  out=out, rounds=1)
    assert list(table.batch_size) == [32, 64, 128]
    assert list(table["mode"]) == ["weak"] * 3
    on_disk = pd.read_csv(out / "sweep.csv")
    assert list(on_disk.workers) == [1, 2, 4]
    assert on_disk.efficiency.tolist() == pytest.approx(table.efficiency.tolist())
    for w in (1, 2, 4):
        assert (out / f"w{w}" / "summary.json").exists()
        assert (out / f"w{w}" / "report.html").exists()
    assert table.run_dir.tolist() == [str(out / f"w{w}") for w in (1, 2, 4)]


def test_configs_are_all_checked_before_any_run():
    cfg = RunConfig(algorithm="sync_sgd", batch_size=2, **DIGITS)
    calls = []
    with pytest.raises(ConfigError, match=r"batch_size: at least the number of workers \(4\) at every point .*, got 2"):
        sweep(cfg, workers=[1, 4], cluster="threads", on_result=lambda *a: calls.append(a))
    assert calls == []
    with pytest.raises(ConfigError, match="mode: one of"):
        sweep_configs(cfg, [1, 2], mode="medium")
    for bad in ([], [0, 1], ["x"], [True], "", "1,x", "0,1"):
        with pytest.raises(ConfigError, match="workers: a non-empty list"):
            sweep_configs(cfg, bad)
    # the text a person types (the CLI's --workers, the dashboard's box and its docstring): "12" is
    # twelve workers, not one and two
    assert [c.cpus for c in sweep_configs(cfg.replace(batch_size=16), "1, 2,4")] == [1, 2, 4]
    assert [c.cpus for c in sweep_configs(cfg.replace(batch_size=16), "12")] == [12]
    from workbench.analysis.sweep import Sweep
    assert Sweep.plan(cfg.replace(batch_size=16), "1,2", "strong").workers == (1, 2)      # wb.sweep's plan


def test_a_weak_sweep_past_the_training_set_is_refused_before_its_first_point(monkeypatch):
    """A weak sweep to 64 workers at batch 64 on digits (1,438 training examples): refused
    at once, naming the first point that cannot run and the limit (it used to run 16
    points, then stop)."""
    import workbench.api

    def no_run(*args, **kwargs):
        raise AssertionError("a point ran before every point was checked")
    monkeypatch.setattr(workbench.api, "run", no_run)
    cfg = RunConfig(algorithm="sync_sgd", batch_size=64, **DIGITS)
    expected = (r"batch_size: at most the training set size \(1438\) at every point of the weak sweep "
                r"\(the point on 32 workers has batch_size 2048\), got 2048")
    with pytest.raises(ConfigError, match=expected):
        sweep(cfg, workers=[1, 2, 4, 8, 16, 32, 64], mode="weak", cluster="threads", progress=False)
    with pytest.raises(ConfigError, match=r"the point on 4 workers"):   # a config error names its point too
        sweep_configs(RunConfig(algorithm="sync_sgd", batch_size=2, **DIGITS), [1, 4])
    assert len(sweep_configs(cfg, [1, 2, 4, 8, 16], mode="weak")) == 5   # up to 1024 samples: fine


def test_the_cli_refuses_the_weak_sweep_in_one_line(tmp_path):
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "workbench", "sweep", "--algorithm", "sync_sgd", "--dataset",
                           "digits", "--batch-size", "64", "--workers", "1,2,4,8,16,32,64", "--mode", "weak",
                           "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: batch_size: at most the training set size (1438)")
    assert "32 workers" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "w1").exists()


def test_sweep_configs_vary_the_workers_and_leave_the_input_alone():
    cfg = RunConfig(algorithm="sync_sgd", batch_size=64, gpus=0, out="somewhere", **DIGITS)
    configs = sweep_configs(cfg, [1, 2, 4], mode="weak")
    assert [(c.cpus, c.gpus, c.batch_size, c.out) for c in configs] == [(1, 0, 64, None), (2, 0, 128, None),
                                                                        (4, 0, 256, None)]
    assert (cfg.cpus, cfg.batch_size, cfg.out) == (2, 64, "somewhere")
    gpu = sweep_configs(cfg.replace(cpus=0, gpus=1), [1, 2])
    assert [(c.cpus, c.gpus) for c in gpu] == [(0, 1), (0, 2)]


def test_should_stop_ends_the_sweep_after_the_current_run():
    runs = []
    table = sweep(RunConfig(algorithm="sgd", batch_size=64, **DIGITS), workers=[1, 2, 4],
                  on_result=lambda row, result: runs.append(row), should_stop=lambda: len(runs) >= 1)
    assert len(table) == 1 and table.workers.tolist() == [1]


def test_a_round_stopped_part_way_is_not_counted_and_its_point_says_stopped():
    """A sweep stopped in its second round (a signal, the dashboard's Stop): the stopped run's
    rate is of part of a run, so the point's median, range and spread are its whole rounds';
    its status says stopped and its note which round. Before, the point read `completed`,
    2 rounds, and a spread that counted the partial run."""
    from workbench.analysis.sweep import combine_rounds
    rows = [{"workers": 1, "samples_per_s": 100.0, "round": 0, "status": "completed"},
            {"workers": 2, "samples_per_s": 180.0, "round": 0, "status": "completed"},
            {"workers": 1, "samples_per_s": 60.0, "round": 1, "status": "stopped"}]
    t = combine_rounds(rows)
    one = t[t.workers == 1].iloc[0]
    assert one.samples_per_s == one.samples_per_s_lo == one.samples_per_s_hi == 100.0 and one.rounds == 1
    assert one.status == "stopped" and one.resolution_note.startswith("round 2 stopped: not counted (1 whole round)")
    assert t[t.workers == 2].iloc[0].status == "completed"
    assert t.speedup.tolist() == pytest.approx([1.0, 1.8])
    # a point with no whole round keeps what it has (the first point of a sweep stopped at once)
    alone = combine_rounds([{"workers": 1, "samples_per_s": 60.0, "round": 0, "status": "stopped"}])
    assert alone.status.tolist() == ["stopped"] and alone.samples_per_s.tolist() == [60.0]


def test_add_scaling_against_the_first_row():
    t = add_scaling(pd.DataFrame({"workers": [2, 4, 8], "samples_per_s": [100.0, 150.0, 400.0]}))
    assert t.speedup.tolist() == pytest.approx([1.0, 1.5, 4.0])
    assert t.efficiency.tolist() == pytest.approx([1.0, 0.75, 1.0])


def test_wb_sweep_stays_the_function_after_the_analysis_module_is_imported():
    import subprocess
    import sys

    # in a fresh interpreter: importing the analysis module first must not shadow wb.sweep
    code = ("import workbench as wb, workbench.analysis.sweep as m, workbench.api as api; "
            "import types; print(wb.sweep is api.sweep, isinstance(wb.sweep, types.FunctionType), "
            "hasattr(m, 'sweep'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False"]
    import workbench as wb
    table = wb.sweep(RunConfig(algorithm="sgd", batch_size=64, **DIGITS), workers=[1], progress=False)
    assert table.workers.tolist() == [1] and table.speedup.tolist() == [1.0]


def test_the_cli_and_the_api_check_a_sweep_once_by_its_plan(monkeypatch, tmp_path, capsys):
    """`Sweep.plan` is the one check of a sweep's arguments: the CLI plans once (before the
    machine's checks) and hands the plan on, and its refusals are the API's, word for word."""
    from workbench.analysis.sweep import Sweep
    from workbench.apps import cli
    plans = []
    real = Sweep.plan.__func__
    monkeypatch.setattr(Sweep, "plan", classmethod(lambda cls, *a, **k: (plans.append(a[1]), real(cls, *a, **k))[1]))
    assert cli.main(["sweep", "--algorithm", "sync_sgd", "--workers", "1,2", "--max-rounds", "2", "--no-progress"]) == 2
    said = capsys.readouterr().err
    with pytest.raises(ConfigError) as api_said:
        sweep(RunConfig(algorithm="sync_sgd"), [1, 2], max_rounds=2, progress=False)
    assert str(api_said.value) == "max_rounds: a whole number of rounds >= rounds (3), got 2" in said
    plans.clear()
    out = tmp_path / "sw"
    assert cli.main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--workers", "1,2", "--steps", "3",
                     "--out", str(out), "--no-progress"]) == 0
    assert plans == [[1, 2]]                                   # planned once, run from the plan
    assert pd.read_csv(out / "sweep.csv")["workers"].tolist() == [1, 2]


def test_the_cli_prints_the_scaling_columns_and_says_which_points_are_too_short(tmp_path, capsys):
    """The terminal gets the columns a scaling question reads, at their precision (sweep.csv
    keeps every column), and a note for each point whose run was too short for a steady
    state, counted in steps a worker (the steady state's own count is every worker's rows)."""
    from workbench.apps import cli
    out = tmp_path / "sw"
    assert cli.main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--workers", "1,4", "--steps", "8",
                     "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == cli.SIMULATED_SWEEP     # virtual seconds, and why "+-" is "-" (tested below)
    lines = said[1:]
    assert lines[0].split() == ["workers", "batch", "samples/virtual", "s", "speed-up", "efficiency", "comm", "test",
                                "acc", "steps", "status", "rounds", "+-"]
    one, four = lines[1].split(), lines[2].split()
    assert one[:2] == ["1", "32"] and one[3:5] == ["1.00x", "100%"] and one[-1] == "-"   # one round: no spread
    table = pd.read_csv(out / "sweep.csv")
    assert four[3] == f"{table.speedup[1]:.2f}x" and four[2] == f"{table.samples_per_s[1]:,.0f}"
    assert not table.steady_reached.any() and "run_note" in table.columns
    per_worker = [json.loads((out / d / "summary.json").read_text())["steady"]["steps"] // w
                  for d, w in (("w1", 1), ("w4", 4))]
    for w, n in zip((1, 4), per_worker):
        assert n > 1   # (8 steps, 3 of them warm-up)
        assert (f"  note ({w} worker{'s' if w > 1 else ''}): too short for a steady state ({n} steps a worker after warm-up, "
                f"10 make one): its throughput includes start-up effects") in lines


def test_a_sweep_with_rows_held_out_shows_their_accuracy_beside_the_tests(tmp_path, capsys):
    """With a validation set (`val_fraction`) each point's validation accuracy is a column of
    sweep.csv and of the terminal's table, beside the test accuracy; without one, the
    terminal shows no such column (sweep.csv keeps it, empty)."""
    from workbench.apps import cli
    out = tmp_path / "sw"
    assert cli.main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--workers", "1,2", "--steps", "20",
                     "--val-fraction", "0.2", "--out", str(out), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]          # below the simulated sweep's line
    assert lines[0].split()[7:11] == ["test", "acc", "val", "acc"]
    table = pd.read_csv(out / "sweep.csv")
    for i, d in enumerate(("w1", "w2")):
        s = json.loads((out / d / "summary.json").read_text())
        assert s["final_val_accuracy"] is not None and table.final_val_accuracy[i] == pytest.approx(s["final_val_accuracy"])
        assert lines[1 + i].split()[7] == f"{s['final_val_accuracy']:.4f}"
        assert lines[1 + i].split()[6] == f"{s['final_test_accuracy']:.4f}"
    assert cli.main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--workers", "1,2", "--steps", "4",
                     "--out", str(tmp_path / "plain"), "--no-progress"]) == 0
    assert "val" not in capsys.readouterr().out.splitlines()[1].split()
    assert pd.read_csv(tmp_path / "plain" / "sweep.csv").final_val_accuracy.isna().all()


def test_a_warning_the_sweeps_runs_share_is_said_once(tmp_path, capsys):
    """Every point and round of a sweep runs its config's checks; a warning they share (a
    raw CSV's features, tau longer than the run) is said once, as `run` says it ("warning:
    ..."), not once a run with Python's file and line."""
    import numpy as np

    from workbench.apps import cli
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) * 2.0 + 40.0                         # far from unit scale
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=np.arange(200) % 2).to_csv(tmp_path / "t.csv", index=False)
    assert cli.main(["sweep", "--simulate", "--algorithm", "sync_sgd", "--dataset", str(tmp_path / "t.csv"),
                     "--workers", "1,2", "--steps", "5", "--rounds", "2", "--batch-size", "8", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: the features of") == 1, err
    assert "RunWarning" not in err, err


def test_the_sweeps_warm_up_run_does_not_warn_about_the_users_config():
    """The sweep warms its workers with a 2-step run of the largest point; that run's checks
    warned "the warmup (1 epochs, ... steps) is longer than the run (2 steps)", of a run the
    user never asked for. Only the points' own warnings are said, as before."""
    from workbench.api import warnings_once
    shown: list[str] = []
    cfg = RunConfig(algorithm="sync_sgd", batch_size=64, warmup="gradual", warmup_epochs=1, **DIGITS)
    with warnings_once(show=shown.append):
        table = sweep(cfg, workers=[1, 2], cluster="threads", rounds=1, max_rounds=1, progress=False)
    assert list(table.status) == ["completed", "completed"]
    assert not any("(2 steps)" in m for m in shown), shown
    # a point's own warning still comes through: the same warmup over a 2-step point
    shown.clear()
    with warnings_once(show=shown.append):
        sweep(cfg.replace(steps=2), workers=[1, 2], cluster="threads", rounds=1, max_rounds=1,
              progress=False)
    assert sum("longer than the run (2 steps)" in m for m in shown) == 1, shown


def test_a_point_is_resolved_by_the_interval_its_spread_is_of():
    """From 6 rounds the spread leaves out the extreme rounds (`measure.median_interval`): one
    round disturbed by another process is outvoted. The overlap test reads the same interval:
    a point said to be known to +-1% was "not resolved" because its full range (one disturbed
    round at 95) overlapped the reference's."""
    from workbench.analysis.sweep import combine_rounds
    ones = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0]
    twos = [180.0, 182.0, 178.0, 181.0, 179.0, 95.0]
    rows = [{"workers": w, "samples_per_s": v, "round": r, "status": "completed"}
            for r, (a, b) in enumerate(zip(ones, twos)) for w, v in ((1, a), (2, b))]
    t = combine_rounds(rows)
    two = t.iloc[1]
    assert two["samples_per_s_lo"] == 95.0 and two["spread"] < 0.05      # the full range is still reported
    assert bool(two["resolved"]) and two["resolution_note"] == ""
    rows[-1]["samples_per_s"] = 101.0                                 # now two rounds down at 95 and 101: not outvoted
    rows[-3]["samples_per_s"] = 100.0
    t = combine_rounds(rows)
    assert not bool(t.iloc[1]["resolved"])


def test_a_simulated_sweeps_table_says_its_rates_are_virtual_and_why_it_has_no_spread():
    # An audit's `sweep --simulate --cpu-device local --workers 1,2` (2026-12-07) printed
    # "samples/s ... 1.56x ... rounds 1, +- -" with no word that the seconds were virtual: it
    # reads as a measurement of this machine (`run --simulate` says "(simulated)").
    from workbench.apps import cli
    table = pd.DataFrame({"workers": [1, 2], "batch_size": [64, 64], "samples_per_s": [187897.2, 292523.3],
                          "speedup": [1.0, 1.5568], "efficiency": [1.0, 0.778], "comm_fraction": [0.021, 0.347],
                          "final_test_accuracy": [0.865, 0.865], "steps": [225, 225], "status": ["completed"] * 2,
                          "rounds": [1, 1], "spread": [0.0, 0.0], "simulated": [True, True]})
    first, header, *rows = cli.sweep_text(table).splitlines()
    assert first == ("simulated: virtual workers on a virtual clock, samples per virtual second (not a measurement "
                     "of this machine); a simulated run on a named profile or a kept calibration is deterministic (the "
                     "same config gives the same numbers), so one round measures a point and there is no +- to measure")
    assert header.split()[:4] == ["workers", "batch", "samples/virtual", "s"] and header.split()[-1] == "+-"
    assert [r.split()[2] for r in rows] == ["187,897", "292,523"] and [r.split()[-1] for r in rows] == ["-", "-"]
    real = cli.sweep_text(table.assign(simulated=False)).splitlines()
    assert real[0].split()[:3] == ["workers", "batch", "samples/s"] and len(real) == 3
    # the audit: `sweep --simulate --cpu-device local` on a busy machine, twice: 540,968 then 32,685
    # samples/s for 1 worker under that promise; a calibration judged bad is not kept, and its header says so
    said = cli.sweep_text(table.assign(calibration_kept=[True, False])).splitlines()[0]
    assert said == cli.SIMULATED_SWEEP_UNKEPT and "will change from run to run" in said and "deterministic" not in said
    assert cli.sweep_text(table.assign(calibration_kept=[True, None])).splitlines()[0] == first


def test_a_ctrl_c_between_points_returns_what_finished_as_grid_does(tmp_path):
    # A KeyboardInterrupt landing in the sweep's own code (between two runs, or while its
    # cluster starts: a run catches the ones that land in it) raised past the finished points,
    # where `wb.run` and `wb.grid` return what they have: the sweep returns its table now.
    def ctrl_c_after_the_first(row, result):
        raise KeyboardInterrupt
    cfg = RunConfig(algorithm="sync_sgd", batch_size=64, steps=3, dataset="digits", seed=0)
    try:
        table = sweep(cfg, workers=[1, 2], cluster="threads", rounds=1, progress=False, out=tmp_path / "s",
                      on_result=ctrl_c_after_the_first)
    except KeyboardInterrupt:   # (caught: raised on, it would end the whole test session)
        pytest.fail("the sweep raised the KeyboardInterrupt past its finished points")
    assert table.workers.tolist() == [1] and table.status.tolist() == ["completed"]
    assert table.attrs["status"] == "stopped"
    assert pd.read_csv(tmp_path / "s" / "sweep.csv").workers.tolist() == [1]
    assert (tmp_path / "s" / "w1" / "summary.json").is_file() and not (tmp_path / "s" / "w2").exists()
    whole = sweep(cfg, workers=[1, 2], cluster="threads", rounds=1, progress=False)
    assert whole.attrs["status"] == "completed"


def test_a_ctrl_c_as_a_run_ends_keeps_that_run_and_starts_no_other(tmp_path):
    # A real SIGINT (Python's own handler) the moment the first point's run has returned,
    # before the sweep kept its row. Before, the KeyboardInterrupt landed there and the
    # sweep returned an empty table (the finished run dropped); one landing after a run's
    # loops had ended was taken by that run and the sweep went on to its next point. Now a
    # first Ctrl-C is a stop request (`api.interrupt_stops`): the run is kept, none starts.
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    from workbench.api import run
    ran = []

    def run_then_ctrl_c(cfg, **kwargs):
        result = run(cfg, **kwargs)
        ran.append(cfg.cpus)
        if len(ran) == 1:
            signal.raise_signal(signal.SIGINT)   # its handler runs before this call returns
        return result
    cfg = RunConfig(algorithm="sync_sgd", batch_size=64, steps=3, dataset="digits", seed=0)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # (a background shell ignores SIGINT)
    try:
        table = sweep(cfg, workers=[1, 2], cluster="threads", rounds=1, progress=False, out=tmp_path / "s",
                      run_point=run_then_ctrl_c)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # its own handler is back
    except KeyboardInterrupt:   # (caught: raised on, it would end the whole test session)
        pytest.fail("the sweep raised the KeyboardInterrupt")
    finally:
        signal.signal(signal.SIGINT, old)
    assert ran == [1]
    assert table.workers.tolist() == [1] and table.status.tolist() == ["completed"]
    assert table.attrs["status"] == "stopped"
    assert pd.read_csv(tmp_path / "s" / "sweep.csv").workers.tolist() == [1]


def test_a_sweeps_speedup_comes_with_its_range_by_the_demos_definition():
    # An audit (2026-12-07, load 11-13): `sweep --workers 1,2` printed "0.26x" for 2 workers, a
    # ratio with no range, from 8 rounds of 27,081-46,265 (1 worker) and 6,137-15,124 samples/s
    # (2 workers); the demo printed its speed-up with the range between the rounds' extremes,
    # computed in the demo alone. The range is now the table's (`speedup_lo`, `speedup_hi`),
    # by `measure.median_speedup`, and every door reads it there.
    from workbench.analysis.sweep import combine_rounds
    from workbench.apps import cli
    from workbench.ui.sweepdata import scaling_series
    ones, twos = [34368.0, 27081.0, 46265.0], [9048.0, 6137.0, 15124.0]
    rows = [{"workers": w, "samples_per_s": v, "round": r, "status": "completed"}
            for r, (a, b) in enumerate(zip(ones, twos)) for w, v in ((1, a), (2, b))]
    t = combine_rounds(rows)
    two = t.iloc[1]
    assert two["speedup"] == pytest.approx(9048.0 / 34368.0, rel=1e-12)      # the medians' ratio, as before
    assert two["speedup_lo"] == pytest.approx(min(twos) / max(ones), rel=1e-12)
    assert two["speedup_hi"] == pytest.approx(max(twos) / min(ones), rel=1e-12)
    assert math.isnan(t.iloc[0]["speedup_lo"])                              # the reference: 1 by definition
    line = cli.sweep_text(t).splitlines()[2]
    assert f"0.26x ({min(twos) / max(ones):.2f}-{max(twos) / min(ones):.2f})" in line
    # one round measures no range: none is printed, and the CSV's is NaN
    single = combine_rounds([r for r in rows if r["round"] == 0])
    assert math.isnan(single.iloc[1]["speedup_lo"]) and "0.26x (" not in cli.sweep_text(single)
    # the scaling figure's efficiency bars are the speed-up's range over the workers
    eff = next(s for s in scaling_series(t) if s.name == "measured efficiency")
    bars = eff.style["error_y"]
    assert bars["array"][1] == pytest.approx(max(twos) / min(ones) / 2 - two["efficiency"], rel=1e-9)
    assert bars["arrayminus"][1] == pytest.approx(two["efficiency"] - min(twos) / max(ones) / 2, rel=1e-9)
