"""Runs that learned nothing say so, and defaults that learn (issue 48, item 3).

The oracle is chance itself: 1 / classes of the dataset. A run at chance (LAMB at SGD's lr
0.1) ends `completed` with one sentence in its summary, the CLI's output, the dashboard's
status line and its report; every algorithm with every update rule it takes, picked without
an lr, learns the default dataset (digits) far above chance and carries no such sentence.
"""
from __future__ import annotations

import pytest

import workbench as wb
from workbench import learning
from workbench.config import OPTIMIZER_LR, RunConfig, default_lr, lr_range
from workbench.config.registry import specs
from workbench.execution.engine import run_threads

AT_CHANCE = dict(algorithm="sync_sgd", optimizer="lamb", lr=0.1, cpus=2, hidden=[512, 256], epochs=3, seed=0)


@pytest.fixture(scope="module")
def at_chance(tmp_path_factory):
    out = tmp_path_factory.mktemp("chance") / "run"
    return wb.run(RunConfig(out=str(out), **AT_CHANCE), cluster="threads", progress=False), out


def test_a_run_at_chance_ends_completed_and_says_it_learned_nothing(at_chance):
    result, out = at_chance
    s = result.summary
    assert s["status"] == "completed"
    assert s["final_test_accuracy"] < 0.19                       # 10 classes: chance 0.10
    assert s["learning_note"] == (f"did not learn: test accuracy {s['final_test_accuracy']:.2f}, chance 0.10; "
                                  "lr 0.1 is large for lamb, try 0.001-0.01")
    assert wb.load(out).summary["learning_note"] == s["learning_note"]            # kept in summary.json
    assert s["learning_note"] in (out / "report.html").read_text()                # and the report says it


def test_the_cli_prints_it_as_a_warning(tmp_path, capsys):
    from workbench.apps.cli import main
    flags = ["run", "--algorithm", "sync_sgd", "--optimizer", "lamb", "--lr", "0.1", "--hidden", "512,256",
             "--epochs", "3", "--cpus", "2", "--out", str(tmp_path / "r"), "--no-progress"]
    assert main(flags) == 0                                        # completed: exit 0, with the warning
    out = capsys.readouterr().out
    assert "  warning: did not learn: test accuracy 0.1" in out and "lr 0.1 is large for lamb, try 0.001-0.01" in out


def test_the_dashboard_status_line_says_it(at_chance):
    pytest.importorskip("ipywidgets")
    from workbench.ui.dashboard import Dashboard
    dash = Dashboard(cluster="threads", config=RunConfig(**{**AT_CHANCE, "epochs": 3}))
    assert dash.run(), dash.status_text
    result = dash.wait(300)
    assert result.summary["status"] == "completed" and dash.status_text.startswith("completed:")
    assert result.summary["learning_note"] in dash.status_text


def test_a_rising_loss_is_named_too():
    cfg = {"algorithm": "sync_sgd", "optimizer": "sgd", "lr": 3.0, "dataset": "digits"}
    assert learning.note(cfg, 0.6, 2.3, 1e21).startswith("did not learn: the training loss rose from 2.3 to 1e+21")
    assert learning.note(cfg, 0.6, 2.3, 22.0) is None            # under tenfold, above chance: it learned something
    assert learning.note({**cfg, "dataset": "synthetic", "n_classes": 2}, 0.54, 0.7, 0.69).startswith(
        "did not learn: test accuracy 0.54, chance 0.50")        # 2 classes: near chance is below 0.55


def test_an_unset_lr_is_the_algorithms_and_rules_default_and_a_set_one_stays():
    assert RunConfig(algorithm="sync_sgd", optimizer="lamb").lr == 0.003
    assert RunConfig(algorithm="diloco").lr == 0.01
    assert RunConfig(algorithm="sync_sgd", optimizer="lamb", lr=0.1).lr == 0.1
    cfg = RunConfig(algorithm="sync_sgd")
    # a copy of a config whose lr was left unset takes its own algorithm's and rule's (a grid over
    # algorithms or rules compares each at its default; before, every copy ran at sync_sgd's 0.1,
    # and diloco "did not learn"); a set lr is kept
    assert cfg.replace(optimizer="adamw").lr == 0.003 and cfg.replace(algorithm="diloco").lr == 0.01
    assert cfg.replace(lr=0.05).replace(algorithm="diloco").lr == 0.05
    assert "lr" not in cfg.replace(cpus=1).model_fields_set
    for rule, (lo, mid, hi) in OPTIMIZER_LR.items():
        assert lo <= mid <= hi and default_lr("sync_sgd", rule) == mid
    assert lr_range("diloco", "sgd")[1] < OPTIMIZER_LR["sgd"][1]


