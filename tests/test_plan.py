"""One plan per run: the planned step count every consumer shows is the count a completed run takes."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench import RunConfig
from workbench.data import load_dataset
from workbench.execution.preflight import run_warnings
from workbench.problem import run_plan
from workbench.ui.dashboard import Dashboard

# A tiny run of each algorithm: 2 workers (LTFB: 2 trainers of one), digits, one epoch.
EXTRA = {"ltfb": {"trainers": 2, "round_size": 5, "tournament_size": 100}}


def _config(algorithm: str, **kw) -> RunConfig:
    return RunConfig(algorithm=algorithm, dataset="digits", model="softmax", cpus=2, batch_size=64,
                     epochs=1, lr=0.05, seed=0, **{**EXTRA.get(algorithm, {}), **kw})


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", list(wb.ALGORITHMS))
def test_a_completed_run_takes_the_planned_steps(algorithm):
    cfg = _config(algorithm)
    n_train = load_dataset("digits").n_train
    planned = run_plan(cfg, n_train).total_steps
    result = wb.run(cfg, cluster="threads", progress=False)
    s = result.summary
    assert s["status"] == "completed"
    assert s["steps"] == planned == s["total_steps_planned"], (s["steps"], planned)
    assert int(result.steps["step"].max()) + 1 == planned
    # the dashboard counts to the same number
    d = Dashboard(cluster="threads", config=cfg)
    assert d.status_text.startswith(f"ready: {algorithm} on digits, {planned} steps"), d.status_text


def test_ltfb_plans_over_a_trainers_data_and_batch():
    n_train = load_dataset("digits").n_train           # 1438
    cfg = _config("ltfb", trainers=2, tournament_size=100)
    plan = run_plan(cfg, n_train)
    assert (plan.n_train, plan.batch_size) == (1438 // 2 - 100, 32)
    assert plan.total_steps == 19                        # 619 // 32 full batches
    sync = run_plan(_config("sync_sgd"), n_train)
    assert sync.total_steps == 22                         # 1438 // 64: what LTFB used to be told
    # preflight's warning names the steps the run will take
    out = run_warnings(cfg.replace(round_size=50), plan.total_steps)
    assert any("19 steps" in w for w in out), out


def test_preflight_warns_with_the_planned_count():
    from workbench.execution.preflight import preflight
    out = preflight(_config("ltfb", round_size=30))
    assert any("19 steps" in w for w in out), out
