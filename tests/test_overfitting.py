"""A run that learned its training set by heart says so (`learning.overfit_note`).

The oracle is a table whose labels are random: nothing in the features carries over to the
test rows, so whatever the training loss does, the test loss can only get worse once the
model starts fitting the training labels; an MLP with more parameters than the table has
rows drives its training loss to about zero, and the note must be said, with the best test
loss's step. Digits, which a run learns, must not get it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import learning

FLAGS = dict(algorithm="sgd", hidden=[256], lr=0.1, batch_size=16, epochs=60, seed=0)


@pytest.fixture(scope="module")
def random_labels(tmp_path_factory):
    d = tmp_path_factory.mktemp("random")
    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.normal(size=(200, 16)).round(3), columns=[f"f{i}" for i in range(16)])
    table["label"] = rng.integers(0, 4, len(table))
    path = d / "random_labels.csv"
    table.to_csv(path, index=False)
    result = wb.run(wb.RunConfig(dataset=str(path), out=str(d / "run"), **FLAGS), cluster="threads", progress=False)
    return path, result, d / "run"


def test_random_labels_are_learned_by_heart_and_the_run_says_so(random_labels):
    _, result, out = random_labels
    s, ev = result.summary, result.evals
    assert s["final_train_loss"] < 0.01                               # the training labels, learned
    assert s["best_test_loss"] == pytest.approx(ev["test_loss"].min())
    best_row = ev.loc[ev["test_loss"].idxmin()]
    assert s["best_test_loss_step"] == int(best_row["step"]) + 1 < s["steps"]
    assert s["final_test_loss"] >= learning.OVERFIT_RISE * s["best_test_loss"]
    note = s["overfit_note"]
    assert note.startswith(f"overfitting: the test loss rose from its best, {s['best_test_loss']:.3g} after "
                           f"{s['best_test_loss_step']} steps, to {s['final_test_loss']:.3g} after {s['steps']} ")
    assert "5,380 parameters" in note and "160 training rows" in note    # 16*256+256 + 256*4+4; 80% of 200
    assert "its parameters then are kept (params_best.npy" in note
    # near chance too, and that sentence does not send the user to train longer
    assert s["learning_note"].startswith("did not learn: test accuracy")
    assert "train longer" not in s["learning_note"] and "not what carries over" in s["learning_note"]
    assert note in wb.measure.notes(s)
    assert wb.load(out).summary["overfit_note"] == note                     # kept in summary.json
    if (out / "report.html").exists():                                      # (the lab extra)
        assert note.split(":")[0] in (out / "report.html").read_text()


def test_the_parameters_at_the_best_test_loss_are_kept_and_score_it(random_labels):
    """Oracle: the evaluator, run again on the kept parameters, gives the best test loss the
    evaluations recorded; the run directory keeps them beside the final ones."""
    from workbench.maths.metrics import Evaluator
    from workbench.problem import Problem
    _, result, out = random_labels
    s = result.summary
    assert s["params_best"] == {"steps": s["best_test_loss_step"], "test_loss": s["best_test_loss"]}
    problem = Problem.from_config(wb.RunConfig.from_dict(s["config"]))
    scores = Evaluator(problem.model, problem.data)(result.best_params)
    assert scores["test_loss"] == pytest.approx(s["best_test_loss"], rel=1e-12)
    assert Evaluator(problem.model, problem.data)(result.params)["test_loss"] == pytest.approx(s["final_test_loss"],
                                                                                             rel=1e-12)
    loaded = wb.load(out)
    assert (out / "params_best.npy").is_file() and np.array_equal(loaded.best_params, result.best_params)
    rows = problem.data.X_test
    assert list(wb.predict(loaded, rows, params="best")) == list(wb.predict(result, rows, params="best"))
    with pytest.raises(wb.ConfigError, match=r'^params: "final" \(the parameters the run ended with\) or "best"'):
        wb.predict(result, rows, params="worst")


def test_a_run_whose_last_evaluation_was_its_best_keeps_one_file(random_labels, tmp_path):
    """Best and final the same: no second copy on disk, and loading gives both back."""
    _, result, _ = random_labels
    same = wb.RunResult(summary={**result.summary, "run_id": "same"}, evals=result.evals, params=result.params,
                        best_params=result.params.copy())
    same.save(tmp_path / "same")
    assert not (tmp_path / "same" / "params_best.npy").exists()
    back = wb.load(tmp_path / "same")
    assert np.array_equal(back.best_params, result.params) and np.array_equal(back.params, result.params)


def test_the_cli_prints_it(random_labels, tmp_path, capsys):
    from workbench.apps.cli import main
    path, _, _ = random_labels
    flags = ["run", "--simulate", "--algorithm", "sgd", "--dataset", str(path), "--hidden", "256", "--lr", "0.1",
             "--batch-size", "16", "--epochs", "60", "--out", str(tmp_path / "r"), "--no-progress"]
    assert main(flags) == 0
    assert "  note: overfitting: the test loss rose from its best" in capsys.readouterr().out


def test_a_run_that_learns_is_not_told_it_overfit():
    result = wb.run(wb.RunConfig(algorithm="sync_sgd", cpus=2, epochs=5, seed=0), cluster="threads", progress=False)
    s = result.summary
    assert s["final_test_accuracy"] > 0.9 and s["overfit_note"] is None
    assert s["best_test_loss"] <= s["final_test_loss"]


def _evals(test, train, worker="0"):
    return pd.DataFrame({"worker": [worker] * len(test), "step": [10 * (i + 1) - 1 for i in range(len(test))],
                         "train_loss": train, "test_loss": test})


def test_the_rule_wants_a_real_rise_with_a_falling_training_loss():
    cfg = {"dataset": "digits"}
    assert learning.overfit_note(cfg, _evals([1.0, 0.8, 1.05], [1.0, 0.7, 0.5])) is not None  # 1.31x: said
    assert learning.overfit_note(cfg, _evals([1.0, 0.8, 0.99], [1.0, 0.7, 0.5])) is None      # 1.24x: not
    assert learning.overfit_note(cfg, _evals([0.10, 0.02, 0.06], [1.0, 0.7, 0.5])) is None   # 3x, but 0.04 nats
    assert learning.overfit_note(cfg, _evals([1.0, 0.8, 2.0], [1.0, 0.7, 0.9])) is None      # both rose: not this
    assert learning.overfit_note(cfg, _evals([1.0, float("nan"), 2.0], [1.0, 0.7, 0.5])) is not None  # NaN skipped
    assert learning.overfit_note(cfg, _evals([1.0, 0.8, float("nan")], [1.0, 0.7, 0.5])) is None


def test_it_reads_rank_0s_stream_whatever_arrived_last():
    """LTFB: each trainer evaluates its own model; the note reads trainer 0's (rank 0's, whose
    lowest loss params_best keeps), whichever trainer's evaluation arrived last (on Dask, a
    race: the note followed the last row's trainer)."""
    a = _evals([1.0, 0.5, 2.0], [1.0, 0.5, 0.1], worker="trainer-0")   # overfits
    b = _evals([1.0, 0.6, 0.55], [1.0, 0.5, 0.4], worker="trainer-1")  # does not
    for frames in ((a, b), (b, a)):
        evals = pd.concat(frames).sort_values("step", kind="stable").reset_index(drop=True)
        assert learning.overfit_note({"dataset": "digits"}, evals).startswith(
            "overfitting: the test loss rose from its best, 0.5 after 20 steps, to 2 after 30")
    assert learning.overfit_note({"dataset": "digits"}, b) is None


