"""A validation set held out of the training rows (`val_fraction`): never trained on, scaled
by the training rows' statistics alone, scored at every evaluation on every path, the one
that chooses the kept parameters and early stopping; older run directories still load."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench.config import RunConfig
from workbench.data import Dataset, load_dataset
from workbench.execution.engine import execute, run_threads
from workbench.maths.metrics import Evaluator
from workbench.problem import Problem
from workbench.sim.transport import SimTransport

BASE = dict(algorithm="sync_sgd", cpus=2, batch_size=32, lr=0.1, steps=120, eval_every=20, seed=0)


def test_the_last_training_rows_are_held_out_and_the_plan_counts_only_the_rest():
    full = load_dataset("digits")
    problem = Problem.from_config(RunConfig(val_fraction=0.25, **BASE))
    data = problem.data
    k = int(full.n_train * 0.25)
    assert (data.n_train, data.n_val, data.n_test) == (full.n_train - k, k, full.n_test)
    assert np.array_equal(data.X_val, full.X_train[-k:]) and np.array_equal(data.X_train, full.X_train[:-k])
    assert np.array_equal(data.y_val, full.y_train[-k:])
    assert problem.shape.n_train == data.n_train and RunConfig(val_fraction=0.25).data_shape.n_val == k
    assert problem.plan.steps_per_epoch == data.n_train // 32


def test_standardizing_uses_the_training_rows_alone():
    full = load_dataset("digits")
    problem = Problem.from_config(RunConfig(val_fraction=0.25, standardize=True, **BASE))
    data = problem.data
    kept = full.X_train[:data.n_train].astype(np.float64)
    mean, std = kept.mean(axis=0), kept.std(axis=0)
    said = problem.data_record["standardized"]
    used = std > 0
    np.testing.assert_allclose(np.asarray(said["mean"]), mean, rtol=1e-5, atol=1e-6)
    want = (full.X_train[data.n_train:] - mean) / np.where(used, std, 1.0)
    np.testing.assert_allclose(data.X_val[:, used], want[:, used], rtol=1e-4, atol=1e-4)


def _poisoned(seed: int) -> Dataset:
    """digits as arrays, its last 300 training rows' labels scrambled by `seed`."""
    d = load_dataset("digits")
    y = d.y_train.copy()
    y[-300:] = np.random.default_rng(seed).integers(0, 10, 300)
    return Dataset.from_arrays(d.X_train, y, d.X_test, d.y_test, n_classes=10, name=f"digits-poisoned-{seed}")


def test_the_held_out_rows_are_never_trained_on():
    # the same rows to train on, the held-out ones labelled differently: the parameters are the same
    # bits, the validation scores are not
    share = 300 / load_dataset("digits").n_train
    runs = [run_threads(RunConfig(dataset=_poisoned(seed), val_fraction=share, **BASE)) for seed in (1, 2)]
    assert runs[0].summary["final_val_loss"] != runs[1].summary["final_val_loss"]
    assert np.array_equal(runs[0].params, runs[1].params)
    assert runs[0].evals["test_loss"].tolist() == runs[1].evals["test_loss"].tolist()


def test_the_evaluators_split_scores_are_its_whole_ones():
    problem = Problem.from_config(RunConfig(val_fraction=0.2, **BASE))
    ev, p = Evaluator(problem.model, problem.data), problem.params0
    whole = ev(p)
    split = Evaluator.from_partials(sum(ev.partial(p, r, 3) for r in range(3)))
    assert set(whole) == {"train_loss", "test_loss", "test_accuracy", "val_loss", "val_accuracy"} == set(split)
    assert all(abs(whole[k] - split[k]) < 1e-6 * max(1.0, abs(whole[k])) for k in whole)


@pytest.mark.parametrize("extra", [dict(algorithm="sync_sgd", cpus=4), dict(algorithm="async_sgd", cpus=3),
                                   dict(algorithm="local_sgd", cpus=2, tau=4)], ids=["lockstep", "replay", "per-worker"])
