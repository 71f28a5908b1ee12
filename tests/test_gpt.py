"""The GPT: gradients against central differences, the forward pass against a naive
per-head reference (and PyTorch's autograd where torch is installed), causality, layout."""
from __future__ import annotations

import doctest
import math
import pickle

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from workbench.maths import gpt as gpt_module
from workbench.maths.gpt import GPT, gpt_forward_flops


def tiny(**kw) -> GPT:
    args = {"context": 5, "vocab": 7, "n_layers": 2, "d_model": 8, "n_heads": 2, **kw}
    return GPT(**args)


def tokens(model: GPT, B: int, T: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, model.vocab, (B, (T or model.context) + 1))
    return seq[:, :-1], seq[:, 1:]


def params64(model: GPT, seed: int = 0) -> np.ndarray:
    # every tensor away from its init (gains 1, biases 0), so each term of the gradient shows
    rng = np.random.default_rng(seed + 100)
    return model.init(seed).astype(np.float64) + 0.3 * rng.standard_normal(model.n_params)


# --- a naive reference: the same maths written the obvious way (loops over heads) --------

def gelu(u):
    return 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))


def layernorm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def ref_logits(model: GPT, params: np.ndarray, X: np.ndarray) -> np.ndarray:
    P = model.views(params)
    B, T = X.shape
    d, H = model.d_model, model.n_heads
    hd = d // H
    x = P["wte"][X] + P["wpe"][:T]
    for i in range(model.n_layers):
        a = layernorm(x, P[f"h{i}.ln1.g"], P[f"h{i}.ln1.b"])
        qkv = a @ P[f"h{i}.attn.W"] + P[f"h{i}.attn.b"]
        out = np.zeros((B, T, d))
        for h in range(H):
            q = qkv[..., h * hd:(h + 1) * hd]
            k = qkv[..., d + h * hd:d + (h + 1) * hd]
            v = qkv[..., 2 * d + h * hd:2 * d + (h + 1) * hd]
            for t in range(T):                      # position t attends to positions 0..t only
                s = np.einsum("bj,bsj->bs", q[:, t], k[:, :t + 1]) / math.sqrt(hd)
                w = np.exp(s - s.max(1, keepdims=True))
                w /= w.sum(1, keepdims=True)
                out[:, t, h * hd:(h + 1) * hd] = np.einsum("bs,bsj->bj", w, v[:, :t + 1])
        x = x + out @ P[f"h{i}.proj.W"] + P[f"h{i}.proj.b"]
        m = layernorm(x, P[f"h{i}.ln2.g"], P[f"h{i}.ln2.b"])
        x = x + gelu(m @ P[f"h{i}.fc.W"] + P[f"h{i}.fc.b"]) @ P[f"h{i}.out.W"] + P[f"h{i}.out.b"]
    return layernorm(x, P["ln_f.g"], P["ln_f.b"]) @ P["wte"].T


def ref_loss(logits: np.ndarray, y: np.ndarray) -> float:
    z = logits.reshape(-1, logits.shape[-1])
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-logp[np.arange(len(z)), y.reshape(-1)].mean())


# --- gradients ----------------------------------------------------------------------------

@pytest.mark.parametrize("T", [5, 3], ids=["full-context", "shorter"])
def test_gradient_matches_central_differences(T):
    model = tiny()
    X, y = tokens(model, B=3, T=T)
    p = params64(model)
    loss, grad = model.loss_and_grad(p, X, y)
    eps = 1e-6
    num = np.empty_like(p)
    for j in range(p.size):                          # every parameter
        e = p.copy()
        e[j] += eps
        up = model.loss(e, X, y)
        e[j] -= 2 * eps
        num[j] = (up - model.loss(e, X, y)) / (2 * eps)
    # central differences in float64 with eps 1e-6: rounding ~1e-16 * loss / eps ~ 1e-10 absolute,
    # truncation ~ eps^2; so 1e-8 absolute plus 1e-6 relative holds every right entry, and a
    # wrong term (a missing factor, a dropped path) misses by orders of magnitude
    err = np.abs(grad - num) - (1e-8 + 1e-6 * np.abs(num))
    worst = int(np.argmax(err))
    assert err.max() < 0, (worst, grad[worst], num[worst])
    if T < model.context:                            # unused positions get no gradient
        wpe = model.views(grad)["wpe"]
        assert not wpe[T:].any() and wpe[:T].any()
    assert abs(loss - ref_loss(ref_logits(model, p, X), y)) < 1e-12


