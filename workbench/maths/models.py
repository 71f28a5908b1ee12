"""Models over one flat parameter vector: softmax regression, an MLP and a small CNN.

Every model keeps its parameters in ONE flat array (float32 normally, float64 for gradient
checks) and describes the named views into it as `Layer`s. Algorithms only ever see the
flat vector, so averaging, allreduce and shipping chunks between devices are plain
array operations. The code is NumPy/CuPy agnostic: the array module `xp` is taken from
`params`, so the same model runs on a CPU worker (NumPy) and on a GPU worker (CuPy).

>>> model = make_model("mlp", 784, 10, hidden=(512, 256))
>>> params = model.init(seed=0)
>>> params.shape, params.dtype
((535818,), dtype('float32'))
>>> X, y = np.zeros((4, 784), np.float32), np.array([0, 1, 2, 3])
>>> loss, grad = model.loss_and_grad(params, X, y)
>>> grad.shape == params.shape and grad.dtype == params.dtype
True

Each layer's weight and bias lie next to each other (W then b), so the gradient of one
layer is one contiguous slice; `loss_and_grad(..., on_grad_ready=cb)` calls `cb(start,
stop)` as soon as such a slice is final, last layer first, which lets an algorithm ship
gradient chunks while the rest of the backward pass runs.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np

from ..config import DEFAULT_HIDDEN, ConfigError

MODELS: dict[str, str] = {
    "softmax": "softmax regression: one linear layer, n_features -> n_classes",
    "mlp": "multilayer perceptron: ReLU hidden layers of widths `hidden`, then a linear output",
    "cnn": "small CNN: conv3x3-ReLU-maxpool twice (channels `hidden`), then a linear output",
}

TRAIN_FLOPS_FACTOR = 3.0   # a training example's FLOPs over its forward pass's (backward: about twice the forward)
MAX_WORKSPACES = 3  # batch sizes whose training buffers a model keeps (full, last partial, one spare)

Array = Any  # numpy.ndarray or cupy.ndarray
GradReady = Callable[[int, int], None]


class ModelError(ConfigError):
    """A model that does not follow the model protocol (`maths.protocol`), found before any
    worker starts: `model: <what is allowed>, got <the model's name>`."""

    def __init__(self, allowed: str, value: Any):
        super().__init__("model", allowed, value)


def get_array_module(a: Array):
    """The array module (numpy or cupy) that `a` belongs to.

    Looks CuPy up in `sys.modules` instead of importing it: a CuPy array can only exist
    if CuPy is already imported, and CPU-only runs never pay for (or fail on) the import.

    >>> get_array_module(np.zeros(3)) is np
    True
    """
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(a, cupy.ndarray):
        return cupy
    return np


@dataclass(frozen=True)
class Layer:
    """One named view into the flat parameter vector.

    >>> Layer("fc1.W", (784, 512), 0).stop
    401408
    """
    name: str               # "<group>.W" or "<group>.b", e.g. "fc1.W", "conv1.b"
    shape: tuple[int, ...]
    start: int              # offset into the flat vector

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def stop(self) -> int:
        """One past the last offset: the layer is params[start:stop]."""
        return self.start + self.size


_INITS: dict[tuple, np.ndarray] = {}   # Model.init's last few vectors (architecture, seed) -> a private copy


def stacked_calls(loss_and_grad: Callable[..., tuple[Any, Any]], params: Any, X: Any, y: Any,
                  grad_out: Any) -> Any:
    """K plain `loss_and_grad(p, X[k], y[k], grad_out=grad_out[k])` calls, one per slice
    (`params` one row each, or one vector shared): the simulator's batched paths for a model
    that does not stack its own passes, bitwise the calls made one by one. Returns the (K,)
    losses in grad_out's dtype."""
    xp = get_array_module(X)
    K = int(X.shape[0])
    losses = xp.empty(K, dtype=grad_out.dtype)
    for k in range(K):
        p = params if params.ndim == 1 else params[k]
        losses[k] = loss_and_grad(p, X[k], y[k], grad_out=grad_out[k])[0]
    return losses


class _Workspace:
    """Scratch arrays for one (batch size, xp, dtype); allocated on first use, then reused."""

    def __init__(self, xp, dtype):
        self.xp, self.dtype, self.arrays = xp, dtype, {}
        self.memo: dict[int, tuple[Any, Any]] = {}   # id(array) -> (array, what was derived from it)

    def empty(self, name: str, shape: tuple[int, ...], dtype=None) -> Array:
        a = self.arrays.get(name)
        if a is None:
            a = self.arrays[name] = self.xp.empty(shape, dtype or self.dtype)
        return a

    def zeros(self, name: str, shape: tuple[int, ...]) -> Array:
        # Zeroed once: callers only ever write the interior, so borders stay 0 (conv padding).
        a = self.arrays.get(name)
        if a is None:
            a = self.arrays[name] = self.xp.zeros(shape, self.dtype)
        return a