def test_every_simulated_path_scores_it_the_same_as_the_per_worker_path(extra):
    from test_sim_lockstep import _same
    config = RunConfig(**{**BASE, "simulate": True, "val_fraction": 0.2, **extra})
    a, b = execute(config, SimTransport()), execute(config, SimTransport(lockstep=False))
    assert a.evals["val_loss"].notna().all()
    _same(a, b)


@pytest.mark.cluster
def test_a_real_dask_cluster_scores_it(client):
    got = wb.run(RunConfig(val_fraction=0.2, **BASE), cluster=client, progress=False)
    ref = run_threads(RunConfig(val_fraction=0.2, **BASE))
    np.testing.assert_allclose(got.evals["val_loss"], ref.evals["val_loss"], rtol=1e-5)
    assert got.summary["best_val_loss_step"] == ref.summary["best_val_loss_step"]


def test_a_language_model_holds_out_its_last_training_windows():
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, model="gpt", dataset="markov_text", n_samples=400, val_fraction=0.1,
                    optimizer="adamw", lr=0.003, batch_size=16, steps=20, eval_every=10)
    data = Problem.from_config(cfg).data
    full = load_dataset("markov_text", n_samples=400)
    assert data.n_val == 32 and np.array_equal(data.X_val, full.X_train[-32:])
    got = run_threads(cfg)
    assert got.status == "completed" and got.evals["val_loss"].notna().all() and "final_val_loss" in got.summary


def test_without_one_nothing_changes_and_a_run_directory_from_before_still_loads(tmp_path):
    plain = run_threads(RunConfig(**BASE))
    assert plain.evals["val_loss"].isna().all() and "final_val_loss" not in plain.summary
    assert plain.summary["params_best"].keys() == {"steps", "test_loss"}
    plain.save(tmp_path / "run")
    old = pd.read_csv(tmp_path / "run" / "evals.csv").drop(columns=["val_loss", "val_accuracy"])
    old.to_csv(tmp_path / "run" / "evals.csv", index=False)     # as a run written before validation sets
    loaded = wb.load(tmp_path / "run")
    assert loaded.evals["val_loss"].isna().all() and len(loaded.evals) == len(plain.evals)


def test_the_report_gives_the_chosen_models_test_numbers(tmp_path):
    got = run_threads(RunConfig(val_fraction=0.2, **BASE))
    s = got.summary
    assert s["best_val_loss"] == got.evals["val_loss"].min()
    row = got.evals.loc[got.evals["val_loss"].idxmin()]
    assert (s["test_loss_at_best_val"], s["test_accuracy_at_best_val"]) == (row["test_loss"], row["test_accuracy"])
    from workbench.ui.report import write_report
    page = write_report(got, tmp_path / "report.html").read_text()
    assert "test_loss_at_best_val" in page and "lowest validation loss" in page


def test_a_share_that_holds_out_no_row_is_refused_before_anything_runs():
    from workbench.config import ConfigError
    with pytest.raises(ConfigError) as err:
        RunConfig(val_fraction=0.0005)
    assert err.value.field == "val_fraction" and "at least 1/1,438" in str(err.value)


def test_the_loss_figure_draws_the_validation_curve_only_when_there_is_one():
    from workbench.ui.figdata import progress_series
    with_val = run_threads(RunConfig(val_fraction=0.2, **BASE))
    names = [s.name for s in progress_series(with_val.steps, with_val.evals, "epoch", "run", "#1f77b4")]
    assert sum("validation loss" in n for n in names) == 1
    val = next(s for s in progress_series(with_val.steps, with_val.evals, "epoch", "run", "#1f77b4")
               if "validation loss" in s.name)
    assert np.allclose(np.asarray(val.y, float), with_val.evals.sort_values("time")["val_loss"].to_numpy())
    plain = run_threads(RunConfig(**BASE))
    assert not any("validation" in s.name for s in progress_series(plain.steps, plain.evals, "epoch", "run", "#1f77b4"))