def test_loss_and_logits_match_naive_reference():
    model = tiny(n_layers=3, d_model=12, n_heads=3, context=6, vocab=9)
    X, y = tokens(model, B=4, seed=2)
    p = params64(model, seed=1)
    ref = ref_logits(model, p, X)
    np.testing.assert_allclose(model.logits(p, X), ref, rtol=1e-10, atol=1e-12)
    assert abs(model.loss(p, X, y) - ref_loss(ref, y)) < 1e-12
    assert np.array_equal(model.predict(p, X), ref.argmax(-1))
    # float32 follows float64 to float32 rounding
    p32 = p.astype(np.float32)
    assert abs(model.loss(p32, X, y) - ref_loss(ref, y)) < 1e-4
    g64, g32 = model.loss_and_grad(p, X, y)[1], model.loss_and_grad(p32, X, y)[1]
    assert g32.dtype == np.float32
    assert np.abs(g32 - g64).max() < 1e-4 * np.abs(g64).max()


def test_causal_the_future_does_not_change_the_past():
    model = tiny(context=6)
    X, _ = tokens(model, B=2)
    p = model.init(3)
    before = model.logits(p, X)
    X2 = X.copy()
    X2[:, 4] = (X2[:, 4] + 1) % model.vocab          # change position 4
    after = model.logits(p, X2)
    assert np.array_equal(before[:, :4], after[:, :4])
    assert not np.allclose(before[:, 4:], after[:, 4:])


def test_on_grad_ready_order_and_final_values():
    model = tiny(n_layers=3)
    X, y = tokens(model, B=2)
    p = params64(model).astype(np.float32)
    grad = np.full(model.n_params, np.nan, np.float32)
    seen = []

    def ready(start, stop):
        seen.append((start, stop, grad[start:stop].copy()))
    model.loss_and_grad(p, X, y, grad_out=grad, on_grad_ready=ready)
    groups = model.layer_groups()
    assert [(a, b) for a, b, _ in seen] == groups[::-1]           # ln_f, h2, h1, h0, embed
    assert groups[0][0] == 0 and groups[-1][1] == model.n_params
    assert all(b == c for (_, b), (c, _) in zip(groups, groups[1:]))   # they tile the vector
    for a, b, got in seen:
        assert np.array_equal(got, grad[a:b])                   # final when announced


@pytest.mark.parametrize("shared", [False, True], ids=["stacked-params", "shared-params"])
def test_loss_and_grad_stacked_is_bitwise_k_calls(shared):
    model = tiny()
    K, B = 4, 3
    rng = np.random.default_rng(5)
    X = rng.integers(0, model.vocab, (K, B, model.context)).astype(np.float32)   # as the pool stacks them
    y = rng.integers(0, model.vocab, (K, B, model.context))
    params = np.stack([model.init(s) for s in range(K)])
    given = params[0] if shared else params
    grads = np.empty((K, model.n_params), np.float32)
    losses = model.loss_and_grad_stacked(given, X, y, grads)
    assert losses.dtype == np.float32
    for k in range(K):
        loss, grad = model.loss_and_grad(params[0] if shared else params[k], X[k], y[k])
        assert float(losses[k]) == loss
        assert grad.tobytes() == grads[k].tobytes()


# --- layout and parameters ---------------------------------------------------------------

def test_layout_names_and_views():
    model = tiny()
    names = [layer.name for layer in model.layers]
    assert names[:2] == ["wte", "wpe"] and names[-2:] == ["ln_f.g", "ln_f.b"]
    assert [n for n in names if n.startswith("h1.")] == [
        "h1.ln1.g", "h1.ln1.b", "h1.attn.W", "h1.attn.b", "h1.proj.W", "h1.proj.b",
        "h1.ln2.g", "h1.ln2.b", "h1.fc.W", "h1.fc.b", "h1.out.W", "h1.out.b"]
    d = model.d_model
    assert model.n_params == 7 * d + 5 * d + 2 * (12 * d * d + 13 * d) + 2 * d
    assert model.layout() == tuple((layer.name, layer.shape) for layer in model.layers)   # the model protocol's
    from workbench.maths.optim import layout_of
    layout = layout_of(model)
    assert [w for _, _, w in layout] == [len(layer.shape) > 1 for layer in model.layers]
    assert layout[0][0] == 0 and layout[-1][1] == model.n_params
    p = model.init(0)
    views = model.views(p)
    views["h0.fc.W"][0, 0] = 42.0                  # a view writes the flat vector
    assert p[model.layers[names.index("h0.fc.W")].start] == 42.0
    assert views["wte"].shape == (7, d) and views["h0.attn.W"].shape == (d, 3 * d)


