"""One test per failure scenario (a lost worker in a synchronous run, divergence, a stop),
each run on the thread transport and on a real Dask cluster: the engine's one run path
and one status rule must give the same status, the same events and the same saved
records on both."""
import os
import signal
import threading
import time

import pandas as pd
import pytest
from conftest import await_replacement

from workbench.execution.engine import run, run_threads
from workbench.results import RunResult

# summary keys only one transport has: where its workers ran and how they were linked
TRANSPORT_KEYS = {"run_id", "comm", "server", "setup_s", "startup_s", "blas_threads"}
STEP_COLUMNS = ["step", "worker", "loss", "lr", "samples"]


def saved(result, path):
    """Save, load back, and check nothing was lost on the way."""
    back = RunResult.load(result.save(path))
    assert back.status == result.status
    assert len(back.steps) == len(result.steps) > 0
    assert [e["event"] for e in back.events] == [e["event"] for e in result.events]
    return back


def event_names(result):
    return sorted({e["event"] for e in result.events})


def same_summary_keys(a, b):
    assert set(a.summary) - TRANSPORT_KEYS == set(b.summary) - TRANSPORT_KEYS


def steps_of(result):
    return result.steps[STEP_COLUMNS].sort_values(["worker", "step"]).reset_index(drop=True)


# ------------------------------------------------------------------------------ divergence
@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sync_sgd", "sync_easgd"])
def test_divergence_ends_the_same_on_threads_and_on_dask(client, tmp_path, algorithm, tiny):
    cfg = tiny(algorithm=algorithm, cpus=2, steps=300, momentum=0.0, tau=2, lr=1e5)
    threads, dask = run_threads(cfg), run(cfg, cluster=client)
    for result in (threads, dask):
        assert result.status == "diverged"
        assert result.steps["step"].max() + 1 < 300
    diverged = [[e["message"] for e in r.events if e["event"] == "diverged"] for r in (threads, dask)]
    assert diverged[0] == diverged[1] and "at step" in diverged[0][0]
    assert event_names(threads) == event_names(dask)
    # synchronous and deterministic: the same steps, bitwise, whoever carried the sums
    pd.testing.assert_frame_equal(steps_of(threads), steps_of(dask))
    same_summary_keys(threads, dask)
    pd.testing.assert_frame_equal(steps_of(saved(threads, tmp_path / "t")), steps_of(saved(dask, tmp_path / "d")))


# ------------------------------------------------------------------------------ stop
def _stop_after(step):
    """should_stop and on_record: stop once worker 0 has reported `step`."""
    seen = threading.Event()

    def on_record(records):
        if any(r["kind"] == "step" and r["worker"] == 0 and r["step"] >= step for r in records):
            seen.set()
    return seen.is_set, on_record


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sync_sgd", "async_sgd"])
def test_a_stop_ends_the_same_on_threads_and_on_dask(client, tmp_path, algorithm, tiny):
    cfg = tiny(algorithm=algorithm, cpus=2, epochs=2000)
    results = []
    for where in ("threads", client):
        should_stop, on_record = _stop_after(20)
        t0 = time.time()
        results.append(run(cfg, cluster=where, on_record=on_record, should_stop=should_stop))
        assert time.time() - t0 < 60
    threads, dask = results
    for result in results:
        assert result.status == "stopped"
        assert 20 <= result.steps["step"].max() < result.summary["total_steps_planned"] - 1
        assert "stop_requested" in event_names(result)
    assert event_names(threads) == event_names(dask)
    same_summary_keys(threads, dask)
    saved(threads, tmp_path / "t")
    saved(dask, tmp_path / "d")


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sync_sgd", "diloco"])
def test_a_stop_asked_while_the_run_starts_ends_it_at_its_first_exchange(client, algorithm, tiny):
    """Stop asked before the loops have started (a should_stop that says yes at once; Ctrl-C
    in the first seconds): a loop waiting at the shared-memory start barrier went on to its
    first step without marking itself through, so its peer waited in the barrier's second
    phase until the client cancelled both (after 12 s: "allreduce aborted: a peer is gone",
    no step, no checkpoint, a worker process killed). The stop now lands at the first
    exchange, as any stop of a synchronous run does: every worker ran the same steps."""
    cfg = tiny(algorithm=algorithm, cpus=2, epochs=2000, tau=4)
    result = run(cfg, cluster=client, should_stop=lambda: True)
    assert result.status == "stopped", result.events
    assert not {"aborted", "worker_lost"} & set(event_names(result)), result.events
    per_worker = result.steps.groupby("worker")["step"].max()
    assert sorted(per_worker.index) == [0, 1] and per_worker.nunique() == 1, per_worker
    assert per_worker.iloc[0] < (4 if algorithm == "diloco" else 1)   # its first exchange


