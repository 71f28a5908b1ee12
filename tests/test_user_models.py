"""A researcher's own model: the model protocol, its adapter, naming a model from anywhere,
and a model defined here (not in the package) trained by every algorithm on threads, on a
real 2-worker Dask cluster, on hand-started external workers and on the simulated cluster.

The oracle: `UserMLP` below is the built-in MLP's maths written the obvious way (its own
init draws the same numbers in the same order), so what it trains is compared with what
the built-in MLP trains on the same config."""
from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import start_scheduler

import workbench as wb
from workbench.config import ConfigError, RunConfig
from workbench.config.registry import specs
from workbench.execution.engine import run_threads
from workbench.execution.preflight import preflight
from workbench.maths.models import MLP, make_model
from workbench.maths.protocol import ProtocolModel, as_model, check_model
from workbench.problem import Problem

ALGORITHMS = list(specs())          # every algorithm `python -m workbench algorithms` lists


# ------------------------------------------------------------------ models written in this file
class UserMLP:
    """ReLU MLP n_features -> hidden -> n_classes, W of shape (fan_in, fan_out), W then b per layer."""

    def __init__(self, n_features: int, n_classes: int, hidden: int = 128):
        self.widths = (n_features, hidden, n_classes)
        self.shapes = []
        for i, (a, b) in enumerate(zip(self.widths[:-1], self.widths[1:])):
            self.shapes += [(f"fc{i + 1}.W", (a, b)), (f"fc{i + 1}.b", (b,))]

    def layout(self):
        return self.shapes

    def _views(self, p):
        out, at = [], 0
        for _, shape in self.shapes:
            size = int(np.prod(shape))
            out.append(p[at:at + size].reshape(shape))
            at += size
        return out

    def init(self, seed):
        rng = np.random.default_rng(seed)
        p = np.zeros(sum(int(np.prod(s)) for _, s in self.shapes), np.float32)
        W = self._views(p)
        last = len(self.widths) - 2
        for i in range(last + 1):
            fan_in, fan_out = self.widths[i], self.widths[i + 1]
            std = np.sqrt(2.0 / (fan_in + fan_out)) if i == last else np.sqrt(2.0 / fan_in)
            W[2 * i][...] = (rng.standard_normal(fan_in * fan_out, dtype=np.float32)
                             * np.float32(std)).reshape(fan_in, fan_out)
        return p

    def _forward(self, p, X):
        W1, b1, W2, b2 = self._views(p)
        H = np.maximum(X @ W1 + b1, 0)
        return H, H @ W2 + b2

    def loss_and_grad(self, p, X, y):
        W1, b1, W2, b2 = self._views(p)
        H, z = self._forward(p, X)
        B = len(y)
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        loss = float(np.mean(np.log(s[:, 0]) - z[np.arange(B), y]))
        d = e / s
        d[np.arange(B), y] -= 1
        d /= B
        g = np.empty_like(p)
        gW1, gb1, gW2, gb2 = self._views(g)
        gW2[...] = H.T @ d
        gb2[...] = d.sum(axis=0)
        dH = (d @ W2.T) * (H > 0)
        gW1[...] = X.T @ dH
        gb1[...] = dH.sum(axis=0)
        return loss, g

    def predict(self, p, X):
        return self._forward(p, X)[1].argmax(axis=1)


class TanhNet:
    """A model with no layout (its vector is one layer): one tanh hidden layer."""

    def __init__(self, n_features: int, n_classes: int, width: int = 16):
        self.f, self.k, self.h = n_features, n_classes, width
        self.n = n_features * width + width + width * n_classes + n_classes

    def init(self, seed):
        return np.random.default_rng(seed).standard_normal(self.n) * 0.1     # float64: the adapter casts

    def _parts(self, p):
        f, k, h = self.f, self.k, self.h
        return (p[:f * h].reshape(f, h), p[f * h:f * h + h], p[f * h + h:f * h + h + h * k].reshape(h, k),
                p[f * h + h + h * k:])

    def loss_and_grad(self, p, X, y):
        W1, b1, W2, b2 = self._parts(p)
        H = np.tanh(X @ W1 + b1)
        z = H @ W2 + b2
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        B = len(y)
        loss = np.mean(np.log(s[:, 0]) - z[np.arange(B), y])
        d = e / s
        d[np.arange(B), y] -= 1
        d /= B
        g = np.empty_like(p)
        gW1, gb1, gW2, gb2 = self._parts(g)
        gW2[...], gb2[...] = H.T @ d, d.sum(axis=0)
        dH = (d @ W2.T) * (1 - H * H)
        gW1[...], gb1[...] = X.T @ dH, dH.sum(axis=0)
        return loss, g

    def predict(self, p, X):
        W1, b1, W2, b2 = self._parts(p)
        return (np.tanh(X @ W1 + b1) @ W2 + b2).argmax(axis=1)