def test_a_stopped_and_resumed_run_keeps_the_best_from_before_its_checkpoint(random_labels, tmp_path, monkeypatch):
    """The best parameters ride in rank 0's checkpoint state: a run stopped after its best
    evaluation and resumed ends with the same best parameters, bitwise, as the run never
    stopped (the synchronous family resumes bitwise)."""
    import time

    from workbench.maths.models import MLP
    path, whole, _ = random_labels
    from workbench import checkpoint as ckpt
    out = tmp_path / "stopped"
    cfg = wb.RunConfig(dataset=str(path), out=str(out), checkpoint_every=50, **FLAGS)
    plain = MLP.loss_and_grad

    def paced(self, *args, **kwargs):   # 600 steps in about 1.2 s, not 0.1: the stop lands before the run's end
        time.sleep(0.002)               # (a stop after the last step leaves a run completed), maths unchanged
        return plain(self, *args, **kwargs)
    monkeypatch.setattr(MLP, "loss_and_grad", paced)
    stopped = wb.run(cfg, cluster="threads", progress=False, should_stop=lambda: len(ckpt.listed(out)) >= 2)
    monkeypatch.setattr(MLP, "loss_and_grad", plain)
    assert stopped.status == "stopped" and stopped.summary["steps"] > whole.summary["params_best"]["steps"]
    resumed = wb.resume(out, cluster="threads", progress=False)
    assert resumed.status == "completed" and resumed.summary["resumed_from"]["step"] > whole.summary["params_best"]["steps"]
    assert resumed.summary["params_best"] == whole.summary["params_best"]
    assert np.array_equal(resumed.best_params, whole.best_params) and np.array_equal(resumed.params, whole.params)
    assert "its parameters then are kept" in resumed.summary["overfit_note"]