# ------------------------------------------------------------------------------ a lost worker
def _check_lost(result):
    assert result.status == "failed"
    lost = [e for e in result.events if e["event"] == "worker_lost"]
    assert len(lost) == 1 and str(lost[0]["worker"]) == "1" and "worker 1 (" in lost[0]["message"]
    assert set(result.summary["lost_workers"]) == {"1"}
    assert result.why.startswith("worker 1 (") and result.why == lost[0]["message"].splitlines()[0], result.why
    survivor = result.steps[result.steps.worker == 0]
    assert len(survivor) > 0 and survivor["step"].max() + 1 < result.summary["total_steps_planned"]


def test_a_lost_worker_fails_a_sync_run_on_threads(tmp_path, tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=2, epochs=2000)
    result = run_threads(cfg, fail={1: 30})
    _check_lost(result)
    w1 = result.steps[result.steps.worker == 1]
    assert w1.empty or w1["step"].max() < 30           # it vanished before reporting step 30
    assert "aborted" in event_names(result)              # the survivor's collective gave up
    saved(result, tmp_path / "run")


@pytest.mark.cluster
@pytest.mark.slow
def test_a_lost_worker_fails_a_sync_run_the_same_on_dask(client, tmp_path, tiny):
    from workbench.execution.cluster import workers_of
    cfg = tiny(algorithm="sync_sgd", cpus=2, epochs=2000)
    threads = run_threads(cfg, fail={1: 30})
    victim = workers_of(client)[1]
    progress = threading.Event()

    def on_record(records):
        if any(r["kind"] == "step" and r["worker"] == 1 and r["step"] >= 30 for r in records):
            progress.set()
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("result", run(cfg, cluster=client, on_record=on_record)))
    t.start()
    assert progress.wait(60)
    os.kill(victim["pid"], signal.SIGKILL)
    t.join(240)
    await_replacement(client, 2, gone=victim["address"])   # the nanny brings a fresh worker back
    dask = box["result"]
    for result in (threads, dask):
        _check_lost(result)
    assert event_names(threads) == event_names(dask)
    same_summary_keys(threads, dask)
    saved(dask, tmp_path / "run")


@pytest.mark.parametrize("algorithm", ["async_sgd", "easgd"])
def test_a_lost_worker_of_an_async_run_on_threads_leaves_the_others_going(tmp_path, algorithm, tiny):
    """The rule test_engine checks on Dask (test_dask_async_goes_on_without_a_lost_worker),
    here on threads: the survivor finishes the run, the lost worker is recorded."""
    cfg = tiny(algorithm=algorithm, cpus=2, steps=200)
    result = run_threads(cfg, fail={1: 30})
    assert result.status == "completed"
    lost = [e for e in result.events if e["event"] == "worker_lost"]
    assert len(lost) == 1 and str(lost[0]["worker"]) == "1"
    assert result.steps[result.steps.worker == 0]["step"].max() + 1 == result.summary["total_steps_planned"]
    w1 = result.steps[result.steps.worker == 1]
    assert w1.empty or w1["step"].max() < 30           # what it had not sent yet went with it
    saved(result, tmp_path / "run")