def test_the_cli_gives_an_unset_lr_the_rules_default_under_a_config_file(tmp_path):
    from workbench.apps.cli import build_parser, config_from_args
    path = tmp_path / "c.yaml"
    path.write_text("algorithm: sync_sgd\nsteps: 3\n")
    args = build_parser().parse_args(["run", "--config", str(path), "--optimizer", "lamb"])
    assert config_from_args(args).lr == 0.003
    path.write_text("algorithm: sync_sgd\nlr: 0.05\n")
    assert config_from_args(build_parser().parse_args(["run", "--config", str(path), "--optimizer", "lamb"])).lr == 0.05


def test_the_dashboard_moves_lr_with_the_update_rule_and_says_so():
    pytest.importorskip("ipywidgets")
    from workbench.ui.dashboard import Dashboard
    dash = Dashboard(cluster="threads", config=RunConfig(algorithm="sync_sgd", steps=3))
    dash.controls["optimizer"].value = "lamb"
    assert dash.config.lr == 0.003
    assert "lr moved to 0.003, lamb's default for sync_sgd (was 0.1)" in dash.status_text
    dash.controls["lr"].value = 0.002                                # the user's own rate ...
    dash.controls["algorithm"].value = "diloco"
    assert dash.config.lr == 0.002                                   # ... stays when the algorithm changes
    dash.controls["optimizer"].value = "sgd"                         # a new rule always takes its default
    assert dash.config.lr == 0.01 and "lr moved to 0.01, sgd's default for diloco" in dash.status_text


def _takes(algorithm: str) -> list[str]:
    return list(OPTIMIZER_LR) if specs()[algorithm].takes_optimizer else ["sgd"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(specs()))
def test_every_algorithm_and_rule_picked_without_an_lr_learns_the_default_dataset(algorithm):
    # what a new user gets from `--algorithm A --optimizer O` and nothing else (5 epochs of the
    # MLP 128 on digits, 2 workers): far above chance (0.10), and no "did not learn". The slowest
    # here: diloco with lars, 0.70 (its 40-epoch dashboard run: 0.96)
    for rule in _takes(algorithm):
        cfg = RunConfig(algorithm=algorithm, optimizer=rule, cpus=2, seed=0)
        result = wb.run(cfg, cluster="threads", progress=False) if specs()[algorithm].in_process else run_threads(cfg)
        s = result.summary
        assert s["status"] == "completed" and s["learning_note"] is None, (rule, s["learning_note"])
        assert s["final_test_accuracy"] > 0.6, (algorithm, rule, cfg.lr, s["final_test_accuracy"])


def test_ltfbs_best_test_loss_is_trainer_0s_whatever_order_its_evaluations_arrived_in():
    # evals.csv is in arrival order (on Dask, a race between the trainers' leaders): the lowest
    # test loss was read from the stream of whichever trainer's row came last, and could
    # contradict params_best (rank 0's, trainer 0's lowest) in the same summary
    import pandas as pd
    rows = [("trainer-0", 99, 0.30), ("trainer-1", 99, 0.20), ("trainer-0", 199, 0.25), ("trainer-1", 199, 0.10)]
    ev = pd.DataFrame(rows, columns=["worker", "step", "test_loss"])
    for order in (ev, ev.iloc[[1, 0, 2, 3]], ev.iloc[[1, 0, 3, 2]]):
        stream, best = learning.best_test_loss(order.reset_index(drop=True))
        assert set(stream["worker"]) == {"trainer-0"} and (best["step"], best["test_loss"]) == (199, 0.25)
    got = run_threads(RunConfig(algorithm="ltfb", dataset="digits", cpus=2, trainers=2, steps=300, round_size=50,
                                batch_size=32, eval_every=50, seed=0))
    s = got.summary
    assert s["params_best"] == {"steps": s["best_test_loss_step"], "test_loss": s["best_test_loss"]}