def test_init_as_gpt2():
    model = GPT(context=64, vocab=65, n_layers=4, d_model=64, n_heads=4)
    p = model.init(0)
    v = model.views(p)
    assert p.dtype == np.float32 and np.array_equal(p, model.init(0)) and not np.array_equal(p, model.init(1))
    assert np.all(v["h2.ln1.g"] == 1) and np.all(v["ln_f.g"] == 1) and not v["h2.attn.b"].any()
    assert abs(v["h0.fc.W"].std() - 0.02) < 0.002
    assert abs(v["h0.out.W"].std() - 0.02 / math.sqrt(8)) < 0.001     # residual projections / sqrt(2 L)
    assert abs(v["wpe"].std() - 0.01) < 0.001


@pytest.mark.parametrize("vocab", [16, 65])
def test_the_loss_at_initialisation_is_about_ln_vocab(vocab):
    """At GPT-2's initialisation the logits are small (the final LayerNorm's unit-variance
    output against a N(0, 0.02) table: a standard deviation of 0.02 sqrt(d) = 0.16 at d 64),
    so the model is close to uniform over the vocabulary and its loss close to ln V: above
    it by about half the logits' variance, 0.013, plus the tied table's pull towards the
    current token; measured +0.046 (V 16) and +0.030 (V 65). A mis-scaled initialisation
    (N(0, 1) weights) starts several nats higher."""
    model = GPT(context=32, vocab=vocab, n_layers=2, d_model=64, n_heads=4)
    tokens = np.random.default_rng(1).integers(0, vocab, (16, 33))
    loss = model.loss(model.init(0), tokens[:, :-1].astype(np.float32), tokens[:, 1:])
    assert 0 < loss - math.log(vocab) < 0.1


def test_published_gpt2_shapes_give_published_counts():
    # Radford et al. 2019 as Hugging Face's gpt2 / gpt2-medium hold them (tied head)
    assert GPT(context=1024, vocab=50257, n_layers=12, d_model=768, n_heads=12).n_params == 124_439_808
    assert GPT(context=1024, vocab=50257, n_layers=24, d_model=1024, n_heads=16).n_params == 354_823_168


def test_flops_count_the_matmuls():
    model = tiny()
    T, V, L, d = model.context, model.vocab, model.n_layers, model.d_model
    matmul_weights = sum(layer.size for layer in model.layers if layer.name.endswith(".W")) + V * d
    forward = 2 * T * (matmul_weights + L * 2 * T * d)              # per sequence, multiply-add = 2
    assert sum(f for _, _, f in model.layer_flops()) == forward == gpt_forward_flops(T, V, L, d, 4 * d)
    assert model.flops_per_sample == 3 * forward                    # the protocol's: forward and backward
    assert [p for _, p, _ in model.layer_flops()] == [b - a for a, b in model.layer_groups()]


def test_inputs_not_modified_and_outputs_fresh():
    model = tiny()
    X, y = tokens(model, B=2)
    p = model.init(0)
    copies = [a.copy() for a in (p, X, y)]
    _, g1 = model.loss_and_grad(p, X, y)
    logits = model.logits(p, X)
    _, g2 = model.loss_and_grad(p, X, y)
    assert all(np.array_equal(a, b) for a, b in zip((p, X, y), copies))
    assert g1 is not g2 and np.array_equal(g1, g2)
    assert not np.shares_memory(logits, model._work[("numpy", (2, 5), "<f4")].arrays["logits"])
    state = pickle.loads(pickle.dumps(model))
    assert state._work == {} and state.describe() == model.describe()


def test_bad_inputs_one_line_each():
    with pytest.raises(ValueError, match=r"^n_heads: a divisor of d_model \(64\), got 5$"):
        GPT(d_model=64, n_heads=5)
    with pytest.raises(ValueError, match=r"^vocab: an integer >= 2, got 1$"):
        GPT(vocab=1)
    model = tiny()
    p = model.init(0)
    X, y = tokens(model, B=2)
    with pytest.raises(ValueError, match=r"^X: token ids in \[0, 7\), got values from 1 to 7$"):
        model.loss(p, np.where(X == 0, 7, X), y)
    with pytest.raises(ValueError, match=r"^X: whole-number token ids"):
        model.loss(p, X + 0.5, y)
    with pytest.raises(ValueError, match=r"^X: token ids of shape \(B, T\) with B >= 1 and 1 <= T <= context \(5\)"):
        model.loss(p, np.zeros((2, 6), np.int64), np.zeros((2, 6), np.int64))
    with pytest.raises(ValueError, match=r"^y: integer next tokens of X's shape"):
        model.loss(p, X, y[:, :3])


