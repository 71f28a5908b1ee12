"""A GPT-style decoder over one flat parameter vector, with a hand-written backward pass.

The architecture is GPT-2's (Radford et al. 2019) at any size: token and learned position
embeddings; `n_layers` pre-LayerNorm blocks, each causal multi-head self-attention
(`n_heads` heads of d_model / n_heads) then a GELU MLP of width 4 * d_model, both added to
the residual stream; a final LayerNorm; and an output head TIED to the token embedding
(logits = h @ wte.T, as GPT-2: the vocabulary matrix is stored once and gets both
gradients). The loss is the mean cross-entropy over every next token of every sequence,
in nats per token.

It follows the conventions of `maths.models`: parameters are one flat float32 vector
(float64 for gradient checks) whose named views (`views`) are the tensors below, in
forward order; the array module is taken from `params`, so the same code runs on NumPy
and CuPy. A row of X is a sequence of `context` token ids (stored as float32 by the
datasets; they are integers), and y the same sequence shifted by one: y[b, t] is the
token after X[b, t].

>>> model = GPT(context=8, vocab=11, n_layers=1, d_model=16, n_heads=2)
>>> model.describe()
'gpt L1-d16-h2-T8-V11 (3,616 params)'
>>> params = model.init(seed=0)
>>> X = np.arange(16).reshape(2, 8) % 11
>>> loss, grad = model.loss_and_grad(params, X, (X + 1) % 11)
>>> grad.shape == params.shape, abs(loss - math.log(11)) < 0.1     # near uniform at init
(True, True)

Tensors (W as (fan_in, fan_out), so a layer is `x @ W + b`):

    wte (V, d), wpe (T, d)                                   group "embed"
    h{i}.ln1.g, h{i}.ln1.b (d,)   h{i}.attn.W (d, 3d), .b    group "h{i}"
    h{i}.proj.W (d, d), .b        h{i}.ln2.g, .b
    h{i}.fc.W (d, 4d), .b         h{i}.out.W (4d, d), .b
    ln_f.g, ln_f.b (d,)                                      group "ln_f"

`layout()` lists every tensor (LayerNorm gains and biases are 1-D: the layer-wise rules
and weight decay treat them as biases); `layer_groups()` the three kinds of group above,
and `on_grad_ready` fires per group, last first (ln_f, the blocks from the top, then the
embeddings, whose tied gradient is final only at the end).
"""
from __future__ import annotations

import math

import numpy as np

from ..config import DEFAULT_GPT
from .models import (
    Array,
    GradReady,
    Layer,
    Model,
    _positive_int,
    _type_name,
    _Workspace,
    get_array_module,
    stacked_calls,
)

LN_EPS = 1e-5                       # GPT-2's LayerNorm epsilon
GELU_C = math.sqrt(2.0 / math.pi)   # the tanh approximation of GELU (GPT-2's)
GELU_A = 0.044715
INIT_STD = 0.02                     # GPT-2: N(0, 0.02) weights; residual projections / sqrt(2 L)
INIT_STD_POS = 0.01                 # GPT-2's position embedding
BLOCK_ELEMENTS = 1 << 15            # elementwise chains run over blocks of this many (128 KiB of float32)