class Model:
    """Base class: a flat parameter layout plus softmax cross-entropy on top of `_forward`.

    Subclasses build their layout with `_build` and implement `_forward` (logits, keeping
    what backward needs in the workspace) and `_backward` (fills the flat gradient, layer
    by layer, last layer first).

    Work buffers are cached on the instance per (batch size, xp, dtype), so a Model is
    NOT thread-safe: use one instance per thread (each worker builds its own). Inputs
    (params, X, y) are never modified; returned arrays never alias the cached buffers.
    """

    name: str = "model"

    def __init__(self, n_features: int, n_classes: int):
        self.n_features = _positive_int("n_features", n_features)
        self.n_classes = _positive_int("n_classes", n_classes, minimum=2)
        self.layers: list[Layer] = []
        self.n_params = 0
        self._init_std: dict[str, float] = {}   # layer name -> init std (0 for biases)
        self._groups: list[tuple[int, int]] = []
        self._spans: list[tuple[str, int, int, tuple[int, ...]]] = []   # (name, start, stop, shape) per layer
        self._work: dict[tuple, _Workspace] = {}

    def _build(self, groups: list[tuple[str, tuple[int, ...], int, float]]) -> None:
        """Lay out (group name, W shape, b size, W init std) groups, W then b, in forward order."""
        offset = 0
        for gname, wshape, bsize, std in groups:
            W = Layer(f"{gname}.W", tuple(wshape), offset)
            b = Layer(f"{gname}.b", (bsize,), W.stop)
            self.layers += [W, b]
            self._init_std[W.name], self._init_std[b.name] = std, 0.0
            self._groups.append((W.start, b.stop))
            offset = b.stop
        self.n_params = offset

    # --- public API -------------------------------------------------------------------

    def init(self, seed: int) -> np.ndarray:
        """Fresh parameters: He-normal before ReLUs, Glorot-normal output layer, zero biases.

        Args:
            seed: the same seed always gives the same vector.
        Returns:
            (n_params,) float32 NumPy array (move it to the GPU with `cupy.asarray`).
        """
        key = (type(self).__name__, self._arch(), self.n_params, seed)
        cached = _INITS.get(key)
        if cached is not None:        # the same vector again (a simulated cluster's 1024 replicas): a copy
            return cached.copy()
        params = np.zeros(self.n_params, np.float32)
        self._draw(np.random.default_rng(seed), params)
        if len(_INITS) >= 4:
            _INITS.pop(next(iter(_INITS)))
        _INITS[key] = params.copy()
        return params

    def _draw(self, rng: np.random.Generator, params: np.ndarray) -> None:
        """Fill the zeroed `params` with this architecture's initial draw from `rng`
        (`init` keeps the last few vectors)."""
        for layer in self.layers:
            std = self._init_std[layer.name]
            if std:
                params[layer.start:layer.stop] = rng.standard_normal(layer.size, dtype=np.float32) * np.float32(std)

    def views(self, params: Array) -> dict[str, Array]:
        """Named, reshaped views into `params` (no copies: writing a view writes `params`).

        Args:
            params: (n_params,) flat vector.
        Returns:
            {layer name: view of shape layer.shape}.
        """
        if params.ndim != 1 or params.shape[0] != self.n_params:
            raise ValueError(f"params: a flat vector of shape ({self.n_params},), got shape {tuple(params.shape)}")
        spans = self._spans
        if len(spans) != len(self.layers):   # cut once: this runs twice per step (params, grad)
            spans = self._spans = [(l.name, l.start, l.stop, l.shape) for l in self.layers]
        return {name: params[a:b].reshape(shape) for name, a, b, shape in spans}

    def layout(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of each tensor in the flat vector, in flat order: the model
        protocol's optional `layout()` (`maths.protocol`). The layer-wise update rules take
        their segments from it (`maths.optim.layout_of`), PowerSGD its matrices, cgdp its
        chunks (tensors sharing the part of the name before the last dot form one group).

        >>> MLP(4, 3, hidden=(2,)).layout()
        (('fc1.W', (4, 2)), ('fc1.b', (2,)), ('fc2.W', (2, 3)), ('fc2.b', (3,)))
        """
        return tuple((layer.name, layer.shape) for layer in self.layers)

    @property
    def flops_per_sample(self) -> float:
        """FLOPs of one training example, forward and backward (3x the forward pass, a
        multiply-add counted as 2): the model protocol's optional `flops_per_sample`,
        which the simulator charges. Counted from the layer shapes (`layer_flops`).

        >>> MLP(64, 10, hidden=(128,)).flops_per_sample    # 3 * 2 * (64*128 + 128*10)
        56832.0
        """
        return TRAIN_FLOPS_FACTOR * sum(f for _, _, f in self.layer_flops())

    def layer_flops(self) -> list[tuple[str, int, float]]:
        """(group name, parameters, forward FLOPs per example) of each layer group, in
        forward order: what the simulator's timing model of this model is made of."""
        raise NotImplementedError

    def layer_groups(self) -> list[tuple[int, int]]:
        """(start, stop) of each layer's W+b slice of the flat vector, in forward order."""
        return list(self._groups)

    def loss_and_grad(self, params: Array, X: Array, y: Array, grad_out: Array | None = None,
                      on_grad_ready: GradReady | None = None) -> tuple[float, Array]:
        """Mean softmax cross-entropy over the batch and its gradient.

        Args:
            params: (n_params,) flat vector; float32 (or float64 for gradient checks).
            X: (B, n_features) inputs; cast to params.dtype if they differ.
            y: (B,) integer class labels in [0, n_classes).
            grad_out: optional (n_params,) contiguous array of params.dtype to write into.
            on_grad_ready: optional `cb(start, stop)`, called once per layer group, last
                layer first, as soon as `grad[start:stop]` holds its final value.
        Returns:
            (loss as a Python float, grad): grad is `grad_out` if given, else a new array.
        """
        xp = get_array_module(params)
        X, y = self._check_batch(xp, params, X, y)
        grad = self._check_grad_out(xp, params, grad_out)
        ws = self._workspace(xp, X.shape[0], params.dtype, keep=True)
        P = self.views(params)
        logits = self._forward(xp, ws, P, X)                              # (B, K)
        loss = _softmax_cross_entropy(xp, ws, logits, y, want_grad=True)  # logits := dloss/dlogits
        self._backward(xp, ws, P, self.views(grad), X, logits, on_grad_ready)
        return loss, grad

    def loss(self, params: Array, X: Array, y: Array) -> float:
        """Mean softmax cross-entropy of `params` on (X, y), as a Python float."""
        xp = get_array_module(params)
        X, y = self._check_batch(xp, params, X, y)
        ws = self._workspace(xp, X.shape[0], params.dtype, keep=False)
        logits = self._forward(xp, ws, self.views(params), X)
        return _softmax_cross_entropy(xp, ws, logits, y, want_grad=False)

    def logits(self, params: Array, X: Array) -> Array:
        """Unnormalised class scores.

        Args:
            params: (n_params,) flat vector.
            X: (B, n_features) inputs.
        Returns:
            (B, n_classes) new array of params.dtype, on the device of params.
        """
        xp = get_array_module(params)
        X, _ = self._check_batch(xp, params, X, None)
        ws = self._workspace(xp, X.shape[0], params.dtype, keep=False)
        return self._forward(xp, ws, self.views(params), X).copy()

    def score(self, params: Array, X: Array, y: Array) -> tuple[float, int]:
        """Summed cross-entropy and the number of labels predicted right, in one forward
        pass: what the evaluator adds up over chunks of a test set.

        Args:
            params: (n_params,) flat vector.
            X: (B, n_features) inputs.
            y: (B,) integer labels, or (B, T) for a model scoring T labels a row (next tokens).
        Returns:
            (sum of the labels' losses as a Python float, correct predictions as an int).
        """
        xp = get_array_module(params)
        y = y.reshape(-1)
        logits = self.logits(params, X)                                     # (B, classes) or (B, T, vocab)
        logits = logits.reshape(y.shape[0], logits.shape[-1])
        m = logits.max(axis=1, keepdims=True)
        lse = xp.log(xp.exp(logits - m).sum(axis=1)) + m[:, 0]
        total = float((lse - logits[xp.arange(len(y)), y]).sum())
        return total, int((logits.argmax(axis=1) == y).sum())

    def predict(self, params: Array, X: Array) -> Array:
        """Predicted class of each row of X: (B,) int64 indices, argmax of the logits."""
        xp = get_array_module(params)
        X, _ = self._check_batch(xp, params, X, None)
        ws = self._workspace(xp, X.shape[0], params.dtype, keep=False)
        return self._forward(xp, ws, self.views(params), X).argmax(axis=1)

    def describe(self) -> str:
        """One line for logs and reports, e.g. 'mlp 784-512-256-10 (535,818 params)'."""
        return f"{self.name} {self._arch()} ({self.n_params:,} params)"

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.describe()}>"

    def drop_work(self) -> None:
        """Free the work buffers kept per batch size; the next call allocates its own again.
        For a model that outlives a one-off computation at another batch size (preflight's
        curvature estimate on the problem's cached model), which would otherwise keep that
        size's buffers as long as the model lives."""
        self._work.clear()

    def __getstate__(self) -> dict:
        # Models travel to Dask workers; scratch buffers (maybe on a GPU) stay behind.
        state = self.__dict__.copy()
        state["_work"] = {}
        return state

    # --- for subclasses ---------------------------------------------------------------

    def _arch(self) -> str:
        raise NotImplementedError

    def _forward(self, xp, ws: _Workspace, P: dict, X: Array) -> Array:
        raise NotImplementedError

    def _backward(self, xp, ws: _Workspace, P: dict, G: dict, X: Array, dlogits: Array,
                  on_grad_ready: GradReady | None) -> None:
        raise NotImplementedError

    def _ready(self, on_grad_ready: GradReady | None, group: int) -> None:
        if on_grad_ready is not None:
            on_grad_ready(*self._groups[group])

    # --- helpers ----------------------------------------------------------------------

    def _workspace(self, xp, B: int, dtype, keep: bool) -> _Workspace:
        # Training shapes repeat every step, so their buffers are kept; forward-only calls
        # (evaluation on big chunks) reuse them when the batch size matches but otherwise
        # get throwaway buffers, so a 2048-row CNN evaluation does not pin hundreds of MB.
        key = (xp.__name__, B, np.dtype(dtype).str)
        ws = self._work.get(key)
        if ws is None:
            ws = _Workspace(xp, dtype)
            if keep:
                if len(self._work) >= MAX_WORKSPACES:
                    self._work.pop(next(iter(self._work)))  # the oldest batch size
                self._work[key] = ws
        return ws

    def _check_batch(self, xp, params: Array, X: Array, y: Array | None) -> tuple[Array, Array | None]:
        if not isinstance(X, xp.ndarray):
            raise TypeError(f"X: a {xp.__name__} array like params, got {_type_name(X)}")
        if X.ndim != 2 or X.shape[1] != self.n_features or X.shape[0] == 0:
            raise ValueError(f"X: shape (B, {self.n_features}) with B >= 1, got shape {tuple(X.shape)}")
        if y is not None:
            if not isinstance(y, xp.ndarray):
                raise TypeError(f"y: a {xp.__name__} array like params, got {_type_name(y)}")
            if y.shape != (X.shape[0],) or y.dtype.kind not in "iu":
                raise ValueError(f"y: integer labels of shape ({X.shape[0]},), got {y.dtype} of shape {tuple(y.shape)}")
        if params.dtype.kind != "f":
            raise ValueError(f"params: a float32 or float64 vector, got {params.dtype}")
        return X.astype(params.dtype, copy=False), y  # copies only if the dtypes differ

    def _check_grad_out(self, xp, params: Array, grad_out: Array | None) -> Array:
        if grad_out is None:
            return xp.empty_like(params)
        if (get_array_module(grad_out) is not xp or grad_out.shape != params.shape
                or grad_out.dtype != params.dtype or not grad_out.flags.c_contiguous):
            raise ValueError(f"grad_out: a contiguous {xp.__name__} array of shape {tuple(params.shape)} and "
                             f"dtype {params.dtype}, got {type(grad_out).__name__} of shape "
                             f"{tuple(grad_out.shape)} and dtype {grad_out.dtype}")
        return grad_out