def _digits_batch(rows=32):
    d = Problem.from_config(RunConfig()).data
    return d.X_train[:rows], d.y_train[:rows]


def config(**kw) -> RunConfig:
    base = dict(algorithm="sync_sgd", dataset="digits", cpus=2, batch_size=64, lr=0.1, epochs=4, seed=0)
    base.update(kw)
    if base["algorithm"] == "ltfb":
        base.setdefault("round_size", 10)
    return RunConfig(**base)


# ------------------------------------------------------------------ the adapter
def test_the_adapter_writes_into_grad_out_and_reports_every_group_last_first():
    model = as_model(UserMLP(64, 10, hidden=16), "UserMLP")
    assert isinstance(model, ProtocolModel)
    X, y = _digits_batch()
    p = model.init(0)
    g = np.full_like(p, np.nan)
    seen = []
    loss, got = model.loss_and_grad(p, X, y, grad_out=g, on_grad_ready=lambda a, b: seen.append((a, b)))
    assert got is g and np.array_equal(g, UserMLP(64, 10, 16).loss_and_grad(p, X, y)[1])
    assert seen == model.layer_groups()[::-1] == [(64 * 16 + 16, model.n_params), (0, 64 * 16 + 16)]
    assert model.views(p)["fc2.b"].shape == (10,) and np.shares_memory(model.views(p)["fc1.W"], p)


def test_the_stacked_pass_is_bitwise_the_calls_one_by_one():
    model = as_model(UserMLP(64, 10, hidden=16), "UserMLP")
    X, y = _digits_batch(48)
    P = np.stack([model.init(s) for s in range(3)])
    G = np.empty_like(P)
    losses = model.loss_and_grad_stacked(P, X.reshape(3, 16, 64), y.reshape(3, 16), G)
    for k in range(3):
        loss, g = model.loss_and_grad(P[k].copy(), X[16 * k:16 * (k + 1)].copy(), y[16 * k:16 * (k + 1)].copy())
        assert np.array_equal(g, G[k]) and np.float32(loss) == losses[k]
    shared = model.loss_and_grad_stacked(P[0], X.reshape(3, 16, 64), y.reshape(3, 16), G)   # one vector for all
    assert shared[0] == losses[0]


def test_float64_params_give_the_gradient_of_central_differences():
    model = as_model(TanhNet(64, 10, width=6), "TanhNet")
    X, y = _digits_batch(8)
    p = np.random.default_rng(1).standard_normal(model.n_params) * 0.3
    loss, g = model.loss_and_grad(p, X, y)
    assert g.dtype == np.float64 and isinstance(loss, float)
    rng = np.random.default_rng(2)
    for i in rng.choice(model.n_params, 25, replace=False):
        e = np.zeros_like(p)
        e[i] = 1e-6
        fd = (model.loss(p + e, X, y) - model.loss(p - e, X, y)) / 2e-6
        assert abs(fd - g[i]) <= 1e-7 + 1e-5 * abs(g[i]), i


def test_a_model_without_layout_is_one_weight_layer():
    model = as_model(TanhNet(64, 10), "TanhNet")
    assert model.layout() == (("params", (model.n_params,)),) and not model.layered
    assert model.layer_groups() == [(0, model.n_params)]
    from workbench.maths.optim import layout_of
    assert layout_of(model) == ((0, model.n_params, True),)        # adamw decays it all: nothing is a bias
    assert model.init(3).dtype == np.float32                         # its float64 init, as runs train