# ------------------------------------------------------------------------------ what a failed run keeps
def _evaluated_as_kept(result, tmp_path):
    """A failed run keeps the parameters of its last evaluation (`params_final` says after how
    many steps): scored again they give that evaluation's test loss, and they are saved, so
    predict answers with them."""
    import numpy as np

    import workbench as wb
    from workbench.maths.metrics import Evaluator
    from workbench.problem import Problem
    kept = result.summary["params_final"]
    evals = result.evals
    last = evals[evals["step"] == kept["steps"] - 1].iloc[-1]
    assert kept["steps"] - 1 == evals["step"].max()
    problem = Problem.from_config(wb.RunConfig.from_dict(result.summary["config"]))
    scores = Evaluator(problem.model, problem.data)(result.params)
    assert scores["test_loss"] == pytest.approx(float(last["test_loss"]), rel=1e-6)
    assert result.best_params is not None
    assert any("its parameters (params.npy) are those of its last evaluation" in n for n in wb.measure.notes(result.summary))
    back = saved(result, tmp_path / "run")
    assert np.array_equal(back.params, result.params)
    assert len(wb.predict(back, problem.data.X_test[:5])) == 5


def test_a_lost_worker_leaves_the_parameters_of_the_last_evaluation(tmp_path, tiny):
    """A peer lost: the run had learned for 30 steps and kept no model (no params.npy, no
    params_best.npy: predict refused "a run that failed has none")."""
    result = run_threads(tiny(algorithm="sync_sgd", cpus=2, epochs=2000, eval_every=8), fail={1: 30})
    _check_lost(result)
    _evaluated_as_kept(result, tmp_path)


def test_a_model_that_raises_leaves_the_parameters_of_the_last_evaluation(tmp_path, tiny, monkeypatch):
    """The model's own error at a step (the loop raises; its traceback is an event): the
    exception carries what rank 0 last evaluated to the client."""
    from workbench.maths.models import MLP
    calls = {"n": 0}
    plain = MLP.loss_and_grad

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 45:
            raise RuntimeError("the model broke")
        return plain(self, *args, **kwargs)
    monkeypatch.setattr(MLP, "loss_and_grad", flaky)
    result = run_threads(tiny(algorithm="sgd", epochs=2000, eval_every=8))
    assert result.status == "failed" and "the model broke" in str(result.summary["errors"])
    _evaluated_as_kept(result, tmp_path)


def test_a_resumed_run_that_fails_again_before_evaluating_keeps_what_it_had(tmp_path, tiny, monkeypatch):
    """Resumed from its checkpoint, the run failed again before its next evaluation: the
    directory was rewritten without the params.npy it had (predict: "failed before its first
    evaluation"), and its checkpoint went unmentioned (no `resume:` line)."""
    import numpy as np

    import workbench as wb
    from workbench.maths.models import MLP
    calls = {"n": 0, "at": 45}
    plain = MLP.loss_and_grad

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > calls["at"]:
            raise RuntimeError("the model broke")
        return plain(self, *args, **kwargs)
    monkeypatch.setattr(MLP, "loss_and_grad", flaky)
    out = tmp_path / "run"
    first = wb.run(tiny(algorithm="sgd", epochs=2000, eval_every=8, checkpoint_every=10, out=str(out)),
                   cluster="threads", progress=False)
    assert first.status == "failed" and (out / "params.npy").is_file()
    had = np.load(out / "params.npy")
    calls["n"], calls["at"] = 0, 2        # fails again at once
    again = wb.resume(out, cluster="threads", progress=False)
    assert again.status == "failed"
    assert np.array_equal(again.params, had) and np.array_equal(np.load(out / "params.npy"), had)
    assert again.summary["params_final"]["of"].endswith("before it was resumed")
    assert again.summary["checkpoints"]["last_step"] is not None