@pytest.mark.parametrize("kw", [dict(algorithm="sync_sgd", cpus=2, simulate=True),          # lockstep
                                dict(algorithm="async_sgd", cpus=4, simulate=True),         # the server's replay
                                dict(algorithm="easgd", cpus=2, simulate=True, tau=2),
                                dict(algorithm="ltfb", cpus=2, trainers=2, simulate=True),  # a trainer's own
                                dict(algorithm="diloco", cpus=2, tau=4, cluster=True),      # Dask worker processes
                                dict(algorithm="async_sgd", cpus=2, cluster=True)])
def test_every_path_keeps_the_parameters_its_best_evaluation_scored(kw, request):
    """Oracle: the evaluator, run again on the kept parameters, gives the test loss recorded
    for them, on each path an evaluation is made on (the per-worker loop, the simulator's
    lockstep and server replay, LTFB's trainers, Dask workers)."""
    from workbench.maths.metrics import Evaluator
    from workbench.problem import Problem
    kw = dict(kw)
    cluster = request.getfixturevalue("client") if kw.pop("cluster", False) else None
    cfg = wb.RunConfig(epochs=3, seed=0, **kw)
    result = wb.run(cfg, cluster=cluster, progress=False)
    problem = Problem.from_config(cfg)
    kept = result.summary["params_best"]
    assert kept is not None and 0 < kept["steps"] <= result.summary["total_steps_planned"]
    # (rel 1e-6: where every rank scores a share of the test set, the shares' sums meet in a float32
    # allreduce, about 1e-7 from one float64 pass over the whole set; elsewhere it is the same pass)
    assert Evaluator(problem.model, problem.data)(result.best_params)["test_loss"] == pytest.approx(kept["test_loss"],
                                                                                                 rel=1e-6)


def test_the_report_figure_stars_the_lowest_test_loss_of_a_run_that_overfit(random_labels):
    pytest.importorskip("plotly")
    from workbench.ui.figures import progress_figure
    _, result, _ = random_labels
    fig = progress_figure(result, "epoch")
    star, = [t for t in fig.data if t.name and t.name.endswith(": lowest test loss")]
    best = result.evals.loc[result.evals["test_loss"].idxmin()]
    assert (star.x[0], star.y[0]) == (best["epoch"], pytest.approx(result.summary["best_test_loss"]))
    learns = wb.run(wb.RunConfig(algorithm="sgd", epochs=2, seed=0), cluster="threads", progress=False)
    assert not [t for t in progress_figure(learns, "epoch").data if t.name and t.name.endswith("lowest test loss")]


def test_a_sweeps_row_says_it_as_the_cli_and_the_report_do(random_labels):
    from workbench.analysis.sweep import scaling_row
    _, result, _ = random_labels
    row = scaling_row(result, 1, "strong", None)
    assert result.summary["overfit_note"] in row["run_note"] and result.summary["learning_note"] in row["run_note"]
    assert row["run_note"] == "; ".join(n for n in wb.measure.notes(result.summary)
                                        if n != result.summary.get("machine_note"))
