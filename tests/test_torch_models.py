"""PyTorch models through the adapter (`maths.torchmodel`): the gradient and a 20-step
trajectory of an nn.Sequential MLP against the built-in MLP on the same parameters (the
layouts mapped: torch's Linear holds W as (out, in), ours as (in, out)), the memory the
adapter shares with the caller's arrays (NumPy, and DLPack with NumPy standing in for
CuPy), runs on threads, Dask and the simulator, and what it refuses.

torch is optional (never a dependency): without it these tests are skipped (CI installs
the test extra only, so they run where torch is installed, as here)."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import run_threads
from workbench.execution.preflight import preflight
from workbench.maths.models import make_model
from workbench.maths.optim import layout_of
from workbench.maths.protocol import as_model
from workbench.maths.torchmodel import TorchModel, to_torch
from workbench.problem import Problem

torch = pytest.importorskip("torch")

F, H, K = 64, 32, 10


def torch_mlp(n_features: int = F, n_classes: int = K, hidden: int = H):
    """The factory a user writes: a module, cross-entropy by default."""
    return torch.nn.Sequential(torch.nn.Linear(n_features, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, n_classes))


def ours_to_torch(model, p: np.ndarray) -> np.ndarray:
    """The built-in MLP's vector in torch's layout: each W transposed, (in, out) -> (out, in)."""
    v = model.views(p)
    return np.concatenate([v["fc1.W"].T.ravel(), v["fc1.b"], v["fc2.W"].T.ravel(), v["fc2.b"]])


def torch_to_ours(model, q: np.ndarray) -> np.ndarray:
    out = np.empty_like(q)
    v, at = model.views(out), 0
    for name, shape in (("fc1.W", (H, F)), ("fc1.b", (H,)), ("fc2.W", (K, H)), ("fc2.b", (K,))):
        size = int(np.prod(shape))
        block = q[at:at + size].reshape(shape)
        v[name][...] = block.T if block.ndim == 2 else block
        at += size
    return out


def digits(rows: int = 64):
    d = Problem.from_config(RunConfig()).data
    return d.X_train[:rows], d.y_train[:rows]


def test_the_adapter_gives_the_built_in_mlps_gradient_on_the_same_parameters():
    ours = make_model("mlp", F, K, hidden=(H,))
    theirs = as_model(torch_mlp(), "torch_mlp")
    assert [s for _, s in theirs.layout()] == [(H, F), (H,), (K, H), (K,)]
    assert theirs.layer_groups() == [(0, F * H + H), (F * H + H, theirs.n_params)] and theirs.n_params == ours.n_params
    X, y = digits()
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-6)):
        p = ours.init(0).astype(dtype) + np.random.default_rng(1).standard_normal(ours.n_params).astype(dtype) * 0.05
        loss_o, g_o = ours.loss_and_grad(p, X, y)
        loss_t, g_t = theirs.loss_and_grad(ours_to_torch(ours, p), X, y)
        assert g_t.dtype == dtype and abs(loss_o - loss_t) <= tol * 10
        np.testing.assert_allclose(torch_to_ours(ours, g_t), g_o, rtol=tol * 100, atol=tol)


def test_twenty_sgd_steps_follow_the_built_in_mlps_trajectory():
    ours = make_model("mlp", F, K, hidden=(H,))
    theirs = as_model(torch_mlp(), "torch_mlp")
    d = Problem.from_config(RunConfig()).data
    p = ours.init(3).astype(np.float64)
    q = ours_to_torch(ours, p)
    g_o, g_t = np.empty_like(p), np.empty_like(q)
    for step in range(20):
        X, y = d.X_train[32 * step:32 * (step + 1)], d.y_train[32 * step:32 * (step + 1)]
        ours.loss_and_grad(p, X, y, grad_out=g_o)
        theirs.loss_and_grad(q, X, y, grad_out=g_t)
        p -= 0.5 * g_o
        q -= 0.5 * g_t
    np.testing.assert_allclose(torch_to_ours(ours, q), p, rtol=1e-9, atol=1e-11)
    assert np.abs(p - ours.init(3)).max() > 0.05                     # it moved


def test_nothing_is_copied_the_module_reads_params_and_writes_grad_out():
    m = TorchModel(torch_mlp())
    X, y = digits(16)
    p = m.init(0)
    g = np.zeros_like(p)
    m.loss_and_grad(p, X, y, grad_out=g)
    first = m.module[0].weight
    assert np.shares_memory(first.detach().numpy(), p) and np.shares_memory(first.grad.numpy(), g)
    before = g.copy()
    p[:10] += 1.0                                      # the caller's update, in place: the module sees it
    m.loss_and_grad(p, X, y, grad_out=g)
    assert not np.array_equal(g, before)
    fresh = torch_mlp()
    fresh.load_state_dict({k: v.clone() for k, v in m.module.state_dict().items()})
    out = torch.nn.functional.cross_entropy(fresh(torch.from_numpy(X)), torch.from_numpy(y))
    out.backward()
    np.testing.assert_array_equal(g[:F * H], fresh[0].weight.grad.numpy().ravel())   # written in place, exactly


def test_the_dlpack_path_shares_memory_with_numpy_standing_in_for_cupy():
    class Device(np.ndarray):
        """Not a plain ndarray: takes the DLPack path a CuPy array takes."""
    m = TorchModel(torch_mlp())
    X, y = digits(16)
    p = m.init(0).view(Device)
    g = np.zeros(p.shape, np.float32).view(Device)
    t = to_torch(p)
    assert t.data_ptr() == p.ctypes.data                                   # one memory, through DLPack
    m.loss_and_grad(p, X.view(Device), y.view(Device), grad_out=g)
    assert m.module[0].weight.data_ptr() == p.ctypes.data and m.module[0].weight.grad.data_ptr() == g.ctypes.data
    plain = TorchModel(torch_mlp())
    g2 = np.zeros(p.shape, np.float32)
    plain.loss_and_grad(np.asarray(p).copy(), X, y, grad_out=g2)
    np.testing.assert_array_equal(np.asarray(g), g2)


@pytest.mark.gpu
def test_on_a_gpu_cupy_arrays_and_cuda_tensors_share_device_memory():
    cp = pytest.importorskip("cupy")
    m = as_model(torch_mlp(), "torch_mlp")
    X, y = digits(16)
    p = cp.asarray(m.init(0))
    g = cp.zeros_like(p)
    loss, got = m.loss_and_grad(p, cp.asarray(X), cp.asarray(y), grad_out=g)
    assert got is g and m.obj.module[0].weight.is_cuda
    assert m.obj.module[0].weight.data_ptr() == p.data.ptr and m.obj.module[0].weight.grad.data_ptr() == g.data.ptr
    cpu = as_model(torch_mlp(), "torch_mlp").loss_and_grad(cp.asnumpy(p), X, y)[1]
    np.testing.assert_allclose(cp.asnumpy(g), cpu, rtol=1e-4, atol=1e-6)


def test_init_is_seeded_and_never_writes_into_a_callers_array():
    m = TorchModel(torch_mlp())
    a, b, c = m.init(0), m.init(0), m.init(1)
    assert np.array_equal(a, b) and not np.array_equal(a, c) and a.dtype == np.float32
    X, y = digits(8)
    held = a.copy()
    m.loss_and_grad(a, X, y)              # the module's parameters are now views of `a` ...
    m.init(5)                             # ... and a new init must not reset them in place
    assert np.array_equal(a, held)


def test_a_custom_loss_from_the_factory():
    def smoothed(n_features, n_classes):
        return torch_mlp(n_features, n_classes), lambda out, y: torch.nn.functional.cross_entropy(
            out, y, label_smoothing=0.1)
    m = Problem.from_config(RunConfig(model=smoothed)).model
    X, y = digits(16)
    p = m.init(0)
    loss, _ = m.loss_and_grad(p, X, y)
    plain = as_model(torch_mlp(), "plain").loss_and_grad(p, X, y)[0]
    module = torch_mlp()
    for t, (a, b) in zip(module.parameters(), m.obj._bounds):
        t.data = torch.from_numpy(p[a:b].copy()).view(t.shape)
    want = float(torch.nn.functional.cross_entropy(module(torch.from_numpy(X)), torch.from_numpy(y),
                                                   label_smoothing=0.1))
    assert loss == pytest.approx(want, rel=1e-6) and abs(loss - plain) > 1e-4   # the smoothing counted


def test_float64_gradient_matches_central_differences():
    m = as_model(torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.Tanh(), torch.nn.Linear(8, K)), "tanh")
    X, y = digits(8)
    p = m.init(0).astype(np.float64)
    _, g = m.loss_and_grad(p, X, y)
    for i in np.random.default_rng(0).choice(m.n_params, 20, replace=False):
        e = np.zeros_like(p)
        e[i] = 1e-6
        fd = (m.loss(p + e, X, y) - m.loss(p - e, X, y)) / 2e-6
        assert abs(fd - g[i]) <= 1e-7 + 1e-5 * abs(g[i])
    assert m.loss_and_grad(p.astype(np.float32), X, y)[1].dtype == np.float32   # and back to float32


@pytest.mark.parametrize("factory, says", [
    (lambda f, k: torch.nn.ReLU(), "a torch module with trainable parameters"),
    (lambda f, k: torch.nn.Sequential(torch.nn.Linear(f, k), torch.nn.BatchNorm1d(k)),
     r"a torch module without buffers \(.* has 1.running_mean"),
])
def test_a_module_the_adapter_cannot_take_is_refused_in_one_line(factory, says):
    cfg = RunConfig(algorithm="sync_sgd", model=factory, cpus=2, steps=5)
    with pytest.raises(ConfigError, match="^model: " + says):
        preflight(cfg)


def test_layers_reach_lars_and_powersgd():
    m = as_model(torch_mlp(), "torch_mlp")
    assert layout_of(m) == ((0, F * H, True), (F * H, F * H + H, False), (F * H + H, F * H + H + K * H, True),
                            (F * H + H + K * H, m.n_params, False))
    for kw in ({"optimizer": "lars", "lr": 2.0}, {"compression": "powersgd"}, {"algorithm": "cgdp"}):
        r = run_threads(RunConfig(**{"algorithm": "sync_sgd", "model": torch_mlp, "cpus": 2, "batch_size": 64,
                                     "steps": 20, **kw}))
        assert r.status == "completed", kw


@pytest.mark.slow
def test_a_torch_model_trains_on_threads_dask_and_the_simulator(client):
    cfg = RunConfig(algorithm="sync_sgd", model=torch_mlp, model_args={"hidden": 64}, cpus=2, batch_size=64,
                    lr=0.1, epochs=4)
    preflight(cfg)
    threads = run_threads(cfg)
    dask = wb.run(cfg, cluster=client, progress=False)
    assert threads.summary["final_test_accuracy"] > 0.9 and dask.status == "completed"
    np.testing.assert_allclose(dask.params, threads.params, rtol=1e-5, atol=1e-6)   # the same maths, in processes
    sim = wb.run(cfg.replace(simulate=True, cpus=4), progress=False)
    assert sim.status == "completed" and sim.summary["sim_path"] == "lockstep"
    assert sim.summary["compute_charged_by"].startswith("this machine's core timing")


def test_the_benchmark_row_times_the_same_step_on_both_sides():
    # bench --torch-adapter: its process refuses to time two sides whose first losses differ;
    # a tiny size runs it end to end (what it measures is printed by the benchmark, not tested)
    from workbench.bench.adapter import measure
    row = measure((8, 6, 3), 4, rounds=1, steps=2)
    assert row["n_params"] == 8 * 6 + 6 + 6 * 3 + 3 and row["adapter_ms"] > 0 and row["plain_ms"] > 0
    assert row["ratio"] == pytest.approx(row["adapter_ms"] / row["plain_ms"])


def test_a_torch_model_computes_with_the_workers_thread_count():
    # torch's own thread pool is not a BLAS threadpoolctl limits: a run's BLAS rule sets it too
    # (and the local core's calibration times a torch model on one thread, as a worker computes)
    from workbench.util.blas import blas_limit
    before = torch.get_num_threads()
    with blas_limit(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_the_trained_network_comes_back_as_a_torch_module(tmp_path):
    """`wb.torch_module`: a copy of the user's module holding the run's parameters. Oracle:
    the run's own evaluator scored those parameters, so the module's accuracy on the test set
    is the run's final test accuracy, exactly; from a loaded run directory too, and through a
    state_dict saved and loaded into a fresh module."""
    out = tmp_path / "run"
    result = wb.run(RunConfig(algorithm="sync_sgd", model=torch_mlp, cpus=2, epochs=2, seed=0, out=str(out)),
                    cluster="threads", progress=False)
    data = Problem.from_config(RunConfig(algorithm="sync_sgd", model=torch_mlp, cpus=2)).data
    X, y = torch.from_numpy(np.array(data.X_test)), data.y_test

    def accuracy(module):
        with torch.no_grad():
            return float((module(X).argmax(dim=1).numpy() == y).mean())

    module = wb.torch_module(result)
    assert isinstance(module, torch.nn.Sequential) and not module.training
    assert accuracy(module) == result.summary["final_test_accuracy"]
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).numpy()
    assert np.array_equal(flat, result.params)
    result.params[:] = 0                                      # the module holds its own copy
    assert accuracy(module) == result.summary["final_test_accuracy"]
    loaded = wb.torch_module(wb.load(out))
    torch.save(loaded.state_dict(), tmp_path / "m.pt")
    fresh = torch_mlp()
    fresh.load_state_dict(torch.load(tmp_path / "m.pt"))
    assert accuracy(fresh.eval()) == accuracy(module)


class Frozen(torch.nn.Module):
    """A frozen first layer (a pretrained one, here 2 I and 0.5) under a trainable head."""

    def __init__(self, n_features: int, n_classes: int):
        super().__init__()
        self.base = torch.nn.Linear(n_features, n_features)
        with torch.no_grad():
            self.base.weight.copy_(2 * torch.eye(n_features))
            self.base.bias.fill_(0.5)
        self.base.requires_grad_(False)
        self.head = torch.nn.Linear(n_features, n_classes)

    def forward(self, x):
        return self.head(torch.relu(self.base(x)))


def test_a_frozen_layer_keeps_its_values_through_init_training_and_predict():
    """`init` resets every submodule under the seed; a frozen layer's values are the user's
    (outside the vector): they survive it. `wb.predict` in the session uses the run's model,
    whose init ran: it once answered with a re-drawn frozen layer (0.41 where the run's own
    evaluation said 0.69 in the audit's case); now it agrees with the final evaluation exactly."""
    config = RunConfig(algorithm="sync_sgd", model=Frozen, cpus=2, steps=30, seed=0)
    result = wb.run(config, cluster="threads", progress=False)
    model = Problem.from_config(config).model
    model.init(3)
    base = model.obj.module.base
    assert torch.equal(base.weight, 2 * torch.eye(F)) and torch.equal(base.bias, torch.full((F,), 0.5))
    data = Problem.from_config(config).data
    right = np.asarray(wb.predict(result, np.asarray(data.X_test))) == data.y_test
    assert float(right.mean()) == result.summary["final_test_accuracy"]


class OwnScale(torch.nn.Module):
    """A parameter of the user's own that no `reset_parameters` draws."""

    def __init__(self, n_features: int, n_classes: int):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(n_features))
        self.fc = torch.nn.Linear(n_features, n_classes)

    def forward(self, x):
        return self.fc(x * self.scale)