def test_a_grid_over_a_validation_set_chooses_by_it_and_counts_its_rows():
    from workbench.analysis.grid import GridPlan, combine, grid_row
    from workbench.config import ConfigError
    cfg = RunConfig(val_fraction=0.2, **BASE)
    plan = GridPlan.make(cfg, {"lr": [0.03, 0.3]}, seeds=[0, 1])
    assert plan.metric == "final_val_accuracy" and plan.rows_name == "validation rows"
    assert plan.test_rows(plan.points()[0]) == int(load_dataset("digits").n_train * 0.2)
    rows = []
    for seed in plan.seeds:
        for point in plan.points():
            got = run_threads(plan.config_at(point, seed))
            rows.append(grid_row(got, point, seed, None))
    table = combine(rows, plan)
    means = [float(np.mean([r["final_val_accuracy"] for r in rows if r["lr"] == lr])) for lr in (0.03, 0.3)]
    np.testing.assert_allclose(table["final_val_accuracy_mean"].to_numpy(), means)
    assert "final_test_accuracy" in table       # the test numbers beside, not choosing
    with pytest.raises(ConfigError) as err:
        GridPlan.make(RunConfig(**BASE), {"lr": [0.03, 0.3]}, metric="final_val_loss")
    assert err.value.field == "metric" and "needs a validation set" in str(err.value)


def test_the_cli_grid_prints_the_test_accuracy_beside_the_validation_metric_it_chose_by(tmp_path, capsys):
    """Chosen on the validation rows, each point's test accuracy (its seeds' mean, grid.csv's
    `final_test_accuracy`) stands beside the choosing metric on the terminal too."""
    from workbench.apps.cli import main
    assert main(["grid", "--algorithm", "sgd", "--steps", "30", "--val-fraction", "0.2", "--vary", "lr=0.05,0.3",
                 "--seeds", "0,1", "--out", str(tmp_path / "g"), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:8] == ["lr", "seeds", "val", "accuracy", "test", "accuracy", "(mean)", "samples/s"]
    grid = pd.read_csv(tmp_path / "g" / "grid.csv")
    for line, test in zip(lines[1:3], grid["final_test_accuracy"]):
        assert f"{test:.4f}" in line.split()


def test_every_one_line_verdict_and_the_runs_table_give_the_validation_accuracy_beside_the_tests(tmp_path, capsys):
    from workbench.apps.cli import main
    from workbench.ui.dashboard import Dashboard
    from workbench.ui.report import summary_table
    code = main(["run", "--algorithm", "sync_sgd", "--cpus", "2", "--steps", "40", "--eval-every", "20",
                 "--val-fraction", "0.2", "--out", str(tmp_path / "cli")])
    s = wb.load(tmp_path / "cli").summary
    line = capsys.readouterr().out.splitlines()[0]
    lo, hi = s["final_test_accuracy_95"]          # digits' test rows are few: their 95% interval first
    assert code == 0 and (f"test accuracy {s['final_test_accuracy']:.4f} (95%: {lo:.2f}-{hi:.2f} from "
                          f"{s['test_rows']} rows; validation {s['final_val_accuracy']:.4f}), " in line)
    dash = Dashboard(cluster="threads")
    for name, value in dict(steps=40, eval_every=20, val_fraction=0.2).items():
        dash.controls[name].value = value
    assert dash.run() is True
    held = dash.wait(60).summary
    assert f"; validation {held['final_val_accuracy']:.4f})" in dash.status_text
    dash.controls["val_fraction"].value = 0.0
    assert dash.run() is True
    dash.wait(60)
    assert "(validation" not in dash.status_text and "; validation" not in dash.status_text
    table = summary_table(dash.history)
    assert table["final_val_accuracy"].tolist()[0] == held["final_val_accuracy"]
    assert np.isnan(table["final_val_accuracy"].tolist()[1])          # the run without one: empty
    assert list(table.columns).index("final_val_accuracy") == list(table.columns).index("final_test_accuracy") + 2