class GPT(Model):
    """Decoder-only transformer language model (see the module docstring).

    Args:
        context: tokens per sequence T (the model's `n_features`: a row of X); the
            position embedding has this many rows, and shorter sequences use its first rows.
        vocab: vocabulary size V (the model's `n_classes`), >= 2.
        n_layers: transformer blocks L, >= 1.
        d_model: width of the residual stream d, a multiple of n_heads.
        n_heads: attention heads H; each attends with d / H dimensions.
    """

    name = "gpt"

    def __init__(self, context: int = DEFAULT_GPT["context"], vocab: int = 65,
                 n_layers: int = DEFAULT_GPT["n_layers"], d_model: int = DEFAULT_GPT["d_model"],
                 n_heads: int = DEFAULT_GPT["n_heads"]):
        super().__init__(_positive_int("context", context), _positive_int("vocab", vocab, minimum=2))
        self.context, self.vocab = self.n_features, self.n_classes
        self.n_layers = _positive_int("n_layers", n_layers)
        self.d_model = _positive_int("d_model", d_model)
        self.n_heads = _positive_int("n_heads", n_heads)
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads: a divisor of d_model ({self.d_model}), got {self.n_heads}")
        d, L, V, T = self.d_model, self.n_layers, self.vocab, self.context
        resid = INIT_STD / math.sqrt(2 * L)
        groups: list[tuple[str, list[tuple[str, tuple[int, ...], str | float]]]] = [
            ("embed", [("wte", (V, d), INIT_STD), ("wpe", (T, d), INIT_STD_POS)])]
        for i in range(L):
            groups.append((f"h{i}", [
                (f"h{i}.ln1.g", (d,), "ones"), (f"h{i}.ln1.b", (d,), 0.0),
                (f"h{i}.attn.W", (d, 3 * d), INIT_STD), (f"h{i}.attn.b", (3 * d,), 0.0),
                (f"h{i}.proj.W", (d, d), resid), (f"h{i}.proj.b", (d,), 0.0),
                (f"h{i}.ln2.g", (d,), "ones"), (f"h{i}.ln2.b", (d,), 0.0),
                (f"h{i}.fc.W", (d, 4 * d), INIT_STD), (f"h{i}.fc.b", (4 * d,), 0.0),
                (f"h{i}.out.W", (4 * d, d), resid), (f"h{i}.out.b", (d,), 0.0)]))
        groups.append(("ln_f", [("ln_f.g", (d,), "ones"), ("ln_f.b", (d,), 0.0)]))
        offset = 0
        self._init_spec: dict[str, str | float] = {}
        for _, tensors in groups:
            start = offset
            for tname, shape, init in tensors:
                layer = Layer(tname, shape, offset)
                self.layers.append(layer)
                self._init_spec[tname] = init
                offset = layer.stop
            self._groups.append((start, offset))
        self.n_params = offset

    # --- public API -------------------------------------------------------------------

    def init(self, seed: int) -> np.ndarray:
        """Fresh parameters as GPT-2 draws them: weights N(0, 0.02), the residual
        projections (proj, out) N(0, 0.02 / sqrt(2 L)), the position embedding N(0, 0.01),
        LayerNorm gains 1, biases 0.

        Args:
            seed: the same seed always gives the same vector.
        Returns:
            (n_params,) float32 NumPy array.
        """
        return super().init(seed)

    def _draw(self, rng: np.random.Generator, params: np.ndarray) -> None:
        for layer in self.layers:
            init = self._init_spec[layer.name]
            if init == "ones":
                params[layer.start:layer.stop] = 1.0
            elif init:
                params[layer.start:layer.stop] = rng.standard_normal(layer.size, dtype=np.float32) * np.float32(init)

    def loss_and_grad(self, params: Array, X: Array, y: Array, grad_out: Array | None = None,
                      on_grad_ready: GradReady | None = None) -> tuple[float, Array]:
        """Mean next-token cross-entropy (nats per token) over the batch, and its gradient.

        Args:
            params: (n_params,) flat vector; float32 (or float64 for gradient checks).
            X: (B, T) token ids, 1 <= T <= context, any integer or float dtype holding integers.
            y: (B, T) integer next tokens.
            grad_out: optional (n_params,) contiguous array of params.dtype to write into.
            on_grad_ready: optional `cb(start, stop)`, called once per layer group, last first.
        Returns:
            (loss as a Python float, grad): grad is `grad_out` if given, else a new array.
        """
        xp = get_array_module(params)
        tok, y = self._check_tokens(xp, params, X, y)
        grad = self._check_grad_out(xp, params, grad_out)
        B, T = tok.shape
        ws = self._workspace(xp, (B, T), params.dtype, keep=True)
        P = self.views(params)
        logits = self._forward(xp, ws, P, tok, keep=True)                  # (B*T, V)
        loss = _cross_entropy(xp, ws, logits, y.reshape(-1), want_grad=True)
        self._backward(xp, ws, P, self.views(grad), tok, logits, on_grad_ready)
        return loss, grad

    def loss(self, params: Array, X: Array, y: Array) -> float:
        """Mean next-token cross-entropy of `params` on (X, y), nats per token."""
        xp = get_array_module(params)
        tok, y = self._check_tokens(xp, params, X, y)
        ws = self._workspace(xp, tok.shape, params.dtype, keep=False)
        logits = self._forward(xp, ws, self.views(params), tok, keep=False)
        return _cross_entropy(xp, ws, logits, y.reshape(-1), want_grad=False)

    def logits(self, params: Array, X: Array) -> Array:
        """Next-token scores at every position: (B, T, V), a new array of params.dtype."""
        xp = get_array_module(params)
        tok, _ = self._check_tokens(xp, params, X, None)
        ws = self._workspace(xp, tok.shape, params.dtype, keep=False)
        return self._forward(xp, ws, self.views(params), tok, keep=False).reshape(*tok.shape, self.vocab).copy()

    def predict(self, params: Array, X: Array) -> Array:
        """The most likely next token at every position: (B, T) int64."""
        return self.logits(params, X).argmax(axis=-1)

    def loss_and_grad_stacked(self, params: Array, X: Array, y: Array, grad_out: Array) -> Array:
        """K independent `loss_and_grad` calls, for K batches of B sequences each (the
        simulated cluster's batched compute and lockstep paths call this).

        Each slice is one plain `loss_and_grad` call into its row of `grad_out`, so every
        number is bitwise what K separate calls give: a slice of B sequences is already a
        large pass (B * T tokens through every matmul), so stacking them further would gain
        little and would change the BLAS calls' shapes.

        Args:
            params: (K, n_params) one vector per slice, or (n_params,) shared by all.
            X: (K, B, T) token ids.
            y: (K, B, T) next tokens.
            grad_out: (K, n_params) array the K gradients are written into.
        Returns:
            (K,) the mean loss of each slice, params' dtype.
        """
        return stacked_calls(self.loss_and_grad, params, X, y, grad_out)

    def layer_flops(self) -> list[tuple[str, int, float]]:
        """(group, parameters, forward FLOPs of one sequence of `context` tokens) of each layer
        group, in forward order (the base class's `flops_per_sample` is 3x their sum): the
        embeddings (a lookup: none), each block (its matmuls and the attention's full T x T
        products), and the final LayerNorm with the tied head's matmul. The formula is
        `gpt_forward_flops`, shared with the simulator's published language models.

        >>> GPT(context=8, vocab=11, n_layers=1, d_model=16, n_heads=2).layer_flops()
        [('embed', 304, 0.0), ('h0', 3280, 53248.0), ('ln_f', 32, 2816.0)]
        """
        args = dict(context=self.context, vocab=self.vocab, d_model=self.d_model, ffn=4 * self.d_model)
        head = gpt_forward_flops(n_layers=0, **args)
        block = gpt_forward_flops(n_layers=1, **args) - head
        sizes = [b - a for a, b in self._groups]
        return [("embed", sizes[0], 0.0), *((f"h{i}", sizes[1 + i], block) for i in range(self.n_layers)),
                ("ln_f", sizes[-1], head)]

    def score(self, params: Array, X: Array, y: Array) -> tuple[float, int]:
        """Summed cross-entropy over every token of (X, y) and the tokens predicted right, in
        one forward pass: what the evaluator adds up (a mean per token is the sum over
        `y.size`).

        Returns:
            (sum of the B * T losses as a Python float, correct next tokens as an int).
        """
        xp = get_array_module(params)
        tok, y = self._check_tokens(xp, params, X, y)
        ws = self._workspace(xp, tok.shape, params.dtype, keep=False)
        logits = self._forward(xp, ws, self.views(params), tok, keep=False)    # (B*T, V)
        yf = y.reshape(-1)
        right = int((logits.argmax(axis=1) == yf).sum())
        loss = _cross_entropy(xp, ws, logits, yf, want_grad=False)
        return loss * yf.shape[0], right

    def activation_bytes(self, batch: int, itemsize: int = 4) -> int:
        """Bytes this implementation keeps for the backward pass of `batch` sequences
        (`gpt_activation_floats`): what preflight's memory estimate charges per worker."""
        return itemsize * batch * gpt_activation_floats(self.context, self.vocab, self.n_layers, self.d_model,
                                                        self.n_heads, ffn=4 * self.d_model)

    def _arch(self) -> str:
        return f"L{self.n_layers}-d{self.d_model}-h{self.n_heads}-T{self.context}-V{self.vocab}"

    # --- checks -----------------------------------------------------------------------

    def _check_tokens(self, xp, params: Array, X: Array, y: Array | None) -> tuple[Array, Array | None]:
        """(B, T) integer token ids from X (and y checked), else a one-line error."""
        if params.dtype.kind != "f":
            raise ValueError(f"params: a float32 or float64 vector, got {params.dtype}")
        for name, a in (("X", X), ("y", y)):
            if a is not None and not isinstance(a, xp.ndarray):
                raise TypeError(f"{name}: a {xp.__name__} array like params, got {_type_name(a)}")
        if X.ndim != 2 or not 1 <= X.shape[1] <= self.context or X.shape[0] == 0:
            raise ValueError(f"X: token ids of shape (B, T) with B >= 1 and 1 <= T <= context ({self.context}), "
                             f"got shape {tuple(X.shape)}")
        tok = _as_tokens(xp, "X", X, self.vocab)
        if y is not None:
            if y.shape != X.shape or y.dtype.kind not in "iu":
                raise ValueError(f"y: integer next tokens of X's shape {tuple(X.shape)}, got {y.dtype} of shape "
                                 f"{tuple(y.shape)}")
            y = _as_tokens(xp, "y", y, self.vocab)
        return tok, y

    # --- forward and backward ---------------------------------------------------------

    def _forward(self, xp, ws: _Workspace, P: dict, tok: Array, keep: bool) -> Array:
        """Logits (B*T, V) in the workspace; with `keep` every activation backward reads."""
        B, T = tok.shape
        N, d, H = B * T, self.d_model, self.n_heads
        hd = d // H
        x = ws.empty("x", (B, T, d))                                        # the residual stream
        xp.take(P["wte"], tok, axis=0, out=x)
        x += P["wpe"][:T]
        x2 = x.reshape(N, d)
        mask = ws.arrays.get("mask")
        if mask is None:            # [key j, query i]: 0 where j <= i, -inf where the key is in the future
            mask = ws.arrays["mask"] = xp.tril(xp.full((T, T), -xp.inf, dtype=ws.dtype), k=-1)
        scale = 1.0 / math.sqrt(hd)
        for i in range(self.n_layers):
            tag = str(i) if keep else ""                                    # forward-only: one set of buffers
            a = _layernorm(xp, ws, f"ln1_{tag}", x2, P[f"h{i}.ln1.g"], P[f"h{i}.ln1.b"])   # (N, d)
            qkv = ws.empty(f"qkv{tag}", (N, 3 * d))
            xp.matmul(a, P[f"h{i}.attn.W"], out=qkv)
            qkv += P[f"h{i}.attn.b"]
            qkv[:, :d] *= scale                                             # q scaled once, not the T x T scores
            heads = qkv.reshape(B, T, 3, H, hd)
            q, k, v = (heads[:, :, j].transpose(0, 2, 1, 3) for j in range(3))   # (B, H, T, hd) views
            # The scores are kept transposed, [b, h, key, query]: the softmax then reduces over
            # axis -2 and broadcasts along it, which NumPy runs as whole-row vector operations
            # (over the last axis of short rows it runs ~3x slower).
            att = ws.empty(f"att{tag}", (B, H, T, T))
            xp.matmul(k, q.transpose(0, 1, 3, 2), out=att)                 # (B, H, Tk, Tq)
            _softmax_keys(xp, att, mask)                                    # probabilities, kept for backward
            yh = ws.empty("yh", (B, H, T, hd))
            xp.matmul(att.transpose(0, 1, 3, 2), v, out=yh)                 # (B, H, Tq, hd)
            yatt = ws.empty(f"yatt{tag}", (N, d))
            yatt.reshape(B, T, H, hd)[...] = yh.transpose(0, 2, 1, 3)
            proj = ws.empty("proj", (N, d))
            xp.matmul(yatt, P[f"h{i}.proj.W"], out=proj)
            proj += P[f"h{i}.proj.b"]
            x2 += proj
            m = _layernorm(xp, ws, f"ln2_{tag}", x2, P[f"h{i}.ln2.g"], P[f"h{i}.ln2.b"])
            u = ws.empty(f"u{tag}", (N, 4 * d))
            xp.matmul(m, P[f"h{i}.fc.W"], out=u)
            u += P[f"h{i}.fc.b"]
            g2 = _gelu2(xp, ws, tag, u)                                     # 2 gelu(u): the 0.5 is applied below
            out = ws.empty("mlp_out", (N, d))
            xp.matmul(g2, P[f"h{i}.out.W"], out=out)
            out *= 0.5                                                      # exact: a power of two
            out += P[f"h{i}.out.b"]
            x2 += out
        hf = _layernorm(xp, ws, "lnf_", x2, P["ln_f.g"], P["ln_f.b"])
        logits = ws.empty("logits", (N, self.vocab))
        xp.matmul(hf, P["wte"].T, out=logits)                               # the tied head
        return logits

    def _backward(self, xp, ws: _Workspace, P: dict, G: dict, tok: Array, dlogits: Array,
                  on_grad_ready: GradReady | None) -> None:
        B, T = tok.shape
        N, d, H = B * T, self.d_model, self.n_heads
        hd = d // H
        A = ws.arrays
        scale = 1.0 / math.sqrt(hd)
        hf = A["lnf_a"]
        xp.matmul(dlogits.T, hf, out=G["wte"])                             # the head's part of wte's gradient
        dhf = ws.empty("dh", (N, d))
        xp.matmul(dlogits, P["wte"], out=dhf)
        dx = ws.empty("dx", (N, d))
        _layernorm_backward(xp, ws, "lnf_", dhf, P["ln_f.g"], G["ln_f.g"], G["ln_f.b"], dx, add=False)
        self._ready(on_grad_ready, self.n_layers + 1)
        for i in reversed(range(self.n_layers)):
            t = str(i)
            # MLP: x += gelu(LN2(x) @ fc.W + fc.b) @ out.W + out.b, with 2 gelu kept (g2)
            xp.matmul(A[f"g{t}"].T, dx, out=G[f"h{i}.out.W"])
            G[f"h{i}.out.W"] *= 0.5
            xp.sum(dx, axis=0, out=G[f"h{i}.out.b"])
            du = ws.empty("du", (N, 4 * d))
            xp.matmul(dx, P[f"h{i}.out.W"].T, out=du)
            _gelu2_backward(xp, ws, t, du)                                  # du := 2 dloss/du (halved below)
            xp.matmul(A[f"ln2_{t}a"].T, du, out=G[f"h{i}.fc.W"])
            G[f"h{i}.fc.W"] *= 0.5
            xp.sum(du, axis=0, out=G[f"h{i}.fc.b"])
            G[f"h{i}.fc.b"] *= 0.5
            dm = ws.empty("dh", (N, d))
            xp.matmul(du, P[f"h{i}.fc.W"].T, out=dm)
            dm *= 0.5
            _layernorm_backward(xp, ws, f"ln2_{t}", dm, P[f"h{i}.ln2.g"], G[f"h{i}.ln2.g"], G[f"h{i}.ln2.b"],
                                dx, add=True)
            # attention: x += softmax(q k^T / sqrt(hd) + mask) v @ proj.W + proj.b
            xp.matmul(A[f"yatt{t}"].T, dx, out=G[f"h{i}.proj.W"])
            xp.sum(dx, axis=0, out=G[f"h{i}.proj.b"])
            dyatt = ws.empty("dh", (N, d))
            xp.matmul(dx, P[f"h{i}.proj.W"].T, out=dyatt)
            dyh = ws.empty("yh", (B, H, T, hd))
            dyh[...] = dyatt.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
            heads = A[f"qkv{t}"].reshape(B, T, 3, H, hd)
            q, k, v = (heads[:, :, j].transpose(0, 2, 1, 3) for j in range(3))   # q already scaled
            att = A[f"att{t}"]                                              # (B, H, Tk, Tq) probabilities
            datt = ws.empty("datt", (B, H, T, T))
            xp.matmul(v, dyh.transpose(0, 1, 3, 2), out=datt)              # dloss/dprobabilities, [key, query]
            dqkv = ws.empty("dqkv", (N, 3 * d))
            dheads = dqkv.reshape(B, T, 3, H, hd)
            part = ws.empty("part", (B, H, T, hd))
            xp.matmul(att, dyh, out=part)                                   # dv
            dheads[:, :, 2] = part.transpose(0, 2, 1, 3)
            _softmax_keys_backward(xp, att, datt)                           # datt := dloss/dscores
            xp.matmul(datt.transpose(0, 1, 3, 2), k, out=part)              # d(q scaled)
            part *= scale
            dheads[:, :, 0] = part.transpose(0, 2, 1, 3)
            xp.matmul(datt, q, out=part)                                    # dk
            dheads[:, :, 1] = part.transpose(0, 2, 1, 3)
            xp.matmul(A[f"ln1_{t}a"].T, dqkv, out=G[f"h{i}.attn.W"])
            xp.sum(dqkv, axis=0, out=G[f"h{i}.attn.b"])
            da = ws.empty("dh", (N, d))
            xp.matmul(dqkv, P[f"h{i}.attn.W"].T, out=da)
            _layernorm_backward(xp, ws, f"ln1_{t}", da, P[f"h{i}.ln1.g"], G[f"h{i}.ln1.g"], G[f"h{i}.ln1.b"],
                                dx, add=True)
            self._ready(on_grad_ready, i + 1)
        # embeddings: x = wte[tok] + wpe[:T]; wte's lookup part by a one-hot matmul (BLAS,
        # deterministic: a scatter-add would be slower on NumPy and order-dependent on a GPU)
        gpe = G["wpe"]
        xp.sum(dx.reshape(B, T, d), axis=0, out=gpe[:T])
        if T < self.context:
            gpe[T:] = 0
        onehot = ws.empty("onehot", (N, self.vocab))
        onehot[...] = tok.reshape(N, 1) == xp.arange(self.vocab)
        G["wte"] += onehot.T @ dx
        self._ready(on_grad_ready, 0)