def _softmax_cross_entropy(xp, ws: _Workspace, z: Array, y: Array, want_grad: bool) -> float:
    """Mean cross-entropy of logits `z` (B, K); overwrites z with dloss/dz if want_grad."""
    B = z.shape[0]
    rows = ws.arrays.get("rows")
    if rows is None:
        rows = ws.arrays["rows"] = xp.arange(B)
    z -= z.max(axis=1, keepdims=True)      # log-sum-exp shift: exp never overflows
    zy = z[rows, y]                         # (B,) shifted logit of the true class
    xp.exp(z, out=z)
    s = z.sum(axis=1, keepdims=True)        # (B, 1) >= 1, so log(s) is finite
    loss = float(xp.mean(xp.log(s[:, 0]) - zy))
    if want_grad:
        z /= s                              # softmax probabilities
        z[rows, y] -= 1
        z *= 1.0 / B                        # the mean over the batch
    return loss


class MLP(Model):
    """ReLU multilayer perceptron: n_features -> hidden[0] -> ... -> n_classes.

    Layers are named fc1, fc2, ..., W of shape (fan_in, fan_out) so a batch is `h @ W + b`.
    """

    name = "mlp"

    def __init__(self, n_features: int, n_classes: int, hidden: tuple[int, ...] = DEFAULT_HIDDEN["mlp"]):
        super().__init__(n_features, n_classes)
        self.hidden = _widths(hidden, "one or more positive integers (layer widths)", minimum=1)
        self._build(_dense_groups((self.n_features, *self.hidden, self.n_classes)))

    def _arch(self) -> str:
        return "-".join(str(w) for w in (self.n_features, *self.hidden, self.n_classes))

    def layer_flops(self) -> list[tuple[str, int, float]]:
        """One fully connected layer per group: fan_in * fan_out multiply-adds per example.

        >>> MLP(64, 10, hidden=(128,)).layer_flops()
        [('fc1', 8320, 16384.0), ('fc2', 1290, 2560.0)]
        """
        out = []
        for W, b in zip(self.layers[::2], self.layers[1::2]):
            n_in, n_out = W.shape
            out.append((W.name[:-2], W.size + b.size, 2.0 * n_in * n_out))
        return out

    def _forward(self, xp, ws, P, X):
        h, last = X, len(self._groups) - 1
        for i in range(last + 1):
            W, b = P[f"fc{i + 1}.W"], P[f"fc{i + 1}.b"]
            z = ws.empty(f"h{i}", (X.shape[0], W.shape[1]))    # (B, fan_out)
            xp.matmul(h, W, out=z)
            z += b
            if i < last:
                xp.maximum(z, 0, out=z)                         # kept post-ReLU: backward masks on h > 0
            h = z
        return h

    def _backward(self, xp, ws, P, G, X, dz, on_grad_ready):
        for i in reversed(range(len(self._groups))):
            h_in = X if i == 0 else ws.arrays[f"h{i - 1}"]      # (B, fan_in)
            xp.matmul(h_in.T, dz, out=G[f"fc{i + 1}.W"])        # (fan_in, fan_out)
            xp.sum(dz, axis=0, out=G[f"fc{i + 1}.b"])
            self._ready(on_grad_ready, i)
            if i > 0:                                           # no gradient w.r.t. the inputs
                dh = ws.empty(f"dh{i - 1}", h_in.shape)
                xp.matmul(dz, P[f"fc{i + 1}.W"].T, out=dh)
                dh *= h_in > 0                                  # ReLU'
                dz = dh


    def loss_and_grad_stacked(self, params: Array, X: Array, y: Array, grad_out: Array) -> Array:
        """K independent `loss_and_grad` calls in one pass, for K slices of B rows each.

        The simulated cluster computes the virtual workers that are ready at the same
        virtual instant this way: one batched matmul per layer over the K slices instead of K
        Python-level calls. On NumPy every number is bitwise what K `loss_and_grad` calls give
        (each slice is the same BLAS call on the same operands, each reduction runs over the
        same elements in the same order; `tests/test_models.py` checks it).

        Args:
            params: (K, n_params) one parameter vector per slice, or (n_params,) shared by all.
            X: (K, B, n_features) inputs, params' dtype.
            y: (K, B) integer labels.
            grad_out: (K, n_params) array the K gradients are written into.
        Returns:
            (K,) the mean loss of each slice, params' dtype.
        """
        xp = get_array_module(X)
        K, B = int(X.shape[0]), int(X.shape[1])
        ws = self._workspace(xp, ("stacked", K, B), X.dtype, keep=True)

        memo = ws.memo

        def views(v: Array) -> dict[str, Array]:
            if v.ndim == 1:
                return self.views(v)
            hit = memo.get(id(v))
            if hit is not None and hit[0] is v:    # the same array object as an earlier pass (the pool's buffers)
                return hit[1]
            out = {lay.name: v[:, lay.start:lay.stop].reshape(K, *lay.shape) for lay in self.layers}
            if v.base is None:   # an array made for this pass (the pool's fresh operands): kept, it would live on
                return out       # in every worker's model (1.2 GB at 1,024 simulated workers and 200 steps)
            if len(memo) >= 4:                     # holds the arrays it names: a few only
                memo.pop(next(iter(memo)))
            memo[id(v)] = (v, out)
            return out

        P, G, last = views(params), views(grad_out), len(self._groups) - 1
        h = X
        for i in range(last + 1):                                   # forward, as _forward
            W, bias = P[f"fc{i + 1}.W"], P[f"fc{i + 1}.b"]
            z = ws.empty(f"h{i}", (K, B, W.shape[-1]))              # (K, B, fan_out)
            xp.matmul(h, W, out=z)
            z += bias if bias.ndim == 1 else bias[:, None, :]
            if i < last:
                xp.maximum(z, 0, out=z)
            h = z
        z = h                                                       # softmax cross-entropy, per row
        idx = memo.get(0)
        if idx is None:
            idx = memo[0] = (None, (xp.arange(K)[:, None], xp.arange(B)[None, :]))
        k_idx, rows = idx[1]
        z -= z.max(axis=2, keepdims=True)
        zy = z[k_idx, rows, y]                                      # (K, B)
        xp.exp(z, out=z)
        s = z.sum(axis=2, keepdims=True)
        losses = xp.mean(xp.log(s[..., 0]) - zy, axis=1)            # (K,)
        z /= s
        z[k_idx, rows, y] -= 1
        z *= 1.0 / B
        dz = z
        for i in reversed(range(last + 1)):                         # backward, as _backward
            h_in = X if i == 0 else ws.arrays[f"h{i - 1}"]          # (K, B, fan_in)
            xp.matmul(h_in.transpose(0, 2, 1), dz, out=G[f"fc{i + 1}.W"])
            xp.sum(dz, axis=1, out=G[f"fc{i + 1}.b"])
            if i > 0:
                W = P[f"fc{i + 1}.W"]
                dh = ws.empty(f"dh{i - 1}", h_in.shape)
                xp.matmul(dz, W.T if W.ndim == 2 else W.transpose(0, 2, 1), out=dh)
                dh *= h_in > 0
                dz = dh
        return losses