def test_built_in_models_follow_the_protocol_themselves():
    mlp = make_model("mlp", 64, 10, hidden=(16,))
    assert as_model(mlp) is mlp                                        # no wrapper: one path
    assert [n for n, _ in mlp.layout()] == ["fc1.W", "fc1.b", "fc2.W", "fc2.b"]
    assert mlp.flops_per_sample == 3 * 2 * (64 * 16 + 16 * 10)
    user = as_model(UserMLP(64, 10, hidden=16), "UserMLP")
    assert user.layout() == mlp.layout() and user.layer_groups() == mlp.layer_groups()
    assert np.array_equal(user.init(0), mlp.init(0))                 # the same draws, written apart
    X, y = _digits_batch()
    p = mlp.init(0)
    np.testing.assert_allclose(user.loss_and_grad(p, X, y)[1], mlp.loss_and_grad(p, X, y)[1], rtol=1e-5, atol=1e-7)


class CountingMLP(MLP):
    """A user's subclass of the built-in MLP that redefines loss_and_grad with the protocol's
    signature (no grad_out): it counts its calls, so a test sees its code ran."""
    calls = 0

    def loss_and_grad(self, p, X, y):
        CountingMLP.calls += 1
        return super().loss_and_grad(p, X, y)


class FixedMLP(MLP):
    """A subclass that only fixes the widths: the built-in's maths, kept as it is."""

    def __init__(self, n_features, n_classes):
        super().__init__(n_features, n_classes, hidden=(16,))


def test_a_subclass_of_a_built_in_that_redefines_the_protocol_is_a_user_model():
    sub = as_model(CountingMLP(64, 10, hidden=(16,)), "CountingMLP")
    assert isinstance(sub, ProtocolModel)                 # its code, not the built-in's extras
    fixed = FixedMLP(64, 10)
    assert as_model(fixed) is fixed
    X, y = _digits_batch(48)
    p = sub.init(0)
    g = np.full_like(p, np.nan)
    before = CountingMLP.calls
    loss, got = sub.loss_and_grad(p, X, y, grad_out=g)   # the engine's call: no TypeError
    assert got is g and np.array_equal(g, make_model("mlp", 64, 10, hidden=(16,)).loss_and_grad(p, X, y)[1])
    sub.loss_and_grad_stacked(np.stack([p, p, p]), X.reshape(3, 16, 64), y.reshape(3, 16), np.empty((3, p.size), p.dtype))
    assert CountingMLP.calls == before + 4                # the simulator's stacked path calls it too
    cfg = config(epochs=0.5)
    builtin = run_threads(cfg.replace(hidden=[16]))
    user = run_threads(cfg.replace(model=CountingMLP, model_args={"hidden": [16]}, hidden=None))
    assert user.status == "completed" and CountingMLP.calls > before + 4
    assert abs(_final(user) - _final(builtin)) <= MARGIN["sync"]


# ------------------------------------------------------------------ named from anywhere
def test_a_class_a_factory_an_instance_and_a_name_all_build_the_model():
    by_class = RunConfig(model=UserMLP, model_args={"hidden": 16})
    assert by_class.model == f"{__name__}:UserMLP"
    by_name = RunConfig(model=f"{__name__}:UserMLP", model_args="hidden=16")
    assert by_name.model == by_class.model and by_name.model_args == {"hidden": 16}

    def factory(n_features, n_classes, hidden=8):
        return UserMLP(n_features, n_classes, hidden)
    by_factory = RunConfig(model=factory)
    instance = UserMLP(64, 10, hidden=4)
    by_instance = RunConfig(model=instance)
    assert "@" in by_instance.model                                  # an object of this session, not rebuilt by name
    sizes = [Problem.from_config(c).model.n_params for c in (by_class, by_factory, by_instance)]
    assert sizes == [64 * 16 + 16 + 16 * 10 + 10, 64 * 8 + 8 + 8 * 10 + 10, 64 * 4 + 4 + 4 * 10 + 10]
    a, b = Problem.from_config(by_instance).new_model(), Problem.from_config(by_instance).new_model()
    assert a.obj is not b.obj and a.obj is not instance                # each worker its own copy


def test_a_built_in_named_by_its_class_trains_bitwise_as_by_its_short_name():
    short = run_threads(config(model="mlp", hidden=[16], steps=15))
    named = run_threads(config(model="workbench.maths.models:MLP", model_args={"hidden": [16]}, steps=15))
    assert np.array_equal(short.params, named.params)
    assert named.summary["model"]["name"] == "workbench.maths.models:MLP" and not named.summary["model"]["shipped"]