def test_sgd_learns_a_deterministic_sequence():
    # each next token is a fixed function of the current and the one before it: a model that
    # attends to the previous position reaches near zero loss; one that cannot stays near log(V)/2
    rng = np.random.default_rng(0)
    V, T = 6, 8
    table = rng.integers(0, V, (V, V))
    seqs = np.empty((64, T + 1), np.int64)
    seqs[:, :2] = rng.integers(0, V, (64, 2))
    for t in range(2, T + 1):
        seqs[:, t] = table[seqs[:, t - 2], seqs[:, t - 1]]
    X, y = seqs[:, :-1], seqs[:, 1:]
    model = GPT(context=T, vocab=V, n_layers=2, d_model=32, n_heads=4)
    p = model.init(0)
    first = model.loss(p, X, y)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    # one BLAS thread, as a worker runs: threaded BLAS on these small matrices only waits on a busy machine
    with threadpool_limits(limits=1, user_api="blas"):
        for step in range(1, 301):                   # Adam, written out
            _, g = model.loss_and_grad(p, X, y)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            p -= 0.01 * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    assert first > 1.5 and model.loss(p, X, y) < 0.25 * first


def test_doctests():
    assert doctest.testmod(gpt_module).failed == 0


# --- PyTorch as an independent oracle (optional: skipped where torch is not installed) ----

def test_matches_pytorch_autograd():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    model = tiny(n_layers=2, d_model=12, n_heads=3, context=6, vocab=9)
    X, y = tokens(model, B=3, seed=4)
    p = params64(model, seed=2)
    loss, grad = model.loss_and_grad(p, X, y)

    flat = torch.tensor(p, requires_grad=True)
    P = {layer.name: flat[layer.start:layer.stop].view(*layer.shape) for layer in model.layers}
    B, T = X.shape
    d, H = model.d_model, model.n_heads
    x = P["wte"][torch.tensor(X)] + P["wpe"][:T]
    for i in range(model.n_layers):
        a = F.layer_norm(x, (d,), P[f"h{i}.ln1.g"], P[f"h{i}.ln1.b"], eps=1e-5)
        q, k, v = (a @ P[f"h{i}.attn.W"] + P[f"h{i}.attn.b"]).split(d, dim=-1)
        q, k, v = (t.view(B, T, H, d // H).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d)
        x = x + o @ P[f"h{i}.proj.W"] + P[f"h{i}.proj.b"]
        m = F.layer_norm(x, (d,), P[f"h{i}.ln2.g"], P[f"h{i}.ln2.b"], eps=1e-5)
        x = x + F.gelu(m @ P[f"h{i}.fc.W"] + P[f"h{i}.fc.b"], approximate="tanh") @ P[f"h{i}.out.W"] + P[f"h{i}.out.b"]
    logits = F.layer_norm(x, (d,), P["ln_f.g"], P["ln_f.b"], eps=1e-5) @ P["wte"].T
    ref = F.cross_entropy(logits.reshape(-1, model.vocab), torch.tensor(y).reshape(-1))
    ref.backward()
    assert abs(loss - ref.item()) < 1e-12
    np.testing.assert_allclose(grad, flat.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_the_benchmark_peer_is_the_same_model():
    # bench --gpt times torch_gpt against ours: it must compute the same loss and gradients
    torch = pytest.importorskip("torch")
    from workbench.bench.gpt import torch_gpt
    model = tiny(n_layers=2, d_model=12, n_heads=3, context=6, vocab=9)
    X, y = tokens(model, B=3, seed=6)
    p = params64(model, seed=3).astype(np.float32)
    loss, grad = model.loss_and_grad(p, X, y)
    net = torch_gpt(model, p)
    ref = net(torch.from_numpy(X), torch.from_numpy(np.ascontiguousarray(y)))
    ref.backward()
    assert abs(loss - ref.item()) < 1e-5
    G = model.views(grad)
    np.testing.assert_allclose(net.h[1].c_fc.weight.grad.numpy(), G["h1.fc.W"].T, rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(net.wte.weight.grad.numpy(), G["wte"], rtol=1e-3, atol=1e-6)   # both uses of the tied table
    np.testing.assert_allclose(net.h[0].ln_1.weight.grad.numpy(), G["h0.ln1.g"], rtol=1e-3, atol=1e-6)


@pytest.mark.gpu
def test_cupy_gives_numpys_loss_and_gradient():
    # the same code on a GPU worker: xp is taken from params (CuPy there)
    cp = pytest.importorskip("cupy")
    model = tiny(n_layers=2, d_model=16, n_heads=4, context=8, vocab=11)
    X, y = tokens(model, B=4, seed=9)
    p = params64(model, seed=4)
    loss, grad = model.loss_and_grad(p, X, y)
    loss_gpu, grad_gpu = model.loss_and_grad(cp.asarray(p), cp.asarray(X), cp.asarray(y))
    assert abs(loss_gpu - loss) < 1e-10
    np.testing.assert_allclose(cp.asnumpy(grad_gpu), grad, rtol=1e-8, atol=1e-12)
    assert np.array_equal(cp.asnumpy(model.predict(cp.asarray(p), cp.asarray(X))), model.predict(p, X))
