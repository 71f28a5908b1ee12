"""Config -> problem (`workbench.problem.Problem`): built once per process, from the dataset's
entry before anything is loaded, and the one builder every room uses (a `cnn` run through each)."""
import numpy as np
import pytest

from workbench import problem as P
from workbench.config import RunConfig
from workbench.data import DATASETS, dataset_shape, load_dataset
from workbench.maths.models import make_model
from workbench.maths.optim import make_plan
from workbench.problem import Problem

# A CNN small enough for a unit test: digits' 1x8x8 images, 2 then 4 channels.
CNN = dict(dataset="digits", model="cnn", hidden=[2], batch_size=32, lr=0.05, seed=1, eval_every=2)


def cnn(**kw) -> RunConfig:
    return RunConfig(**{**CNN, "steps": 3, **kw})


@pytest.mark.parametrize("name, kw", [("digits", {}), ("mnist1d", {"n_samples": 300}),
                                      ("synthetic", {"n_samples": 250, "n_features": 7, "n_classes": 3})])
def test_the_dataset_entry_says_what_loading_returns(name, kw):
    data, shape = load_dataset(name, **kw), dataset_shape(name, **kw)
    assert (data.n_train, data.n_test, data.n_features, data.n_classes, data.image_shape) == (
        shape.n_train, shape.n_test, shape.n_features, shape.n_classes, shape.image_shape)


def test_the_real_datasets_entries_hold_their_official_splits():
    assert dataset_shape("mnist").n_train == 60000 and dataset_shape("mnist").n_test == 10000
    assert dataset_shape("cifar10").image_shape == (3, 32, 32) and dataset_shape("cifar10").n_train == 50000
    assert [n for n, d in DATASETS.items() if d.download] == ["mnist", "fashion_mnist", "cifar10"]
    assert [n for n, d in DATASETS.items() if d.generated] == ["mnist1d", "synthetic", "markov_text"]


def test_a_problem_is_what_the_pieces_build_by_hand():
    cfg = cnn(steps=None, epochs=2)
    p = Problem.from_config(cfg)
    data = load_dataset("digits")
    model = make_model("cnn", data.n_features, data.n_classes, hidden=(2,), image_shape=data.image_shape)
    assert p.data is data                                           # data's own cache, not a second copy
    assert p.model.describe() == model.describe()
    np.testing.assert_array_equal(p.params0, model.init(cfg.seed))
    assert p.plan.total_steps == make_plan(cfg, data.n_train).total_steps == 2 * (1438 // 32)
    with pytest.raises(ValueError, match="read-only"):
        p.params0[0] = 1.0                                          # shared: copy it to train
    mine = p.initial_params()
    mine[0] += 1.0
    assert mine.flags.writeable and p.params0[0] != mine[0]
    assert p.new_model() is not p.new_model()                       # each worker its own work buffers


def test_a_problem_is_built_once_per_process_and_out_is_not_part_of_it():
    Problem.clear_cache()
    before = P.build_counts()
    a = Problem.from_config(cnn(seed=11))
    assert Problem.from_config(cnn(seed=11, out="/tmp/somewhere")) is a
    assert Problem.from_config(cnn(seed=12)) is not a
    a.plan, a.model, a.params0, a.plan, a.model                     # noqa: B018 (parts on first use, then kept)
    after = P.build_counts()
    assert {k: after[k] - before[k] for k in after} == {"problem": 2, "data": 0, "model": 1, "plan": 1,
                                                        "params0": 1}


def test_the_model_and_plan_need_no_data():
    Problem.clear_cache()
    p = Problem.from_config(RunConfig(dataset="mnist", model="cnn", steps=5))   # not downloaded here
    assert p.model.image_shape == (1, 28, 28) and p.plan.total_steps == 5
    assert "data" not in vars(p)


def test_a_dataset_disagreeing_with_its_entry_is_refused(monkeypatch):
    from workbench.data import DataError, DatasetInfo
    monkeypatch.setitem(DATASETS, "digits", DatasetInfo("wrong", n_examples=1797, n_features=65))
    Problem.clear_cache()
    with pytest.raises(DataError, match="^dataset: data matching its DATASETS entry"):
        Problem.from_config(cnn(model="mlp")).load()
    Problem.clear_cache()


# ------------------------------------------------------------------ a cnn through each former copy
def test_cnn_through_the_engine_on_threads_and_the_reference():
    from workbench.execution.engine import run_threads
    ref = run_threads(cnn())
    got = run_threads(cnn(algorithm="sync_sgd", cpus=2))
    assert ref.status == got.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=1e-4, atol=1e-6)   # float32 sums in two orders


