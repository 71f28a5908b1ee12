"""`early_stop`: a run ends once its test loss has not gone below its best for N evaluations
in a row. The oracle is the same run without it: its evaluations, read by hand, say where
the decision falls, and the stopped run must be that run's prefix. Then every path that
stops on it (threads, a real Dask cluster, the simulator's lockstep and per-worker paths,
an asynchronous run) and a resume that crosses the decision."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from workbench import checkpoint as ckpt
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import execute, run_threads
from workbench.measure import notes
from workbench.sim.transport import SimTransport

sys.path.insert(0, str(Path(__file__).parent))
from test_resume import killed_after, same_records  # noqa: E402
from test_sim_lockstep import _same  # noqa: E402

# digits, batch 32, lr 0.1, evaluated every 20 steps: the test loss is lowest after 280 steps
# and does not go below it at 300, 320 and 340 (checked against the full run below)
BASE = dict(dataset="digits", model="mlp", batch_size=32, lr=0.1, epochs=30, eval_every=20, seed=0)


def decision(evals: pd.DataFrame, patience: int, column: str = "test_loss") -> tuple[int, int, float] | None:
    """Where `early_stop patience` decides, read off a full run's evaluations by hand:
    (steps at the deciding evaluation, steps at the best, the best loss of `column`)."""
    best, best_at, since = None, None, 0
    for steps, loss in zip(evals["step"] + 1, evals[column]):
        if best is None or loss < best:
            best, best_at, since = loss, steps, 0
        else:
            since += 1
            if since >= patience:
                return int(steps), int(best_at), float(best)
    return None


@pytest.fixture(scope="module")
def full():
    """sync_sgd on 2 workers (threads) through the whole plan: the oracle."""
    return run_threads(RunConfig(algorithm="sync_sgd", cpus=2, **BASE))


def test_a_synchronous_run_stops_after_the_evaluation_that_exhausts_its_patience(full):
    at, best_at, best = decision(full.evals, 3)
    assert best_at < at < full.summary["total_steps_planned"]
    got = run_threads(RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, **BASE))
    assert got.status == "completed"
    s = got.summary
    assert s["early_stopped"] == {"evaluated_at": at, "patience": 3, "best_steps": best_at, "on": "test",
                                  "best_loss": best, "synchronous": True}
    # every worker ran the step the decision rode on, and no more
    assert got.steps.groupby("worker")["step"].max().tolist() == [at, at] and s["steps"] == at + 1
    # a prefix of the full run: the same evaluations up to the decision, the same steps' losses
    ev = got.evals.sort_values("step").reset_index(drop=True)
    pd.testing.assert_frame_equal(ev[["step", "test_loss", "test_accuracy"]],
                                  full.evals[full.evals["step"] < at][["step", "test_loss", "test_accuracy"]]
                                  .reset_index(drop=True))
    key = ["worker", "step"]
    a = got.steps.sort_values(key)["loss"].to_numpy()
    b = full.steps[full.steps["step"] <= at].sort_values(key)["loss"].to_numpy()
    assert np.array_equal(a, b)
    assert s["best_test_loss"] == best and s["best_test_loss_step"] == best_at
    said = [n for n in notes(s) if n.startswith("early_stop")]
    assert len(said) == 1 and f"stopped after {at + 1:,} of its {s['total_steps_planned']:,}" in said[0]
    assert any(e["event"] == "early_stop" for e in got.events)


def test_patience_longer_than_the_plan_changes_nothing(full):
    got = run_threads(RunConfig(algorithm="sync_sgd", cpus=2, early_stop=1000, **BASE))
    assert got.status == "completed" and "early_stopped" not in got.summary
    assert np.array_equal(got.params, full.params)


def test_a_stop_asked_by_the_user_is_still_a_stop(full):
    # asked from the start, long before the decision (a stop asked on the first record could
    # come after it: the whole run takes a few of the loops' flush periods on threads)
    got = run_threads(RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, **BASE), should_stop=lambda: True)
    assert got.status == "stopped" and "early_stopped" not in got.summary
    assert got.summary["steps"] < decision(full.evals, 3)[0]


@pytest.mark.cluster
def test_on_a_real_dask_cluster_the_run_stops_at_the_same_step(client, full):
    at, _, _ = decision(full.evals, 3)
    got = wb.run(RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, **BASE), cluster=client, progress=False)
    assert got.status == "completed" and got.summary["early_stopped"]["evaluated_at"] == at
    assert got.steps.groupby("worker")["step"].max().tolist() == [at, at]


@pytest.mark.parametrize("extra", [dict(algorithm="sync_sgd", cpus=4), dict(algorithm="hogwild_sgd", cpus=4),
                                   dict(algorithm="local_sgd", cpus=3, tau=4)],
                         ids=["replicas", "shared", "per-worker"])
def test_the_simulators_paths_stop_where_the_per_worker_path_stops(extra):
    config = RunConfig(**{**BASE, "simulate": True, "early_stop": 2, **extra})
    fast, oracle = SimTransport(), SimTransport(lockstep=False)
    a, b = execute(config, fast), execute(config, oracle)
    assert a.status == b.status == "completed"
    assert a.summary["early_stopped"] == b.summary["early_stopped"]
    assert a.summary["steps"] < a.summary["total_steps_planned"]
    _same(a, b)


def test_the_server_replay_leaves_early_stop_to_the_per_worker_path():
    from workbench.sim.lockstep import lockstep_refusal
    tr = SimTransport()
    got = execute(RunConfig(**{**BASE, "algorithm": "async_sgd", "cpus": 2, "simulate": True, "early_stop": 2}), tr)
    assert tr.path == "per worker"
    assert lockstep_refusal(tr.setup, tr.costs) == "early_stop: the replay computes the test loss behind the timing it decides"
    early = got.summary["early_stopped"]
    assert got.status == "completed" and early["synchronous"] is False
    # rank 0 stops at the top of its next step; the others at theirs once it has asked, having stepped
    # on while rank 0 evaluated (virtual time: 10 steps here, of 1,320 planned)
    last = got.steps.groupby("worker")["step"].max()
    assert last[0] == early["evaluated_at"] - 1 and (last < early["evaluated_at"] + 20).all()
    again = execute(RunConfig(**{**BASE, "algorithm": "async_sgd", "cpus": 2, "simulate": True, "early_stop": 2}),
                    SimTransport())
    _same(got, again)                                          # and the simulator says it the same way every time


def test_an_asynchronous_run_on_threads_stops_rank_0_at_once_and_says_how_far_the_others_ran():
    got = run_threads(RunConfig(algorithm="async_sgd", cpus=2, early_stop=3, **BASE))
    early = got.summary["early_stopped"]
    assert got.status == "completed" and early["synchronous"] is False
    assert got.steps.groupby("worker")["step"].max()[0] == early["evaluated_at"] - 1
    said = [n for n in notes(got.summary) if n.startswith("early_stop")]
    assert f"rank 0 asked every worker to stop after {early['evaluated_at']:,} steps" in said[0]


def test_a_resumed_run_counts_the_evaluations_since_its_best_from_before_the_checkpoint(tmp_path, full):
    # the checkpoint at 300 comes one evaluation after the best (280): a resumed run that forgot
    # that evaluation would decide at 360, not 340
    at, _, _ = decision(full.evals, 3)
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, checkpoint_every=100, checkpoint_keep=100, **BASE)
    whole = wb.run(cfg.replace(out=str(tmp_path / "whole")), cluster="threads", progress=False)
    assert whole.summary["early_stopped"]["evaluated_at"] == at == 340
    assert killed_after(tmp_path / "whole", tmp_path / "cut", 3) == 300
    resumed = wb.resume(tmp_path / "cut", cluster="threads", progress=False)
    assert resumed.status == "completed" and resumed.summary["resumed_from"]["step"] == 300
    assert resumed.summary["early_stopped"] == whole.summary["early_stopped"]
    same_records(tmp_path / "whole", tmp_path / "cut", time_too=False)
    assert np.array_equal(whole.params, resumed.params)
    assert np.array_equal(whole.best_params, resumed.best_params)


def test_with_a_validation_set_the_validation_loss_decides_and_the_test_set_judges_the_choice():
    # 20% of digits' training rows held out: never trained on, scored at every evaluation; the
    # best parameters and the stop go by them, and the test loss at that evaluation is reported
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, val_fraction=0.2, **BASE)
    whole = run_threads(cfg)
    assert whole.evals["val_loss"].notna().all() and whole.summary["total_steps_planned"] == 30 * (1151 // 32)
    at, best_at, best = decision(whole.evals, 3, "val_loss")
    got = run_threads(cfg.replace(early_stop=3))
    s = got.summary
    assert s["early_stopped"] == {"evaluated_at": at, "patience": 3, "best_steps": best_at, "on": "validation",
                                  "best_loss": best, "synchronous": True}
    assert s["params_best"] == {"steps": best_at, "val_loss": best} and s["best_val_loss"] == best
    row = whole.evals[whole.evals["step"] == best_at - 1].iloc[0]
    assert s["test_loss_at_best_val"] == row["test_loss"] and s["test_accuracy_at_best_val"] == row["test_accuracy"]
    # the kept parameters are the ones evaluated there: scored again, they give that evaluation's numbers
    from workbench.maths.metrics import Evaluator
    from workbench.problem import Problem
    problem = Problem.from_config(cfg)
    again = Evaluator(problem.model, problem.data)(got.best_params)
    assert again["val_loss"] == pytest.approx(best, rel=1e-6) and again["test_loss"] == pytest.approx(row["test_loss"],
                                                                                                      rel=1e-6)
    assert any("the validation loss had not gone below its best" in n for n in notes(s))


def test_ltfb_refuses_it_naming_the_field():
    with pytest.raises(ConfigError) as err:
        RunConfig(algorithm="ltfb", cpus=2, trainers=2, early_stop=3)
    assert err.value.field == "early_stop" and "each trainer is evaluated on its own" in str(err.value)


def test_a_grids_row_says_what_the_cli_says_of_an_early_stopped_run():
    from workbench.analysis.grid import grid_row
    got = run_threads(RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, **BASE))
    row = grid_row(got, {"lr": 0.1}, 0, None)
    assert row["note"] == next(n for n in notes(got.summary) if n != got.summary.get("machine_note"))
    assert row["note"].startswith("early_stop 3:")


@pytest.mark.parametrize("where", ["threads", pytest.param("dask", marks=pytest.mark.cluster)])
def test_a_stop_asked_on_seeing_the_early_stop_leaves_the_run_completed(tmp_path, full, where, request):
    # the user's stop (a should_stop that says yes once the early_stop event arrives) comes after
    # rank 0's decision: the loops end where that decision put them, so the run completed,
    # early-stopped, and there is nothing to resume (it went on to 361 steps, not 341)
    at, _, _ = decision(full.evals, 3)
    cluster = "threads" if where == "threads" else request.getfixturevalue("client")
    for attempt in range(4):   # the event may reach the client only after the loops ended: then ask again
        seen: list = []
        out = tmp_path / f"run{attempt}"
        cfg = RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, checkpoint_every=100, checkpoint_keep=100,
                        out=str(out), **BASE)
        got = wb.run(cfg, cluster=cluster, progress=False, on_record=seen.extend,
                     should_stop=lambda seen=seen: any(r.get("event") == "early_stop" for r in seen))
        if any(e["event"] == "stop_requested" for e in got.events):   # the user's stop was asked
            break
    else:
        pytest.fail("the stop was never asked")
    assert got.status == "completed" and got.summary["early_stopped"]["evaluated_at"] == at
    assert got.summary["steps"] == at + 1
    # the periodic ones (a Dask client that fell behind may miss one), none of its end
    assert {ckpt.read(f).step for f in ckpt.listed(out)} <= {100, 200, 300}
    with pytest.raises(ConfigError, match="this one did: nothing to continue"):
        wb.resume(out, cluster=cluster, progress=False)


def _stop_asked_after(monkeypatch, closed: int) -> None:
    """The user's stop, asked the moment rank 0 has closed step `closed`: before its next
    step's exchange, where a synchronous run's leader reads it (deterministic on threads)."""
    from workbench.algorithms import base
    close_step = base.close_step

    def closing(ctx, step, *args, **kw):
        ended = close_step(ctx, step, *args, **kw)
        if ctx.rank == 0 and step == closed and ctx.control is not None:
            ctx.control.request_stop("stop requested")
        return ended

    monkeypatch.setattr(base, "close_step", closing)


@pytest.mark.parametrize("extra", [dict(algorithm="sync_sgd", cpus=2), dict(algorithm="cgdp", cpus=2)],
                         ids=["sync_sgd", "cgdp"])
def test_a_stop_asked_on_the_very_step_that_decides_ends_where_the_early_stop_ends(full, monkeypatch, extra):
    """The user's stop reaching the leader in the exchange of the step whose evaluation takes the
    early_stop decision: that step's stop is held back once, so the decision rides on the next
    step as it does without the stop, and the run completed there (it ended one step early,
    after `at` steps, reported completed with nothing left to resume)."""
    at, _, _ = decision(full.evals, 3)          # the evaluation after step at - 1 decides
    _stop_asked_after(monkeypatch, at - 2)
    got = run_threads(RunConfig(early_stop=3, **{**BASE, **extra}))
    assert got.status == "completed" and got.summary["early_stopped"]["evaluated_at"] == at
    assert got.summary["steps"] == at + 1                       # as without the stop: the step after the decision
    assert set(got.steps.groupby("worker")["step"].max()) == {at}


@pytest.mark.parametrize("extra", [dict(algorithm="sync_sgd", cpus=2), dict(algorithm="cgdp", cpus=2)],
                         ids=["sync_sgd", "cgdp"])
def test_a_stop_on_an_evaluation_that_decides_nothing_ends_one_step_later_stopped(monkeypatch, extra):
    """The stop held back on an evaluation step whose evaluation does not decide: the run stops
    after the next step, and is resumable as any stopped run."""
    _stop_asked_after(monkeypatch, 98)          # step 99 is evaluated (every 20 steps)
    got = run_threads(RunConfig(early_stop=3, **{**BASE, **extra}))
    assert got.status == "stopped" and got.summary["steps"] == 101 and "early_stopped" not in got.summary


def test_a_stop_pending_when_a_resumed_run_begins_on_an_evaluation_step_is_held_there(tmp_path, monkeypatch):
    """Rank 0 reads the step under way off its step log, which a resumed run begins empty: the
    step is then the checkpoint's. Resumed at 99, a step evaluation follows (every 20 steps),
    with the user's stop pending at its first question: held there as on the uninterrupted
    run, so step 99 and its evaluation run and the stop ends the run after step 100, stopped
    (read as step 0, it was not held: the run stopped after 99, its evaluation never taken)."""
    from workbench.algorithms import base
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, checkpoint_every=99, checkpoint_keep=100,
                    out=str(tmp_path / "whole"), **{**BASE, "epochs": 3})
    wb.run(cfg, cluster="threads", progress=False)
    assert killed_after(tmp_path / "whole", tmp_path / "cut", 1) == 99
    start = base.WorkerContext.start

    def starting(ctx, *args, **kw):      # the stop, asked once rank 0's resumed loop has begun
        start(ctx, *args, **kw)
        if ctx.rank == 0 and ctx.control is not None:
            ctx.control.request_stop("stop requested")

    monkeypatch.setattr(base.WorkerContext, "start", starting)
    got = wb.resume(tmp_path / "cut", cluster="threads", progress=False)
    assert got.status == "stopped" and got.summary["steps"] == 101 and "early_stopped" not in got.summary
    assert set(got.steps.groupby("worker")["step"].max()) == {100}
    assert 99 in set(got.evals["step"])


def test_with_every_step_evaluated_a_stop_is_held_once_not_at_every_step(monkeypatch):
    """eval_every 1: every step is an evaluation step, so the hold is once a run (a stop held at
    each would wait for an early stop that may never come): asked after step 30, it is held at
    31 and ends the run after 32, stopped."""
    _stop_asked_after(monkeypatch, 30)
    got = run_threads(RunConfig(algorithm="sync_sgd", cpus=2, early_stop=3, **{**BASE, "eval_every": 1}))
    assert got.status == "stopped" and got.summary["steps"] == 33 and "early_stopped" not in got.summary
