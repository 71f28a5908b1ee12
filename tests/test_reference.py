"""The single-process reference trainer: the oracle every parallel run is checked against."""
import numpy as np

from workbench.algorithms.reference import train_reference
from workbench.config import RunConfig
from workbench.data import global_batch
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
    result = train_reference(RunConfig(algorithm="sgd", dataset="digits", model="mlp", epochs=5))
    assert result.status == "completed"
    assert result.summary["final_test_accuracy"] >= 0.95
    assert len(result.evals) == 5  # once per epoch by default


def test_matches_a_plain_loop_with_momentum_nesterov_and_weight_decay():
    for changes in ({"momentum": 0.0}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}):
        cfg = RunConfig(steps=20, batch_size=64, lr=0.05, **changes)
        result = train_reference(cfg)
        np.testing.assert_allclose(result.params, plain_loop(cfg, 20), rtol=0, atol=2e-5)


def test_records_have_the_schedule_lr_and_sample_counts():
    cfg = RunConfig(steps=30, batch_size=64, lr=0.1, lr_scaling="linear", base_batch=32,
                    warmup="gradual", warmup_epochs=0.5)
    result = train_reference(cfg)
    lrs = result.steps["lr"].to_numpy()
    assert lrs[0] == 0.1 and np.isclose(lrs[-1], 0.2)          # warmup from lr to the scaled lr
    assert np.all(np.diff(lrs) >= -1e-12)
    assert (result.steps["samples"] == 64).all()


def test_absurd_lr_diverges_with_step_and_lr_kept():
    result = train_reference(RunConfig(steps=200, lr=1e6, momentum=0.0))
    assert result.status == "diverged"
    event = [e for e in result.events if e["event"] == "diverged"][0]
    assert "step" in event["message"] and "lr 1e+06" in event["message"]


def test_stop_request_keeps_records():
    calls = {"n": 0}

    def should_stop():
        calls["n"] += 1
        return calls["n"] > 10

    result = train_reference(RunConfig(epochs=50), should_stop=should_stop)
    assert result.status == "stopped"
    assert len(result.steps) == 10


def test_same_seed_same_result_and_inputs_untouched():
    cfg = RunConfig(steps=15)
    before = cfg.to_dict()
    a, b = train_reference(cfg), train_reference(cfg)
    assert np.array_equal(a.params, b.params)
    assert cfg.to_dict() == before