def test_the_summary_records_the_model_and_its_files_hash():
    r = run_threads(config(model=UserMLP, model_args={"hidden": 16}, steps=5))
    rec = r.summary["model"]
    here = Path(__file__)
    assert rec["name"] == f"{__name__}:UserMLP" and rec["model_args"] == {"hidden": 16}
    assert rec["n_params"] == 64 * 16 + 16 + 16 * 10 + 10 and rec["builtin"] is False
    assert Path(rec["file"]).resolve() == here.resolve() and rec["hash_of"] == "file"
    assert rec["sha256"] == hashlib.sha256(here.read_bytes()).hexdigest() and rec["shipped"] is True
    assert run_threads(config(steps=3)).summary["model"] == {"name": "mlp", "model_args": {}, "n_params": 9610,
                                                             "describe": "mlp 64-128-10 (9,610 params)",
                                                             "builtin": True}


def test_a_pickled_config_carries_a_model_to_a_process_without_this_file(tmp_path):
    cfg = config(model=UserMLP, model_args={"hidden": 8})
    blob = tmp_path / "cfg.pkl"
    blob.write_bytes(pickle.dumps(cfg))
    code = ("import pickle, sys; from workbench.problem import Problem; "
            f"c = pickle.loads(open({str(blob)!r}, 'rb').read()); m = Problem.from_config(c).model; "
            "print(c.model, m.n_params, 'test_user_models' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True,
                         env={**os.environ, "PYTHONPATH": ""}).stdout.split()
    assert out == [cfg.model, str(64 * 8 + 8 + 8 * 10 + 10), "False"]   # shipped by value, not imported


def test_the_cli_names_a_model_by_module_and_refuses_a_missing_one_with_exit_2(tmp_path):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent('''
        import numpy as np
        class Zero:
            def __init__(self, n_features, n_classes):
                self.n = n_features * n_classes
            def init(self, seed):
                return np.zeros(self.n, np.float32)
            def loss_and_grad(self, p, X, y):
                return 0.0, np.zeros_like(p)
            def predict(self, p, X):
                return np.zeros(len(X), dtype=np.int64)
    '''))
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "workbench", "run", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)
    missing = cli("--model", "mymodels:Nope", "--steps", "2")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "error: model: package.module:Name of a name the module defines (mymodels has no Nope), got 'mymodels:Nope'"]
    ok = cli("--model", "mymodels:Zero", "--algorithm", "sgd", "--steps", "3", "--no-progress", "--out", "r")
    assert ok.returncode == 0, ok.stderr
    assert '"name": "mymodels:Zero"' in (tmp_path / "r" / "summary.json").read_text()


# ------------------------------------------------------------------ bad input, before any worker starts
def _broken(**methods):
    base = {"init": lambda self, seed: np.zeros(5, np.float32),
            "loss_and_grad": lambda self, p, X, y: (0.5, np.zeros_like(p)),
            "predict": lambda self, p, X: np.zeros(len(X), dtype=np.int64)}
    base.update(methods)
    cls = type("Broken", (), {"__init__": lambda self, n_features, n_classes: None, **base})
    cls.__module__ = __name__
    return cls


@pytest.mark.parametrize("methods, says", [
    ({"loss_and_grad": lambda self, p, X, y: (0.5, np.zeros(4, np.float32))},
     "a gradient like params (a NumPy array of shape (5,) and dtype float32); test_user_models:Broken's first "
     "step gave a ndarray of shape (4,)"),
    ({"loss_and_grad": lambda self, p, X, y: (0.5, np.zeros(5, np.float64))},
     "first step gave a ndarray of shape (5,) and dtype float64"),
    ({"loss_and_grad": lambda self, p, X, y: (0.5, np.full(5, np.nan, np.float32))},
     "a finite gradient at the first step"),
    ({"loss_and_grad": lambda self, p, X, y: (float("nan"), np.zeros(5, np.float32))},
     "a finite loss at the first step"),
    ({"init": lambda self, seed: np.zeros((5, 1), np.float32)}, "a model whose init(seed) returns a 1-D array"),
    ({"init": lambda self, seed: np.random.default_rng().standard_normal(5)}, "the same vector for the same seed"),
    ({"predict": lambda self, p, X: np.zeros(len(X))}, "predict gives one integer label per label of y"),
    ({"layout": lambda self: [("w", (4,))]}, "layout() covers its vector"),
    ({"loss_and_grad": lambda self, p, X, y: 1 / 0}, "loss_and_grad runs on a batch of 8 rows"),
])
def test_a_broken_model_is_refused_before_any_worker_starts_in_one_line(methods, says):
    cfg = config(model=_broken(**methods))
    with pytest.raises(ConfigError) as err:
        preflight(cfg)
    text = str(err.value)
    assert text.startswith("model: ") and says in text and "\n" not in text and text.endswith(f"got {cfg.model!r}")