# --- the pieces (NumPy/CuPy alike, writing into workspace buffers) -------------------------


def _as_tokens(xp, name: str, a: Array, vocab: int) -> Array:
    """`a` as intp token ids in [0, vocab), else ValueError naming `name`."""
    if a.dtype.kind in "iu":
        tok = a.astype(xp.intp, copy=False)
    elif a.dtype.kind == "f":
        tok = a.astype(xp.intp)
        if not bool((tok == a).all()):
            raise ValueError(f"{name}: whole-number token ids, got fractional values")
    else:
        raise ValueError(f"{name}: integer token ids, got dtype {a.dtype}")
    lo, hi = int(tok.min()), int(tok.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{name}: token ids in [0, {vocab}), got values from {lo} to {hi}")
    return tok


def _layernorm(xp, ws: _Workspace, key: str, x: Array, g: Array, b: Array) -> Array:
    """LayerNorm over the last axis of x (N, d): returns a = xhat * g + b, keeping
    xhat (`key`xhat) and 1/std (`key`rstd) for backward."""
    N, d = x.shape
    xhat = ws.empty(key + "xhat", (N, d))
    mean = x.mean(axis=1, keepdims=True)
    xp.subtract(x, mean, out=xhat)
    var = xp.einsum("ij,ij->i", xhat, xhat)[:, None]                   # one pass, no squared temporary
    var *= 1.0 / d
    var += LN_EPS
    rstd = ws.empty(key + "rstd", (N, 1))
    xp.sqrt(var, out=rstd)
    xp.reciprocal(rstd, out=rstd)
    xhat *= rstd
    a = ws.empty(key + "a", (N, d))
    xp.multiply(xhat, g, out=a)
    a += b
    return a


def _layernorm_backward(xp, ws: _Workspace, key: str, da: Array, g: Array, gg: Array, gb: Array,
                        dx: Array, add: bool) -> None:
    """From da (N, d), the gradient at LayerNorm's output: writes the gain's and bias's
    gradients (gg, gb) and writes (add=False) or adds (add=True) the input's into dx.
    dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = da * g."""
    xhat, rstd = ws.arrays[key + "xhat"], ws.arrays[key + "rstd"]
    d = da.shape[1]
    gg[...] = xp.einsum("ij,ij->j", da, xhat)
    xp.sum(da, axis=0, out=gb)
    da *= g                                                             # da := dxhat
    c1 = da.mean(axis=1, keepdims=True)
    c2 = xp.einsum("ij,ij->i", da, xhat)[:, None]
    c2 *= 1.0 / d
    tmp = ws.empty("ln_tmp", da.shape)
    xp.multiply(xhat, c2, out=tmp)
    da -= c1
    da -= tmp
    da *= rstd
    if add:
        dx += da
    else:
        dx[...] = da


def _blocks(xp, n_rows: int, row_size: int) -> list[slice]:
    """Row slices of about BLOCK_ELEMENTS elements each on NumPy (one slice on a GPU).

    A chain of elementwise NumPy operations over a big array streams it through memory
    once per operation; done a block at a time, the block stays in the core's cache between
    them, so a chain of ~8 operations costs about one pass (GELU: 2.2x faster here).

    >>> _blocks(np, 5, 10000)                  # 3 rows of 10,000 elements a block
    [slice(0, 3, None), slice(3, 5, None)]
    """
    if xp is not np:
        return [slice(0, n_rows)]
    rows = max(1, BLOCK_ELEMENTS // max(1, row_size))
    return [slice(r, min(r + rows, n_rows)) for r in range(0, n_rows, rows)]


def _gelu2(xp, ws: _Workspace, tag: str, u: Array) -> Array:
    """2 GELU(u) in the tanh form, u (1 + tanh(c (u + a u^3))), keeping the tanh for
    backward; the caller applies the 0.5 to the (4x smaller) product with the next matrix."""
    T, g2 = ws.empty(f"tanh{tag}", u.shape), ws.empty(f"g{tag}", u.shape)
    for rows in _blocks(xp, u.shape[0], u.shape[1]):
        ub, t = u[rows], T[rows]
        xp.multiply(ub, ub, out=t)
        t *= GELU_A * GELU_C
        t += GELU_C
        t *= ub                                                         # c (u + a u^3)
        xp.tanh(t, out=t)
        gb = g2[rows]
        xp.multiply(t, ub, out=gb)
        gb += ub
    return g2


def _gelu2_backward(xp, ws: _Workspace, tag: str, dg: Array) -> None:
    """dg := dg * 2 GELU'(u), 2 GELU'(u) = 1 + t + u (1 - t^2) c (1 + 3 a u^2)."""
    U, T = ws.arrays[f"u{tag}"], ws.arrays[f"tanh{tag}"]
    blocks = _blocks(xp, U.shape[0], U.shape[1])
    width = blocks[0].stop - blocks[0].start
    S, R = ws.empty("gelu_d", (width, U.shape[1])), ws.empty("gelu_r", (width, U.shape[1]))
    for rows in blocks:
        u, t, n = U[rows], T[rows], rows.stop - rows.start
        s, r = S[:n], R[:n]
        xp.multiply(u, u, out=s)
        s *= 3 * GELU_A * GELU_C
        s += GELU_C
        s *= u                                                          # u c (1 + 3 a u^2)
        xp.multiply(t, t, out=r)
        r *= s
        s -= r                                                          # times (1 - t^2)
        s += t
        s += 1.0
        dg[rows] *= s


def _softmax_keys(xp, z: Array, mask: Array) -> None:
    """z := softmax over axis -2 (the keys of (B, H, Tk, Tq) scores) of z + mask, in place;
    each query's largest score is subtracted first, so exp never overflows."""
    for rows in _blocks(xp, z.shape[0], z[0].size):
        zb = z[rows]
        zb += mask
        zb -= zb.max(axis=-2, keepdims=True)
        xp.exp(zb, out=zb)
        s = zb.sum(axis=-2, keepdims=True)
        xp.reciprocal(s, out=s)
        zb *= s


def _softmax_keys_backward(xp, p: Array, dp: Array) -> None:
    """dp := the gradient at the scores, from dp at the probabilities p (both (B, H, Tk, Tq)):
    p * (dp - sum over the keys of dp * p), in place."""
    for rows in _blocks(xp, p.shape[0], p[0].size):
        pb, db = p[rows], dp[rows]
        db -= xp.einsum("bhji,bhji->bhi", db, pb)[:, :, None, :]
        db *= pb


def _cross_entropy(xp, ws: _Workspace, z: Array, y: Array, want_grad: bool) -> float:
    """Mean cross-entropy of logits z (N, V) against y (N,); z := dloss/dz if want_grad."""
    N = z.shape[0]
    rows = ws.arrays.get("rows")
    if rows is None or rows.shape[0] != N:
        rows = ws.arrays["rows"] = xp.arange(N)
    z -= z.max(axis=1, keepdims=True)
    zy = z[rows, y]
    xp.exp(z, out=z)
    s = z.sum(axis=1, keepdims=True)
    loss = float(xp.mean(xp.log(s[:, 0]) - zy))
    if want_grad:
        z /= s
        z[rows, y] -= 1
        z *= 1.0 / N
    return loss


# --- counts shared with the simulator's published timing models -------------------------


def gpt_forward_flops(context: int, vocab: int, n_layers: int, d_model: int, ffn: int,
                      n_kv: int | None = None, gated: bool = False) -> float:
    """Forward FLOPs of one sequence of `context` tokens through a GPT-style decoder (a
    multiply-add is 2 FLOPs): per token and layer the q, k, v, output, MLP matmuls, and the
    attention's full T x T products (q k^T and the weighted sum of values, 2 T d each, as a
    plain implementation multiplies them before masking); then the output head (d x V).
    The embedding lookups, norms, softmax and activations are not counted (memory bound,
    a few percent), as `sim.timing_models` counts its networks.

    Args:
        context: tokens per sequence T.
        vocab: vocabulary size V.
        n_layers: blocks L.
        d_model: residual width d.
        ffn: the MLP's hidden width (4 d for GPT; Llama's SwiGLU width).
        n_kv: width of k and v (grouped-query attention: kv heads x head size); None: d.
        gated: a gated MLP (SwiGLU: two input matrices, one output) instead of two matrices.
    Returns:
        FLOPs per sequence.

    >>> gpt_forward_flops(1024, 50257, 12, 768, 3072) / 1024 / 1e6   # GPT-2 124M: MFLOP per token
    284.8128
    """
    T, d = int(context), int(d_model)
    kv = d if n_kv is None else int(n_kv)
    per_layer = d * d + 2 * d * kv + d * d + (3 if gated else 2) * d * ffn   # multiply-adds per token
    attention = 2 * T * d                                                   # q k^T and att @ v
    return 2.0 * T * (n_layers * (per_layer + attention) + d * vocab)


def gpt_activation_floats(context: int, vocab: int, n_layers: int, d_model: int, n_heads: int, ffn: int,
                          n_kv: int | None = None, gated: bool = False) -> int:
    """Numbers one sequence keeps for the backward pass of `GPT` (what `_forward` stores
    with keep=True): per token and layer two LayerNorms' normalised inputs, outputs and
    inverse deviations (4 d + 2), q, k, v (d + 2 n_kv), the attention output (d), the MLP's
    pre-activation, its tanh and GELU output (3 ffn; a gated MLP one more), and H T attention
    probabilities; then the final LayerNorm (2 d + 1) and the logits (V). The residual
    stream is updated in place.

    Args: as `gpt_forward_flops`, plus n_heads (attention probabilities are per head).
    Returns:
        floats per sequence.

    >>> gpt_activation_floats(8, 11, 1, 16, 2, 64)
    3056
    """
    T, d = int(context), int(d_model)
    kv = d if n_kv is None else int(n_kv)
    per_layer = 4 * d + 2 + d + 2 * kv + d + (4 if gated else 3) * ffn + n_heads * T
    return T * (n_layers * per_layer + 2 * d + 1 + vocab)


def make_gpt(n_features: int, n_classes: int, n_layers: int = DEFAULT_GPT["n_layers"],
             d_model: int = DEFAULT_GPT["d_model"], n_heads: int = DEFAULT_GPT["n_heads"]) -> GPT:
    """The GPT of a dataset of sequences of `n_features` tokens over `n_classes` symbols (the
    model protocol's factory signature: width and classes first, the model's own knobs after).

    >>> make_gpt(64, 65).describe()
    'gpt L2-d64-h4-T64-V65 (108,352 params)'
    """
    return GPT(context=n_features, vocab=n_classes, n_layers=n_layers, d_model=d_model, n_heads=n_heads)


__all__ = ["GPT", "gpt_activation_floats", "gpt_forward_flops", "make_gpt"]