class SoftmaxRegression(MLP):
    """Multinomial logistic regression: one linear layer fc1, n_features -> n_classes."""

    name = "softmax"

    def __init__(self, n_features: int, n_classes: int):
        Model.__init__(self, n_features, n_classes)
        self.hidden = ()
        self._build(_dense_groups((self.n_features, self.n_classes)))


class CNN(Model):
    """conv3x3(c1)-ReLU-maxpool2 -> conv3x3(c2)-ReLU-maxpool2 -> linear, on (C, H, W) images.

    X rows are images flattened in (C, H, W) order. Inside, activations are NHWC so a
    convolution is one matmul of im2col patches (B*H*W, 9*C_in) with the kernel stored
    HWIO, (3, 3, C_in, C_out), which reshapes to (9*C_in, C_out) without a copy.
    Convolutions pad by 1; pooling drops a trailing odd row/column (floor), like PyTorch.
    The fc layer reads the pooled features flattened in (h, w, c) order.
    """

    name = "cnn"

    def __init__(self, n_features: int, n_classes: int, hidden: tuple[int, ...] = DEFAULT_HIDDEN["cnn"],
                 image_shape: tuple[int, int, int] | None = None):
        super().__init__(n_features, n_classes)
        if image_shape is None:
            raise ValueError("model: 'cnn' needs a dataset with images (digits, mnist, fashion_mnist, "
                             "cifar10) or another model (softmax, mlp), got model='cnn' with image_shape=None")
        shape = _widths(image_shape, "(C, H, W) positive integers with H, W >= 4", minimum=3, field="image_shape")
        if len(shape) != 3 or shape[1] < 4 or shape[2] < 4:
            raise ValueError(f"image_shape: (C, H, W) positive integers with H, W >= 4, got {image_shape!r}")
        if math.prod(shape) != self.n_features:
            raise ValueError(f"n_features: C*H*W of image_shape {shape} = {math.prod(shape)}, got {n_features}")
        widths = _widths(hidden, "one or two positive integers (conv channels c1, c2)", minimum=1)
        if len(widths) > 2:
            raise ValueError(f"hidden: one or two positive integers (conv channels c1, c2), got {hidden!r}")
        self.image_shape = shape
        c, h, w = shape
        c1 = widths[0]
        c2 = widths[1] if len(widths) > 1 else 2 * c1
        self.hidden = (c1, c2)
        self._sizes = ((h, w), (h // 2, w // 2), (h // 4, w // 4))  # conv1, conv2 and fc input sizes
        n_flat = (h // 4) * (w // 4) * c2
        self._build([
            ("conv1", (3, 3, c, c1), c1, math.sqrt(2.0 / (9 * c))),
            ("conv2", (3, 3, c1, c2), c2, math.sqrt(2.0 / (9 * c1))),
            ("fc", (n_flat, self.n_classes), self.n_classes, math.sqrt(2.0 / (n_flat + self.n_classes))),
        ])

    def _arch(self) -> str:
        c, h, w = self.image_shape
        return f"{c}x{h}x{w}-conv{self.hidden[0]}-conv{self.hidden[1]}-{self.n_classes}"

    def layer_flops(self) -> list[tuple[str, int, float]]:
        """conv1, conv2 (a padded 3x3 convolution keeps its input's size; each 2x2 pooling
        halves it, rounding down) and fc, exact for what `loss_and_grad` multiplies."""
        shapes = {layer.name: layer.shape for layer in self.layers}
        out = []
        for group, (hh, ww) in zip(("conv1", "conv2"), self._sizes[:2]):
            k1, k2, c_in, c_out = shapes[f"{group}.W"]
            weights = k1 * k2 * c_in * c_out
            out.append((group, weights + c_out, 2.0 * weights * hh * ww))
        n_in, n_out = shapes["fc.W"]
        out.append(("fc", n_in * n_out + n_out, 2.0 * n_in * n_out))
        return out

    def _forward(self, xp, ws, P, X):
        B, (c, h, w) = X.shape[0], self.image_shape
        x = X.reshape(B, c, h, w).transpose(0, 2, 3, 1)                          # (B, H, W, C) view
        a1 = _conv3x3_relu(xp, ws, "1", x, P["conv1.W"], P["conv1.b"])           # (B, H, W, c1)
        p1 = _maxpool2(xp, ws, "1", a1)                                          # (B, H/2, W/2, c1)
        a2 = _conv3x3_relu(xp, ws, "2", p1, P["conv2.W"], P["conv2.b"])          # (B, H/2, W/2, c2)
        f = _maxpool2(xp, ws, "2", a2).reshape(B, -1)                            # (B, H/4*W/4*c2)
        logits = ws.empty("logits", (B, self.n_classes))
        xp.matmul(f, P["fc.W"], out=logits)
        logits += P["fc.b"]
        return logits

    def _backward(self, xp, ws, P, G, X, dlogits, on_grad_ready):
        B, (c1, c2) = X.shape[0], self.hidden
        (h, w), (h1, w1), (h2, w2) = self._sizes
        A = ws.arrays
        f = A["pool2"].reshape(B, -1)
        xp.matmul(f.T, dlogits, out=G["fc.W"])
        xp.sum(dlogits, axis=0, out=G["fc.b"])
        self._ready(on_grad_ready, 2)

        df = ws.empty("df", f.shape)
        xp.matmul(dlogits, P["fc.W"].T, out=df)
        da2 = _maxpool2_backward(xp, ws, "2", df.reshape(B, h2, w2, c2), (B, h1, w1, c2))
        da2 *= A["a2"].reshape(da2.shape) > 0                                    # ReLU'
        dp1 = _conv3x3_backward(xp, ws, "2", da2, P["conv2.W"], G["conv2.W"], G["conv2.b"], need_dx=True)
        self._ready(on_grad_ready, 1)

        da1 = _maxpool2_backward(xp, ws, "1", dp1, (B, h, w, c1))
        da1 *= A["a1"].reshape(da1.shape) > 0
        _conv3x3_backward(xp, ws, "1", da1, P["conv1.W"], G["conv1.W"], G["conv1.b"], need_dx=False)
        self._ready(on_grad_ready, 0)


def _conv3x3_relu(xp, ws: _Workspace, k: str, x: Array, W: Array, b: Array) -> Array:
    """ReLU(conv3x3(x, pad 1) + b) for NHWC x; keeps im2col patches for backward."""
    B, H, Wd, C = x.shape
    c_out = W.shape[-1]
    pad = ws.zeros(f"pad{k}", (B, H + 2, Wd + 2, C))
    pad[:, 1:H + 1, 1:Wd + 1, :] = x
    # im2col by the 9 kernel offsets (each a whole-image slice copy, no per-pixel loop).
    cols = ws.empty(f"cols{k}", (B, H, Wd, 3, 3, C))
    for i in range(3):
        for j in range(3):
            cols[:, :, :, i, j, :] = pad[:, i:i + H, j:j + Wd, :]
    a = ws.empty(f"a{k}", (B * H * Wd, c_out))
    xp.matmul(cols.reshape(B * H * Wd, 9 * C), W.reshape(9 * C, c_out), out=a)  # (B*H*W, C_out)
    a += b
    xp.maximum(a, 0, out=a)
    return a.reshape(B, H, Wd, c_out)


def _conv3x3_backward(xp, ws: _Workspace, k: str, da: Array, W: Array, gW: Array, gb: Array,
                      need_dx: bool) -> Array | None:
    """Writes dW, db of a conv from da (B, H, W, C_out); returns dx (B, H, W, C_in) if need_dx."""
    B, H, Wd, c_out = da.shape
    C = W.shape[2]
    da2d = da.reshape(B * H * Wd, c_out)
    cols = ws.arrays[f"cols{k}"].reshape(B * H * Wd, 9 * C)
    xp.matmul(cols.T, da2d, out=gW.reshape(9 * C, c_out))
    xp.sum(da2d, axis=0, out=gb)
    if not need_dx:
        return None
    dcols = ws.empty(f"dcols{k}", (B, H, Wd, 3, 3, C))
    xp.matmul(da2d, W.reshape(9 * C, c_out).T, out=dcols.reshape(B * H * Wd, 9 * C))
    # col2im: each kernel offset adds its patch gradient back at its shifted position.
    dpad = ws.empty(f"dpad{k}", (B, H + 2, Wd + 2, C))
    dpad.fill(0)
    for i in range(3):
        for j in range(3):
            dpad[:, i:i + H, j:j + Wd, :] += dcols[:, :, :, i, j, :]
    return dpad[:, 1:H + 1, 1:Wd + 1, :]


def _maxpool2(xp, ws: _Workspace, k: str, a: Array) -> Array:
    """2x2 max pooling, stride 2, of NHWC `a`; remembers which input won for backward."""
    B, H, W, C = a.shape
    Ho, Wo = H // 2, W // 2
    win = ws.empty(f"win{k}", (B, Ho, Wo, C, 2, 2))
    win[...] = a[:, :2 * Ho, :2 * Wo, :].reshape(B, Ho, 2, Wo, 2, C).transpose(0, 1, 3, 5, 2, 4)
    win = win.reshape(B, Ho, Wo, C, 4)
    # One winner per window even when values tie (e.g. a flat background where every
    # pre-activation equals the bias): routing to all ties would multiply the gradient.
    ws.arrays[f"argmax{k}"] = win.argmax(axis=-1)                     # (B, Ho, Wo, C)
    out = ws.empty(f"pool{k}", (B, Ho, Wo, C))
    xp.max(win, axis=-1, out=out)
    return out


def _maxpool2_backward(xp, ws: _Workspace, k: str, dout: Array, in_shape: tuple[int, ...]) -> Array:
    """Gradient of `_maxpool2` w.r.t. its input, (B, H, W, C), from dout (B, Ho, Wo, C)."""
    B, Ho, Wo, C = dout.shape
    winner = ws.arrays[f"argmax{k}"][..., None] == xp.arange(4)       # (B, Ho, Wo, C, 4) one-hot
    dwin = (winner * dout[..., None]).reshape(B, Ho, Wo, C, 2, 2)
    da = ws.zeros(f"da{k}", in_shape)  # a dropped odd row/column is never written: stays 0
    da[:, :2 * Ho, :2 * Wo, :] = dwin.transpose(0, 1, 4, 2, 5, 3).reshape(B, 2 * Ho, 2 * Wo, C)
    return da


def _dense_groups(widths: tuple[int, ...]) -> list[tuple[str, tuple[int, int], int, float]]:
    """Layout of fully connected layers: He init before each ReLU, Glorot for the output."""
    groups, last = [], len(widths) - 2
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        std = math.sqrt(2.0 / (fan_in + fan_out)) if i == last else math.sqrt(2.0 / fan_in)
        groups.append((f"fc{i + 1}", (fan_in, fan_out), fan_out, std))
    return groups


def _type_name(a: Any) -> str:
    return f"{type(a).__module__}.{type(a).__name__}"


def _positive_int(field: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{field}: an integer >= {minimum}, got {value!r}")
    return int(value)


def _widths(values: Any, allowed: str, minimum: int, field: str = "hidden") -> tuple[int, ...]:
    """`values` as a tuple of positive ints, else ValueError '<field>: <allowed>, got ...'."""
    try:
        out = tuple(values)
    except TypeError:
        raise ValueError(f"{field}: {allowed}, got {values!r}") from None
    if len(out) < minimum or any(isinstance(v, bool) or not isinstance(v, Integral) or v < 1 for v in out):
        raise ValueError(f"{field}: {allowed}, got {values!r}")
    return tuple(int(v) for v in out)


def make_model(name: str, n_features: int, n_classes: int, hidden: tuple[int, ...] | None = None,
               image_shape: tuple[int, int, int] | None = None) -> Model:
    """Build a model by name.

    Args:
        name: one of MODELS ("softmax", "mlp", "cnn").
        n_features: input width (C*H*W for the CNN).
        n_classes: number of classes (>= 2).
        hidden: MLP layer widths, or CNN channels (c1,) or (c1, c2), c2 defaulting to 2*c1;
            ignored by softmax; unset: the model's `config.DEFAULT_HIDDEN`.
        image_shape: (C, H, W) of the dataset's images; required by the CNN only.
    Returns:
        The model (its parameters come from `model.init(seed)`).

    >>> make_model("mlp", 784, 10, hidden=(512, 256)).describe()
    'mlp 784-512-256-10 (535,818 params)'
    """
    if name not in MODELS:
        raise ValueError(f"model: one of {list(MODELS)}, got {name!r}")
    if name == "softmax":
        return SoftmaxRegression(n_features, n_classes)
    hidden = DEFAULT_HIDDEN.get(name, ()) if hidden is None else hidden
    if name == "mlp":
        return MLP(n_features, n_classes, hidden)
    return CNN(n_features, n_classes, hidden, image_shape)