@pytest.mark.parametrize("spec, says", [
    ("no_such_module_here:Net", "No module named 'no_such_module_here'"),
    (f"{__name__}:NoSuchName", f"{__name__} has no NoSuchName"),
    ("json:loads.nothing", "json has no loads.nothing"),
    # a notebook's model, asked for in another session: where it lives, and what to do
    ("__main__:NotHere", "__main__ has no NotHere: a model defined in a notebook or a script's __main__ is "
                         "that session's only; move it into a module file"),
])
def test_a_name_that_does_not_resolve_says_which_part(spec, says):
    with pytest.raises(ConfigError, match="^model: .*" + says.replace("(", r"\(").replace(")", r"\)")):
        preflight(config(model=spec))


def test_a_module_that_fails_to_import_names_its_error(tmp_path, monkeypatch):
    (tmp_path / "badmodels.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"importing badmodels raised RuntimeError: no GPU here"):
        preflight(config(model="badmodels:Net"))


def test_a_factory_that_raises_names_the_arguments():
    with pytest.raises(ConfigError, match=r"builds with \(n_features=64, n_classes=10, width=3\); .*TypeError"):
        preflight(config(model=UserMLP, model_args={"width": 3}))


@pytest.mark.parametrize("kw, field", [
    ({"optimizer": "lars"}, "optimizer"), ({"optimizer": "lamb"}, "optimizer"),
    ({"compression": "powersgd"}, "compression"), ({"algorithm": "cgdp"}, "algorithm"),
])
def test_a_rule_that_needs_layers_says_so_for_a_model_without_layout(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}: a model with a layout\\(\\) for .*TanhNet gives none"):
        preflight(config(model=TanhNet, **kw))
    preflight(config(model=UserMLP, **kw))                            # with a layout it runs


def test_an_object_that_is_no_model_says_what_it_lacks():
    with pytest.raises(ConfigError, match="model: an object with init.*<lambda> is a dict with no init, loss_and_grad, predict"):
        preflight(config(model=lambda n_features, n_classes: {}))


def test_check_model_passes_the_built_ins():
    X, y = _digits_batch()
    for name in ("softmax", "mlp", "cnn"):
        m = make_model(name, 64, 10, image_shape=(1, 8, 8))
        assert check_model(m, X, y).shape == (m.n_params,)


# ------------------------------------------------------------------ every algorithm, threads
def _final(r):
    return r.summary["final_test_accuracy"]


# Margin: UserMLP is the built-in MLP's maths (same init), so a deterministic algorithm ends
# within float rounding of it; an asynchronous one's order of updates on threads depends on
# the scheduler, which moved the built-in MLP's own accuracy by up to ~4 points between
# repeats here (359 test images: one image is 0.28 points).
MARGIN = {"sync": 2 / 359, "async": 0.08}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_trains_a_user_model_on_threads_as_the_built_in_mlp(algorithm):
    cfg = config(algorithm=algorithm)
    builtin = run_threads(cfg)
    user = run_threads(cfg.replace(model=UserMLP, hidden=None))
    assert user.status == builtin.status == "completed"
    margin = MARGIN["sync" if specs()[algorithm].sync and algorithm != "adpsgd" else "async"]
    assert abs(_final(user) - _final(builtin)) <= margin, (_final(user), _final(builtin))
    assert _final(user) > 0.8


# ------------------------------------------------------------------ every algorithm, a real Dask cluster
@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_trains_a_user_model_on_two_dask_workers(client, algorithm):
    cfg = config(algorithm=algorithm)
    builtin = wb.run(cfg, cluster=client, progress=False)
    user = wb.run(cfg.replace(model=UserMLP, hidden=None), cluster=client, progress=False)
    assert user.status == builtin.status == "completed", user.summary.get("errors")
    margin = MARGIN["sync" if specs()[algorithm].sync and algorithm != "adpsgd" else "async"]
    assert abs(_final(user) - _final(builtin)) <= margin, (_final(user), _final(builtin))
    assert user.summary["model"]["shipped"] is True


# ------------------------------------------------------------------ an external cluster
SITE_MODEL = textwrap.dedent('''
    import numpy as np
    class Zero:
        """Learns nothing: the point is where its code comes from."""
        def __init__(self, n_features, n_classes):
            self.n = n_features * n_classes
        def init(self, seed):
            return np.zeros(self.n, np.float32)
        def loss_and_grad(self, p, X, y):
            return 0.0, np.zeros_like(p)
        def predict(self, p, X):
            return np.zeros(len(X), dtype=np.int64)
''')


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """`dask scheduler` and two `dask worker` processes started by hand in a folder of their
    own, as on another machine: they cannot import this test file; a folder on their
    PYTHONPATH (`site`) holds `sitemodels`, code "installed" there."""
    from workbench.execution.cluster import connect
    site, elsewhere = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("elsewhere")
    (site / "sitemodels.py").write_text(SITE_MODEL)
    dask = str(Path(sys.executable).parent / "dask")
    env = {**os.environ, "PYTHONPATH": str(site), "MALLOC_TRIM_THRESHOLD_": ""}
    log = open(elsewhere / "dask.log", "w")
    scheduler, address = start_scheduler(elsewhere, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=elsewhere)
    procs = [scheduler]
    procs += [subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--name", f"outside-{i}", "--host",
                                "127.0.0.1", "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env,
                               cwd=elsewhere) for i in range(2)]
    try:
        client = None
        for _ in range(60):
            try:
                client = connect(address)
                break
            except ConfigError:
                time.sleep(0.5)
        assert client is not None, "scheduler did not come up"
        client.wait_for_workers(2, timeout=60)
        yield client, site
        client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(20)


