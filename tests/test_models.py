"""Models: gradients against finite differences, forward passes against naive references."""
from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest

from workbench.maths import models
from workbench.maths.models import CNN, MLP, MODELS, Layer, SoftmaxRegression, make_model

# Tiny models for exhaustive gradient checks: (name, n_features, n_classes, hidden, image_shape).
TINY = {
    "softmax": ("softmax", 7, 4, (), None),
    "mlp": ("mlp", 9, 4, (6, 5), None),
    "cnn": ("cnn", 2 * 8 * 8, 3, (3, 4), (2, 8, 8)),
    "cnn_odd": ("cnn", 1 * 6 * 7, 3, (2,), (1, 6, 7)),  # 6x7 -> 3x3 -> 1x1: odd sizes crop
}


def tiny(key: str):
    name, n_features, n_classes, hidden, image_shape = TINY[key]
    return make_model(name, n_features, n_classes, hidden=hidden or (4,), image_shape=image_shape)


def batch(model, B: int, seed: int = 0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, model.n_features)).astype(dtype)
    y = rng.integers(0, model.n_classes, B)
    return X, y


def params64(model, seed: int = 0) -> np.ndarray:
    # Non-zero biases so the bias gradients and ReLU kinks are exercised too.
    rng = np.random.default_rng(seed + 100)
    return model.init(seed).astype(np.float64) + 0.1 * rng.standard_normal(model.n_params)


# --- reference implementations: the same maths, written the obvious way -----------------