def test_a_parameter_no_reset_draws_starts_the_same_in_every_worker_and_run_of_a_seed():
    """Every worker builds its own instance (`Problem.new_model`): built under the run's
    torch seed, they agree whatever torch's generator did before (the audit's sync_sgd run
    once started its two workers from different `scale` vectors); another seed, another draw."""
    def params0(seed: int) -> np.ndarray:
        torch.randn(100)                       # whatever else the process drew before
        return Problem.from_config(RunConfig(model=OwnScale, seed=seed)).new_model().init(seed)
    a, b, c = params0(0), params0(0), params0(1)
    assert np.array_equal(a, b) and not np.array_equal(a[:F], c[:F])


def one_logit(n_features: int, n_classes: int):
    """A binary classifier's one logit, trained with BCE (labels 0/1 as floats)."""
    module = torch.nn.Sequential(torch.nn.Linear(n_features, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return module, lambda out, y: torch.nn.functional.binary_cross_entropy_with_logits(out[:, 0], y.float())


def test_a_one_logit_binary_classifier_is_scored_by_its_sign():
    """argmax over one column answered class 0 for every row (the run said 0.44: the share
    of class 0); one output per row is read as a logit: class 1 where it is above 0."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    X = (rng.normal(size=(400, 6)) + 1.5 * y[:, None]).astype(np.float32)
    m = as_model(one_logit(6, 2), "one_logit")
    p = m.init(0)
    for _ in range(200):
        _, g = m.loss_and_grad(p, X, y)
        p -= 0.5 * g
    pred = np.asarray(m.predict(p, X))
    with torch.no_grad():
        for t, (a, b) in zip(m.obj._params, m.obj._bounds):
            t.data = torch.from_numpy(p[a:b].copy()).view(t.shape)
        want = (m.obj.module(torch.from_numpy(X))[:, 0] > 0).numpy().astype(int)
    assert np.array_equal(pred, want) and set(pred.tolist()) == {0, 1} and (pred == y).mean() > 0.9