def _imported_on_workers(client, name: str) -> list[bool]:
    return list(client.run(lambda: name in sys.modules).values())


def test_shipped_code_fails_with_its_own_file_and_line_where_it_runs(tmp_path, monkeypatch):
    """An error in a researcher's model on a worker names their file and shows the line, though
    the worker has no copy of the file (another host: here a fresh process, the file deleted);
    cloudpickle alone writes `File "<dynamic-code>", line 6` with no line shown."""
    from workbench import usercode
    src = tmp_path / "shippedmodel.py"
    src.write_text(textwrap.dedent("""\
        def helper(x):
            return x + undefined_name   # the bug

        class Net:
            def loss(self, x):
                return helper(x) * 2
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import shippedmodel
    blob = tmp_path / "net.pkl"
    blob.write_bytes(usercode.dumps(shippedmodel.Net))
    src.unlink()
    probe = ("import pickle, sys, traceback\n"
             "Net = pickle.loads(open(sys.argv[1], 'rb').read())\n"
             "try:\n    Net().loss(1)\nexcept NameError:\n    traceback.print_exc(file=sys.stdout)\n")
    out = subprocess.run([sys.executable, "-c", probe, str(blob)], capture_output=True, text=True, timeout=120,
                         cwd=str(Path(__file__).parent)).stdout
    assert f'File "{src}", line 6, in loss\n    return helper(x) * 2' in out, out
    assert f'File "{src}", line 2, in helper\n    return x + undefined_name   # the bug' in out, out
    assert "<dynamic-code>" not in out


@pytest.mark.slow
def test_your_own_code_is_shipped_to_an_external_cluster(outside):
    client, _ = outside
    assert _imported_on_workers(client, "test_user_models") == [False, False]
    r = wb.run(config(model=UserMLP, steps=30), cluster=client, progress=False)
    assert r.status == "completed" and r.summary["model"]["shipped"] is True
    assert r.summary["final_test_accuracy"] == run_threads(config(model=UserMLP, steps=30)).summary[
        "final_test_accuracy"]                                           # sync_sgd: the same run, anywhere
    assert _imported_on_workers(client, "test_user_models") == [False, False]   # by value: never imported


@pytest.mark.slow
def test_installed_code_is_imported_by_name_on_the_workers_and_must_be_there(outside, monkeypatch, tmp_path):
    from workbench import usercode
    client, site = outside
    installed = usercode._installed
    monkeypatch.setattr(usercode, "_installed",
                        lambda m: getattr(m, "__name__", "") in ("sitemodels", "onlyhere") or installed(m))
    monkeypatch.syspath_prepend(str(site))
    r = wb.run(config(model="sitemodels:Zero", steps=5), cluster=client, progress=False)
    assert r.status == "completed" and r.summary["model"]["shipped"] is False
    assert _imported_on_workers(client, "sitemodels") == [True, True]     # imported there, by name
    (tmp_path / "onlyhere.py").write_text(SITE_MODEL)                     # installed here, not on the workers
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^model: a model the workers can load \(on [^:]+: .*No module "
                                          r"named 'onlyhere'.*installed code must be installed there too"):
        wb.run(config(model="onlyhere:Zero", steps=5), cluster=client, progress=False)


# ------------------------------------------------------------------ the simulator
def test_the_simulator_charges_a_user_model_by_its_flops_or_times_it():
    class Counted(UserMLP):
        flops_per_sample = 3 * 2 * (64 * 128 + 128 * 10)       # the built-in MLP's own count
    Counted.__module__ = __name__
    sim = dict(simulate=True, cpus=4, steps=20, cpu_device="core")
    builtin = wb.run(config(**sim), progress=False)
    counted = wb.run(config(model=Counted, **sim), progress=False)
    assert counted.summary["compute_charged_by"].startswith("the model's FLOPs, its own flops_per_sample (56,832")
    assert counted.summary["wall_time_s"] == builtin.summary["wall_time_s"]   # the same charge, bitwise
    timed = wb.run(config(model=UserMLP, **sim), progress=False)
    assert timed.summary["compute_charged_by"].startswith("this machine's core timing the model's loss_and_grad")
    assert timed.summary["calibration"]["model"].startswith(f"{__name__}:UserMLP #")
    named = wb.run(config(model=UserMLP, timing_model="resnet50", **sim), progress=False)
    assert named.summary["compute_charged_by"].startswith("timing_model resnet50")
    with pytest.raises(ConfigError, match="^gpus: 0 for .*UserMLP.* gives no flops_per_sample"):
        preflight(config(model=UserMLP, simulate=True, cpus=0, gpus=4, steps=5))
    with pytest.raises(ConfigError, match="^cpu_device: core or local for .*UserMLP"):
        preflight(config(model=UserMLP, simulate=True, cpu_device="knl", cpus=4, steps=5))


# ------------------------------------------------------------------ the documentation
DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def test_the_documented_model_trains_and_the_paths_it_names_exist(tmp_path, monkeypatch):
    import re
    text = DOC.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "mymodels.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = config(model="mymodels:TanhNet", model_args={"width": 32}, epochs=5)
    preflight(cfg)
    assert run_threads(cfg).summary["final_test_accuracy"] > 0.9
    root = DOC.parents[1]
    named = set(re.findall(r"`((?:workbench|tests|notebooks|docs)/[\w./-]+)`", text))
    assert named and all((root / p).exists() for p in named), sorted(p for p in named if not (root / p).exists())


@pytest.mark.slow
def test_the_dashboards_simulation_process_gets_the_model_with_its_config():
    # a simulated run from the dashboard runs in a child of a fork server started with the
    # workbench preloaded: the model reaches it inside the pickled RunConfig (usercode.shipment)
    from workbench.ui import simproc
    if not simproc.available():
        pytest.skip("no child processes from here (a script run by its path)")
    cfg = config(model=UserMLP, simulate=True, cpus=4, steps=10)
    r = simproc.run_in_process(cfg, report=False)
    assert r.status == "completed" and r.summary["model"]["name"] == f"{__name__}:UserMLP"
    assert np.array_equal(r.params, wb.run(cfg, progress=False).params)     # the same run as in this process


def test_yaml_names_a_model_and_its_arguments_and_the_sizes_go_where_they_belong(tmp_path):
    (tmp_path / "run.yaml").write_text(f"algorithm: sync_sgd\nmodel: {__name__}:UserMLP\nmodel_args:\n  hidden: 16\n")
    cfg = RunConfig.from_yaml(tmp_path / "run.yaml")
    assert (cfg.model, cfg.model_args) == (f"{__name__}:UserMLP", {"hidden": 16})
    assert RunConfig.from_yaml(tmp_path / "run.yaml").to_dict() == RunConfig.from_dict(cfg.to_dict()).to_dict()
    with pytest.raises(ConfigError, match=r"^hidden: unset with a model of your own \(its sizes go in model_args\)"):
        RunConfig(model=UserMLP, hidden=[16])
    with pytest.raises(ConfigError, match=r"^model_args: unset with the built-in mlp"):
        RunConfig(model="mlp", model_args={"hidden": 16})
    with pytest.raises(ConfigError, match=r"^model_args: keyword arguments: a mapping"):
        RunConfig(model=UserMLP, model_args="16")


class BreaksAtCall(UserMLP):
    """UserMLP whose gradient raises from its 60th call in a process (the client's first-step
    check calls it fewer times)."""

    calls = 0

    def loss_and_grad(self, p, X, y):
        type(self).calls += 1
        if type(self).calls >= 60:
            raise RuntimeError("the model broke")
        return super().loss_and_grad(p, X, y)


@pytest.mark.cluster
def test_a_user_models_error_on_dask_is_said_once_and_its_last_evaluation_kept(client):
    """The loop's own error went out as an event with its traceback, then raised to Dask, whose
    worker log printed it again per worker ("Compute Failed": about 60 lines at the terminal)."""
    def compute_failed():
        return sum("Compute Failed" in msg for lines in client.get_worker_logs().values() for _, msg in lines)
    before = compute_failed()
    r = wb.run(config(model=BreaksAtCall, hidden=None, steps=400, eval_every=10), cluster=client, progress=False)
    assert r.status == "failed" and "the model broke" in str(r.summary["errors"])
    assert any(e["event"] == "failed" and "Traceback" in e["message"] for e in r.events)
    assert compute_failed() == before
    assert r.params is not None and r.summary["params_final"]["steps"] % 10 == 0


# ------------------------------------------------------------------ a model written for few rows
class AtMost64(UserMLP):
    """UserMLP whose predict was written for batches of at most 64 rows: the evaluation calls
    predict and loss on up to 2,048 rows at once (`maths.metrics.EVAL_CHUNK`)."""

    def predict(self, p, X):
        if len(X) > 64:
            raise ValueError(f"at most 64 rows, got {len(X)}")
        return super().predict(p, X)


def test_a_model_that_fails_on_the_evaluations_rows_is_refused_before_any_worker_starts():
    """Digits' training subset is the largest set the evaluation scores (1,438 rows, one call)."""
    with pytest.raises(ConfigError) as err:
        preflight(config(model=AtMost64, hidden=None, epochs=1))
    text = str(err.value)
    assert text.startswith("model: a model whose predict and loss take the 1,438 rows the run's evaluation")
    assert "it raised ValueError: at most 64 rows, got 1438" in text and "split X" in text and "\n" not in text
    preflight(config(model=UserMLP, hidden=None, epochs=1))        # one that takes them passes


@pytest.mark.parametrize("kw", [dict(algorithm="sync_sgd", cpus=2),     # every rank scores a share: 719 rows
                                dict(algorithm="async_sgd", cpus=3, simulate=True)])   # the server lockstep's
def test_a_run_whose_evaluation_raises_keeps_the_parameters_it_trained(tmp_path, kw):
    """The preflight check bypassed (`checked=[]`): the run trains its epoch, fails at its only
    evaluation, and keeps what it trained. Oracle: the same run of UserMLP (the same maths,
    a predict for any rows) completes with those parameters."""
    cfg = config(model=AtMost64, hidden=None, epochs=1, out=str(tmp_path / "r"), **kw)
    r = wb.run(cfg, progress=False, checked=[], **({} if cfg.simulate else {"cluster": "threads"}))
    whole = wb.run(config(model=UserMLP, hidden=None, epochs=1, **kw), progress=False,
                   **({} if cfg.simulate else {"cluster": "threads"}))
    assert r.status == "failed" and whole.status == "completed"
    kept = r.summary["params_final"]
    assert kept["steps"] == whole.summary["steps"] and kept["of"].startswith("its training, not evaluated: the "
                                                                             "evaluation raised ValueError on ")
    assert np.array_equal(np.load(tmp_path / "r" / "params.npy"), whole.params)
    said = r.summary["errors"]["0"]
    assert said.startswith("EvaluationError: the evaluation called the model's predict and loss on ")
    assert "at most 64 rows" in said and "up to 1,438 rows" in said and "EVAL_CHUNK" in said
    from workbench.measure import kept_note
    assert "not evaluated" in kept_note(r.summary)