def ref_logits(model, params: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Logits computed naively from the named views (NCHW convolutions for the CNN)."""
    P = model.views(params)
    if isinstance(model, CNN):
        B, (c, h, w) = X.shape[0], model.image_shape
        x = X.reshape(B, c, h, w)
        for k in ("1", "2"):
            W, b = P[f"conv{k}.W"], P[f"conv{k}.b"]                          # (3, 3, Cin, Cout)
            H, Wd = x.shape[2:]
            xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
            out = np.zeros((B, W.shape[3], H, Wd)) + b[None, :, None, None]
            for i in range(3):
                for j in range(3):
                    out += np.einsum("bchw,co->bohw", xp[:, :, i:i + H, j:j + Wd], W[i, j])
            out = np.maximum(out, 0)
            Ho, Wo = H // 2, Wd // 2
            x = out[:, :, :2 * Ho, :2 * Wo].reshape(B, -1, Ho, 2, Wo, 2).max(axis=(3, 5))
        f = x.transpose(0, 2, 3, 1).reshape(B, -1)  # fc.W rows are in (h, w, c) order
        return f @ P["fc.W"] + P["fc.b"]
    h = X
    n = len(model.layer_groups())
    for i in range(1, n + 1):
        h = h @ P[f"fc{i}.W"] + P[f"fc{i}.b"]
        if i < n:
            h = np.maximum(h, 0)
    return h


def ref_loss(logits: np.ndarray, y: np.ndarray) -> float:
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return float(-np.mean(np.log(p[np.arange(len(y)), y])))


# --- gradients ----------------------------------------------------------------------------

@pytest.mark.parametrize("key", list(TINY))
def test_gradient_matches_central_differences(key):
    model = tiny(key)
    params = params64(model)
    X, y = batch(model, 5, dtype=np.float64)
    _, grad = model.loss_and_grad(params, X, y)
    eps = 1e-6
    numeric = np.empty(model.n_params)
    for i in range(model.n_params):  # every coordinate: the tiny models have <= 300
        p = params.copy()
        p[i] += eps
        up = model.loss(p, X, y)
        p[i] -= 2 * eps
        numeric[i] = (up - model.loss(p, X, y)) / (2 * eps)
    rel = np.abs(grad - numeric) / np.maximum(np.abs(grad) + np.abs(numeric), 1e-7)
    assert rel.max() < 1e-6, f"{key}: worst coordinate {rel.argmax()} rel err {rel.max():.2e}"
    assert np.abs(grad).max() > 1e-3  # not trivially zero


def test_gradient_subset_of_bigger_mlp():
    model = make_model("mlp", 40, 5, hidden=(32, 16))
    params = params64(model, seed=3)
    X, y = batch(model, 16, seed=3, dtype=np.float32)  # float32 data with float64 params: cast
    _, grad = model.loss_and_grad(params, X, y)
    eps = 1e-6
    for i in np.random.default_rng(0).choice(model.n_params, 30, replace=False):
        p = params.copy()
        p[i] += eps
        up = model.loss(p, X, y)
        p[i] -= 2 * eps
        num = (up - model.loss(p, X, y)) / (2 * eps)
        assert abs(grad[i] - num) <= 1e-6 * max(abs(grad[i]) + abs(num), 1e-7), (i, grad[i], num)


@pytest.mark.parametrize("key", list(TINY))
def test_on_grad_ready_backward_order_and_final_values(key):
    model = tiny(key)
    params = model.init(1)
    X, y = batch(model, 6, seed=1)
    grad = np.empty_like(params)
    seen = []
    _, ref = model.loss_and_grad(params, X, y)
    model.loss_and_grad(params, X, y, grad_out=grad,
                        on_grad_ready=lambda a, b: seen.append((a, b, grad[a:b].copy())))
    spans = [(a, b) for a, b, _ in seen]
    assert spans == model.layer_groups()[::-1]            # one call per group, last layer first
    assert spans[-1][0] == 0 and spans[0][1] == model.n_params
    assert all(s[0] == t[1] for s, t in zip(spans, spans[1:]))  # tiles [0, n_params)
    for a, b, chunk in seen:
        np.testing.assert_array_equal(chunk, ref[a:b])    # already final when announced


# --- forward pass, layout, init -----------------------------------------------------------

@pytest.mark.parametrize("key", list(TINY))
def test_loss_and_logits_match_naive_reference(key):
    model = tiny(key)
    params = params64(model, seed=2)
    X, y = batch(model, 11, seed=2, dtype=np.float64)
    logits = model.logits(params, X)
    np.testing.assert_allclose(logits, ref_logits(model, params, X), rtol=1e-12, atol=1e-12)
    assert model.loss(params, X, y) == pytest.approx(ref_loss(logits, y), rel=1e-12)
    assert model.loss_and_grad(params, X, y)[0] == pytest.approx(ref_loss(logits, y), rel=1e-12)
    np.testing.assert_array_equal(model.predict(params, X), logits.argmax(axis=1))


def test_loss_is_stable_for_huge_logits():
    model = make_model("softmax", 3, 2)
    params = np.zeros(model.n_params, np.float32)
    params[:2] = [1e4, -1e4]                     # logits of +-1e4 overflow a naive exp
    X = np.array([[1.0, 0, 0], [1.0, 0, 0]], np.float32)
    loss, grad = model.loss_and_grad(params, X, np.array([0, 1]))
    assert loss == pytest.approx(1e4, rel=1e-6)  # (0 + 2e4) / 2
    assert np.isfinite(grad).all()


def test_param_counts_and_layout():
    mlp = make_model("mlp", 784, 10, hidden=(512, 256))
    assert mlp.n_params == 535_818
    assert mlp.describe() == "mlp 784-512-256-10 (535,818 params)"
    assert make_model("softmax", 784, 10).n_params == 7_850
    cnn = make_model("cnn", 64, 10, hidden=(4, 8), image_shape=(1, 8, 8))
    assert cnn.n_params == (9 * 4 + 4) + (9 * 4 * 8 + 8) + (2 * 2 * 8 * 10 + 10)
    assert make_model("cnn", 64, 10, hidden=(4,), image_shape=(1, 8, 8)).hidden == (4, 8)  # c2 = 2*c1
    for model in (mlp, cnn):
        # W then b per group, groups back to back from 0 to n_params.
        assert [l.name.split(".")[1] for l in model.layers] == ["W", "b"] * len(model.layer_groups())
        assert model.layers[0].start == 0 and model.layers[-1].stop == model.n_params
        assert all(a.stop == b.start for a, b in zip(model.layers, model.layers[1:]))
        assert model.layer_groups() == [(W.start, b.stop) for W, b in zip(model.layers[::2], model.layers[1::2])]
    assert Layer("x", (3, 4), 5).size == 12 and Layer("x", (3, 4), 5).stop == 17


def test_views_are_views():
    model = tiny("mlp")
    params = model.init(0)
    V = model.views(params)
    assert V["fc1.W"].shape == (9, 6) and V["fc2.b"].shape == (5,)
    V["fc2.b"][:] = 7.0
    assert (params[model.layers[3].start:model.layers[3].stop] == 7.0).all()
    with pytest.raises(ValueError, match="params:"):
        model.views(params[:-1])


@pytest.mark.parametrize("key", ["softmax", "mlp", "cnn"])
def test_init_deterministic_float32_zero_bias(key):
    model = tiny(key)
    a, b, c = model.init(0), model.init(0), model.init(1)
    assert a.dtype == np.float32 and a.shape == (model.n_params,)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    V = model.views(a)
    for layer in model.layers:
        if layer.name.endswith(".b"):
            assert (V[layer.name] == 0).all()
        else:
            assert V[layer.name].std() > 0


def test_he_init_scale():
    model = make_model("mlp", 400, 10, hidden=(300,))
    W = model.views(model.init(0))["fc1.W"]
    assert W.std() == pytest.approx(np.sqrt(2 / 400), rel=0.02)


# --- buffers, dtypes, no mutation ---------------------------------------------------------

@pytest.mark.parametrize("key", list(TINY))
def test_inputs_not_modified(key):
    model = tiny(key)
    params = model.init(0)
    X, y = batch(model, 4)
    p0, X0, y0 = params.copy(), X.copy(), y.copy()
    model.loss_and_grad(params, X, y)
    model.loss(params, X, y)
    model.logits(params, X)
    model.predict(params, X)
    model.loss_and_grad(params.astype(np.float64), X, y)  # the cast path
    np.testing.assert_array_equal(params, p0)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


@pytest.mark.parametrize("key", ["mlp", "cnn_odd"])
def test_grad_out_and_changing_batch_sizes(key):
    model = tiny(key)
    params = model.init(0)
    grad = np.full_like(params, np.nan)  # stale contents must not leak into the result
    # More batch sizes than MAX_WORKSPACES, revisited: eviction and reuse both exercised.
    for B in (7, 3, 7, 1, 5, 2, 3, 7):
        X, y = batch(model, B, seed=B)
        loss, out = model.loss_and_grad(params, X, y, grad_out=grad)
        assert out is grad
        ref_l, ref_g = tiny(key).loss_and_grad(params, X, y)  # a fresh instance: fresh buffers
        assert loss == ref_l
        np.testing.assert_array_equal(grad, ref_g)
        expected = ref_logits(model, params.astype(np.float64), X.astype(np.float64))
        np.testing.assert_allclose(model.logits(params, X), expected, rtol=1e-4, atol=1e-5)
    assert len(model._work) <= models.MAX_WORKSPACES


def test_returned_arrays_do_not_alias_buffers():
    model = tiny("mlp")
    params = model.init(0)
    X, y = batch(model, 4)
    _, g1 = model.loss_and_grad(params, X, y)   # caches the buffers for B=4 ...
    logits = model.logits(params, X)            # ... which the forward-only call reuses
    kept_logits, kept_g1 = logits.copy(), g1.copy()
    model.loss_and_grad(params, X * 2, y)
    model.logits(params, X * 3)
    np.testing.assert_array_equal(logits, kept_logits)
    np.testing.assert_array_equal(g1, kept_g1)


def test_forward_only_calls_do_not_keep_buffers():
    model = tiny("cnn")
    params = model.init(0)
    X, y = batch(model, 50)
    model.logits(params, X)
    model.predict(params, X)
    model.loss(params, X, y)
    assert model._work == {}  # big evaluation chunks leave no memory behind
    model.loss_and_grad(params, X, y)
    assert len(model._work) == 1


def test_dtypes_follow_params():
    model = tiny("cnn")
    X, y = batch(model, 3)
    p32 = model.init(0)
    loss, g = model.loss_and_grad(p32, X, y)
    assert isinstance(loss, float) and g.dtype == np.float32 and model.logits(p32, X).dtype == np.float32
    _, g64 = model.loss_and_grad(p32.astype(np.float64), X, y)
    assert g64.dtype == np.float64
    np.testing.assert_allclose(g, g64, rtol=1e-3, atol=1e-5)


def test_pickle_drops_buffers():
    model = tiny("cnn")
    params = model.init(0)
    X, y = batch(model, 4)
    loss = model.loss(params, X, y)
    model.loss_and_grad(params, X, y)
    assert model._work
    clone = pickle.loads(pickle.dumps(model))
    assert clone._work == {} and clone.loss(params, X, y) == loss


def test_maxpool_ties_route_gradient_once():
    # A flat image region makes all four window entries equal: exactly one may get the gradient.
    ws = models._Workspace(np, np.float64)
    a = np.ones((2, 4, 4, 3))
    out = models._maxpool2(np, ws, "t", a)
    assert out.shape == (2, 2, 2, 3)
    dout = np.random.default_rng(0).standard_normal(out.shape)
    da = models._maxpool2_backward(np, ws, "t", dout, a.shape)
    assert np.count_nonzero(da) == dout.size
    assert da.sum() == pytest.approx(dout.sum())


# --- validation ---------------------------------------------------------------------------

def test_errors_name_the_field():
    with pytest.raises(ValueError, match=r"model: one of \['softmax', 'mlp', 'cnn'\], got 'resnet'"):
        make_model("resnet", 10, 2)
    with pytest.raises(ValueError, match=r"model: 'cnn' needs a dataset with images"):
        make_model("cnn", 64, 10)
    for bad in [(0,), (-3,), ("a",), (True,), (), 5, (4.0,)]:
        with pytest.raises(ValueError, match=r"hidden: .*positive integers.*, got"):
            make_model("mlp", 10, 2, hidden=bad)
    with pytest.raises(ValueError, match="hidden: one or two"):
        make_model("cnn", 64, 10, hidden=(2, 3, 4), image_shape=(1, 8, 8))
    with pytest.raises(ValueError, match="n_features: C\\*H\\*W"):
        make_model("cnn", 65, 10, image_shape=(1, 8, 8))
    with pytest.raises(ValueError, match="image_shape:"):
        make_model("cnn", 8, 10, image_shape=(2, 2, 2))
    with pytest.raises(ValueError, match="n_classes: an integer >= 2, got 1"):
        make_model("softmax", 10, 1)


def test_bad_batches_and_grad_out():
    model = tiny("mlp")
    params = model.init(0)
    X, y = batch(model, 4)
    with pytest.raises(TypeError, match="X: a numpy array like params, got builtins.list"):
        model.loss(params, X.tolist(), y)
    with pytest.raises(ValueError, match=r"X: shape \(B, 9\)"):
        model.loss_and_grad(params, X[:, :-1], y)
    with pytest.raises(ValueError, match="y: integer labels"):
        model.loss_and_grad(params, X, y[:-1])
    with pytest.raises(ValueError, match="y: integer labels"):
        model.loss_and_grad(params, X, y.astype(np.float32))
    with pytest.raises(ValueError, match="grad_out:"):
        model.loss_and_grad(params, X, y, grad_out=np.empty(model.n_params, np.float64))
    with pytest.raises(ValueError, match="grad_out:"):
        model.loss_and_grad(params, X, y, grad_out=np.empty(2 * model.n_params, np.float32)[::2])


def test_registry_and_classes():
    assert list(MODELS) == ["softmax", "mlp", "cnn"]
    assert isinstance(make_model("softmax", 5, 2), SoftmaxRegression)
    assert isinstance(make_model("mlp", 5, 2), MLP)
    assert isinstance(make_model("cnn", 16, 2, hidden=(2,), image_shape=(1, 4, 4)), CNN)
    assert make_model("softmax", 5, 2).describe() == "softmax 5-2 (12 params)"
    cnn = make_model("cnn", 192, 10, hidden=(2,), image_shape=(3, 8, 8))
    assert cnn.describe().startswith("cnn 3x8x8-conv2-conv4-10 (")


def test_doctests():
    assert doctest.testmod(models).failed == 0


# --- training sanity ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["softmax", "mlp"])
def test_sgd_learns_a_separable_problem(name):
    rng = np.random.default_rng(0)
    n, d, k = 600, 10, 3
    centres = 4.0 * rng.standard_normal((k, d))
    y = rng.integers(0, k, n)
    X = (centres[y] + rng.standard_normal((n, d))).astype(np.float32)
    model = make_model(name, d, k, hidden=(32,))
    params = model.init(0)
    grad = np.empty_like(params)
    assert (model.predict(params, X) == y).mean() < 0.9
    for step in range(200):
        idx = rng.integers(0, n, 32)
        model.loss_and_grad(params, X[idx], y[idx], grad_out=grad)
        params -= 0.05 * grad
    assert (model.predict(params, X) == y).mean() > 0.97
    assert model.loss(params, X, y) < 0.1


@pytest.mark.parametrize("hidden", [(), (16,), (32, 8)])
@pytest.mark.parametrize("shared", [False, True], ids=["stacked-params", "shared-params"])
@pytest.mark.parametrize("K, B", [(1, 1), (5, 3), (4, 32)])
def test_loss_and_grad_stacked_is_bitwise_k_calls(hidden, shared, K, B):
    # The oracle: K plain loss_and_grad calls; the simulator relies on bitwise equality.
    model = make_model("softmax" if not hidden else "mlp", 12, 5, **({"hidden": hidden} if hidden else {}))
    rng = np.random.default_rng(3)
    X = rng.standard_normal((K, B, 12)).astype(np.float32)
    y = rng.integers(0, 5, (K, B))
    params = np.stack([model.init(s) + np.float32(0.01) * s for s in range(K)])
    given = params[0] if shared else params
    before = given.copy()
    grads = np.empty((K, model.n_params), np.float32)
    losses = model.loss_and_grad_stacked(given, X, y, grads)
    assert np.array_equal(given, before)                     # inputs untouched
    for k in range(K):
        loss, grad = model.loss_and_grad(params[0] if shared else params[k], X[k], y[k])
        assert float(losses[k]) == loss
        assert grad.tobytes() == grads[k].tobytes()


def test_a_stacked_pass_keeps_no_array_made_for_it():
    """The simulator's pool hands a big group fresh (K, n) operands each pass; the model's
    memo of layer views kept them alive, up to 4 per workspace in every worker's model (a
    1,024-worker DiLoCo grew to 1.2 GB over 200 steps). Views of the pool's kept buffers
    are still memoised (the same objects every pass)."""
    import gc
    import weakref
    model = make_model("mlp", 12, 5, hidden=(16,))
    K, B = 4, 3
    X, y = np.zeros((K, B, 12), np.float32), np.zeros((K, B), np.int64)
    params = np.stack([model.init(s) for s in range(K)])
    grads = np.empty((K, model.n_params), np.float32)
    model.loss_and_grad_stacked(params, X, y, grads)
    gone = weakref.ref(params), weakref.ref(grads)
    del params, grads
    gc.collect()
    assert gone[0]() is None and gone[1]() is None
    kept = np.empty((8, model.n_params), np.float32)       # a pool's buffer, passed as its first K rows
    view = kept[:K]
    view[:] = model.init(0)
    model.loss_and_grad_stacked(view, X, y, np.empty((K, model.n_params), np.float32))
    memo = next(ws.memo for key, ws in model._work.items() if key[1] == ("stacked", K, B))
    assert any(entry[0] is view for key, entry in memo.items() if key != 0)


def test_default_widths_have_one_home():
    """make_model, the model classes and RunConfig agree on the unset widths (config.DEFAULT_HIDDEN)."""
    from workbench.config import DEFAULT_HIDDEN, RunConfig
    from workbench.maths.models import CNN
    cnn = make_model("cnn", 64, 10, image_shape=(1, 8, 8))
    assert cnn.describe() == CNN(64, 10, image_shape=(1, 8, 8)).describe()
    assert cnn.describe() == make_model("cnn", 64, 10, hidden=DEFAULT_HIDDEN["cnn"], image_shape=(1, 8, 8)).describe()
    assert make_model("mlp", 64, 10).describe() == MLP(64, 10).describe() == "mlp 64-128-10 (9,610 params)"
    assert RunConfig(model="cnn", dataset="digits").model_hidden == DEFAULT_HIDDEN["cnn"] == (16, 32)
    assert RunConfig(model="mlp").model_hidden == DEFAULT_HIDDEN["mlp"]
