"""`sgd`, the one-worker reference every parallel run is checked against, against a plain loop.

`sgd` is an ordinary algorithm (algorithms/reference.py) on the engine's loop; the oracle
here is written apart from the package: float64, no workspace, no loop, no records."""
import numpy as np

from workbench import measure
from workbench.config import RunConfig
from workbench.data import global_batch
from workbench.execution.engine import run_threads
from workbench.problem import Problem


def plain_loop(cfg: RunConfig, steps: int) -> np.ndarray:
    """An independent, deliberately naive SGD/momentum loop (the oracle)."""
    data, model = Problem.from_config(cfg).data, Problem.from_config(cfg).new_model()
    x = model.init(cfg.seed).astype(np.float64)
    v = np.zeros_like(x)
    for t in range(steps):
        idx = global_batch(data.n_train, cfg.batch_size, cfg.seed, t)
        _, g = model.loss_and_grad(x.astype(np.float32), data.X_train[idx], data.y_train[idx])
        g = g.astype(np.float64) + cfg.weight_decay * x
        v = cfg.momentum * v + g
        step = g + cfg.momentum * v if cfg.nesterov else v
        x = x - cfg.lr * step
    return x


def test_reference_reaches_95_percent_on_digits_in_5_epochs():
    result = run_threads(RunConfig(algorithm="sgd", dataset="digits", model="mlp", epochs=5))
    assert result.status == "completed"
    assert result.summary["final_test_accuracy"] >= 0.95
    assert len(result.evals) == 5  # once per epoch by default


def test_matches_a_plain_loop_with_momentum_nesterov_and_weight_decay():
    for changes in ({"momentum": 0.0}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}):
        cfg = RunConfig(steps=20, batch_size=64, lr=0.05, **changes)
        result = run_threads(cfg)
        np.testing.assert_allclose(result.params, plain_loop(cfg, 20), rtol=0, atol=2e-5)


def test_records_have_the_schedule_lr_and_sample_counts():
    cfg = RunConfig(steps=30, batch_size=64, lr=0.1, lr_scaling="linear", base_batch=32,
                    warmup="gradual", warmup_epochs=0.5)
    result = run_threads(cfg)
    lrs = result.steps["lr"].to_numpy()
    assert lrs[0] == 0.1 and np.isclose(lrs[-1], 0.2)          # warmup from lr to the scaled lr
    assert np.all(np.diff(lrs) >= -1e-12)
    assert (result.steps["samples"] == 64).all()


def test_absurd_lr_diverges_with_step_and_lr_kept():
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_threads(RunConfig(steps=200, lr=1e6, momentum=0.0))
    assert result.status == "diverged"
    event = [e for e in result.events if e["event"] == "diverged"][0]
    assert "step" in event["message"] and "lr 1e+06" in event["message"]
    # NumPy's overflow on the way there: in the summary and its notes, not on stderr
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    diverged_at = int(event["message"].split("at step ")[1].split()[0])
    numerics = result.summary["numerics"]
    assert "overflow" in numerics and 0 < numerics["overflow"] <= diverged_at
    assert any(n.startswith("floating-point overflow from step") for n in measure.notes(result.summary))


def test_stop_request_keeps_records():
    # Stop once the first live records have arrived and the monitor has asked ten times. The
    # plan (2,000 epochs, 88,000 steps, about a minute here) is far longer than the stop takes,
    # so a fast idle machine cannot finish it first (50 epochs once did, on CI).
    seen = {"records": 0, "calls": 0}

    def on_record(batch):
        seen["records"] += 1

    def should_stop():
        seen["calls"] += 1
        return seen["records"] > 0 and seen["calls"] > 10

    result = run_threads(RunConfig(epochs=2000), on_record=on_record, should_stop=should_stop)
    assert result.status == "stopped"
    planned = result.summary["total_steps_planned"]
    assert 0 < len(result.steps) < planned                   # stopped early, every step so far kept
    assert result.steps["step"].tolist() == list(range(len(result.steps)))


def test_same_seed_same_result_and_inputs_untouched():
    cfg = RunConfig(steps=15)
    before = cfg.to_dict()
    a, b = run_threads(cfg), run_threads(cfg)
    assert np.array_equal(a.params, b.params)
    assert cfg.to_dict() == before


def test_sgd_is_an_ordinary_algorithm_on_one_worker_of_this_process():
    from workbench.algorithms import REGISTRY
    from workbench.api import run
    spec = REGISTRY["sgd"]
    assert spec.workers == 1 and spec.in_process and spec.cls.spec is spec
    cfg = RunConfig(algorithm="sgd", cpus=3, steps=5, batch_size=32, lr=0.05)   # cpus say 3: sgd is one worker
    assert cfg.n_workers == 1
    result = run(cfg, cluster="tcp://127.0.0.1:1", progress=False)             # no cluster is asked for
    assert result.status == "completed" and len(result.summary["workers"]) == 1
    np.testing.assert_allclose(result.params, plain_loop(cfg, 5), rtol=0, atol=2e-5)
    assert set(result.steps.worker) == {0} and (result.steps["comm_s"] == 0).all()