def _suggested(note: str) -> list[float]:
    """The lrs a note's `grid --vary lr=...` proposes."""
    return [float(v) for v in note.rsplit("--vary lr=", 1)[1].split(",")]


def test_the_lrs_it_suggests_go_the_way_the_loss_says():
    """The note read which way the loss went: a run that diverged (lr 30 on synthetic, no measured
    range) is told lower lrs and why, one whose lr is too small to move the loss (1e-5) higher ones
    (both were offered a grid centred on the lr that failed: 3, 30, 300 and 1e-6, 1e-5, 1e-4)."""
    base = dict(algorithm="sgd", dataset="synthetic", steps=200, seed=0)
    diverged = wb.run(RunConfig(lr=30.0, **base), cluster="threads", progress=False).summary
    assert diverged["status"] == "diverged"
    said = diverged["learning_note"]
    assert said.startswith("did not learn: it diverged (loss became nan at step") and "the training loss rose" in said
    assert "compare lower ones" in said and all(lr < 30.0 for lr in _suggested(said))
    tiny = wb.run(RunConfig(lr=1e-5, **base), cluster="threads", progress=False).summary
    assert tiny["status"] == "completed"
    said = tiny["learning_note"]
    assert "the training loss barely moved" in said and "compare higher ones" in said
    assert all(lr > 1e-5 for lr in _suggested(said))
    # a loss that fell and still learned nothing says neither, and gets the grid around its lr
    cfg = {"algorithm": "sgd", "optimizer": "sgd", "lr": 0.1, "dataset": "synthetic"}
    assert learning.note(cfg, 0.1, 2.3, 1.2).endswith("compare a few with grid --vary lr=0.01,0.1,1")
    # on digits, an lr inside the measured range whose loss rose tenfold is told lower ones, not "train longer"
    rose = learning.note({**cfg, "dataset": "digits"}, 0.6, 2.3, 40.0, steps=300)
    assert "but the training loss rose" in rose and "train longer" not in rose and _suggested(rose) == [0.033, 0.01, 0.0033]


# ------------------------------------------------------------------ how sure a test accuracy is
@pytest.mark.parametrize("right, n, lo, hi", [
    # Wilson's score interval at z = 1.96, worked by hand to 4 places from
    # (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n):
    (1, 1, 0.2065, 1.0),        # one right answer from one row: 0.21-1.00, not "1.0000 +- 0"
    (0, 10, 0.0, 0.2775),
    (5, 10, 0.2366, 0.7634),
    (50, 100, 0.4038, 0.5962),
])
def test_the_wilson_interval_matches_its_closed_form(right, n, lo, hi):
    got = learning.wilson_interval(right / n, n)
    assert got == pytest.approx((lo, hi), abs=6e-5)     # the table's 4 places (half a unit of the last)
    assert 0.0 <= got[0] <= right / n <= got[1] <= 1.0


def test_a_test_accuracy_from_few_rows_says_how_sure_it_is_in_the_cli_line_and_summary(tmp_path, capsys):
    """A 5-row CSV keeps 1 test row (test_fraction 0.2): its accuracy is 0 or 1, and the run's
    line says what one row allows; an accuracy on 100,000 rows (+-0.0014) says nothing more."""
    from workbench.apps.cli import main
    (tmp_path / "five.csv").write_text("a,b,label\n0.1,0.2,x\n0.9,0.8,y\n0.2,0.1,x\n0.8,0.9,y\n0.15,0.25,x\n")
    code = main(["run", "--algorithm", "sgd", "--dataset", str(tmp_path / "five.csv"), "--batch-size", "2",
                 "--epochs", "3", "--out", str(tmp_path / "r")])
    s = wb.load(tmp_path / "r").summary
    acc = s["final_test_accuracy"]
    assert code == 0 and s["test_rows"] == 1 and acc in (0.0, 1.0)
    lo, hi = s["final_test_accuracy_95"]
    assert (lo, hi) == pytest.approx((0.0, 0.7935) if acc == 0 else (0.2065, 1.0), abs=6e-5)   # as above, by hand
    line = capsys.readouterr().out.splitlines()[0]
    assert f"test accuracy {acc:.4f} (95%: {lo:.2f}-{hi:.2f} from 1 row), " in line
    assert learning.accuracy_interval_text(0.95, 100_000) is None