def test_cnn_through_ltfb():
    from workbench.execution.engine import run_threads
    res = run_threads(cnn(algorithm="ltfb", cpus=2, trainers=2, round_size=2, steps=4, tournament_size=64))
    assert res.status == "completed" and len(res.tournaments) >= 1


def test_cnn_through_preflight():
    from workbench.execution.preflight import memory_estimate, preflight
    assert preflight(cnn(algorithm="sync_sgd", cpus=2)) == []
    est = memory_estimate(cnn(algorithm="sync_sgd", cpus=2))
    assert est["n_params"] == Problem.from_config(cnn()).model.n_params


def test_cnn_through_the_simulator_and_its_check_against_the_cost_model():
    from workbench.sim.run import run_simulated
    from workbench.sim.validate import simulator_vs_cost_model
    assert run_simulated(cnn(algorithm="sync_sgd", cpus=2, simulate=True, cpu_device="power8")).status == "completed"
    rows = simulator_vs_cost_model(cases=(("sync_sgd", 2, {}),), model="cnn")
    assert len(rows) == 1 and np.isfinite(rows["difference"].iloc[0])


def test_cnn_through_the_benchmarks():
    from workbench.analysis.costmodel import n_params_of
    from workbench.bench.simulated import maths_seconds
    from workbench.bench.throughput import compute_only
    got = compute_only(cnn(algorithm="sync_sgd", cpus=2).to_dict(), seconds=0.2)
    assert got["samples"] > 0 and got["seconds"] > 0
    wall, cpu = maths_seconds(cnn(steps=2), slices=2)
    assert wall > 0 and cpu > 0

    class Result:   # a saved run without its parameter count: n_params_of builds the model (no data)
        summary = {"config": cnn().to_dict()}
        params = None
    assert n_params_of(Result()) == Problem.from_config(cnn()).model.n_params


@pytest.mark.gpu
def test_cnn_through_the_gpu_check_plain_loop():
    from workbench.bench.gpucheck import plain_cupy_loop
    assert plain_cupy_loop(cnn(batch_size=64), seconds=0.5) > 0


def test_the_cli_checks_a_run_once_and_prints_each_warning_once(tmp_path, monkeypatch, capsys):
    import warnings

    from workbench.apps import cli
    from workbench.execution import preflight as PF
    calls = []
    real = PF.preflight

    def counted(config, overwrite=False):
        calls.append(config.algorithm)
        return real(config, overwrite=overwrite)
    monkeypatch.setattr("workbench.api.preflight", counted)   # first: importing api here binds the real one
    monkeypatch.setattr(PF, "preflight", counted)
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # api.run must not warn what the CLI already printed
        cli.main(["run", "--algorithm", "sgd", "--dataset", "digits", "--batch-size", "256", "--steps", "2",
                  "--lr", "5", "--lr-scaling", "linear", "--base-batch", "32", "--out", str(out), "--no-progress"])
    assert calls == ["sgd"]
    err = capsys.readouterr().err
    summary = __import__("json").loads((out / "summary.json").read_text())
    assert summary["warnings"] and err.count("warning: ") == len(summary["warnings"])
