"""Gradient accumulation: a worker's share of a batch computed in micro-batches.

`accumulated(model, parts)` is the model a worker computes with when `accumulate` is more
than 1: its `loss_and_grad` cuts the rows it is given into `parts` contiguous micro-batches
(`micro_batches`: equal shares, the first ones a row larger when they do not divide), runs
the model's own `loss_and_grad` on each, and returns their mean loss and gradient weighed by
rows, m_i / n, which is the whole slice's mean loss and gradient (the protocol's losses are
means over rows) up to float rounding. Every algorithm's step, the update rule and the
exchange see one gradient, as without accumulation; only a pass's activations shrink, to a
micro-batch's.

The sums are kept in the parameters' dtype, the same operations on the plain and the
stacked path (`loss_and_grad_stacked`, the simulator's batched workers), so the two agree
bitwise, as the model's own two paths do. With `on_grad_ready` (cgdp's chunks) only the last
micro-batch reports its layers, each once its sum is complete: the earlier micro-batches'
gradients are all there before the last backward pass starts.

>>> import numpy as np
>>> from workbench.maths.models import make_model
>>> inner = make_model("softmax", 4, 3)
>>> model = accumulated(make_model("softmax", 4, 3), 2)
>>> rng = np.random.default_rng(0)
>>> X, y = rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6)
>>> p = inner.init(0)
>>> (l1, g1), (l2, g2) = inner.loss_and_grad(p, X, y), model.loss_and_grad(p, X, y)
>>> bool(abs(l1 - l2) < 1e-6 and np.allclose(g1, g2, atol=1e-7))
True
>>> micro_batches(10, 3)
[(0, 4), (4, 7), (7, 10)]
"""
from __future__ import annotations

from typing import Any

from .models import get_array_module

__all__ = ["Accumulated", "accumulated", "micro_batches"]


def micro_batches(rows: int, parts: int) -> list[tuple[int, int]]:
    """`rows` cut into min(parts, rows) contiguous (start, stop) pieces of equal size, the
    first ones a row larger when `parts` does not divide `rows` (at least one piece)."""
    k = max(1, min(int(parts), int(rows)))
    base, extra = divmod(int(rows), k)
    out, lo = [], 0
    for i in range(k):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def accumulated(model: Any, parts: int) -> Any:
    """`model` itself when `parts` is 1, else the model computing in `parts` micro-batches."""
    return model if int(parts) <= 1 else Accumulated(model, int(parts))


def _adding(total: Any, part: Any, w: Any, on_grad_ready: Any) -> Any:
    """The last micro-batch's `on_grad_ready`: a layer's weighed gradient added to the
    others' sum, then the layer reported (its sum is complete now)."""
    def ready(start: int, stop: int) -> None:
        piece = part[start:stop]
        piece *= w
        total[start:stop] += piece
        on_grad_ready(start, stop)
    return ready


class Accumulated:
    """A model whose `loss_and_grad` sums `parts` micro-batches' gradients (see the module).
    Everything else (init, predict, loss, score, layout, n_params, ...) is the model's own."""

    def __init__(self, model: Any, parts: int):
        if parts < 1:
            raise ValueError(f"parts: a whole number >= 1, got {parts}")
        self.inner, self.parts = model, int(parts)
        self._scratch: dict[tuple, Any] = {}
        if hasattr(model, "loss_and_grad_stacked"):   # offered only when the model has its own
            self.loss_and_grad_stacked = self._stacked

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "parts", "_scratch"):   # not yet set (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"<{self.inner!r} in {self.parts} micro-batches>"

    def _buffer(self, xp: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        key = (xp.__name__, shape, str(dtype))
        buf = self._scratch.get(key)
        if buf is None:
            if len(self._scratch) >= 4:   # a few shapes at most (the stacked path's K varies)
                self._scratch.pop(next(iter(self._scratch)))
            buf = self._scratch[key] = xp.empty(shape, dtype=dtype)
        return buf

    def loss_and_grad(self, params: Any, X: Any, y: Any, grad_out: Any = None,
                      on_grad_ready: Any = None) -> tuple[float, Any]:
        """The mean loss and gradient over X's rows, computed a micro-batch at a time."""
        n = int(X.shape[0])
        pieces = micro_batches(n, self.parts)
        if len(pieces) == 1:
            return self.inner.loss_and_grad(params, X, y, grad_out=grad_out, on_grad_ready=on_grad_ready)
        xp = get_array_module(params)
        dtype = params.dtype.type
        if grad_out is None:
            grad_out = xp.empty(params.shape, dtype=params.dtype)
        scratch = self._buffer(xp, tuple(params.shape), params.dtype)
        last = len(pieces) - 1
        total = dtype(0)
        for i, (lo, hi) in enumerate(pieces):
            w = dtype((hi - lo) / n)
            out = grad_out if i == 0 else scratch
            ready = _adding(grad_out, scratch, w, on_grad_ready) if i == last and on_grad_ready else None
            loss, _ = self.inner.loss_and_grad(params, X[lo:hi], y[lo:hi], grad_out=out, on_grad_ready=ready)
            total = total + w * dtype(loss)
            if i == 0:
                grad_out *= w
            elif ready is None:
                scratch *= w
                grad_out += scratch
        return float(total), grad_out

    def _stacked(self, params: Any, X: Any, y: Any, grad_out: Any) -> Any:
        """K slices' `loss_and_grad` at once (the model's stacked pass on each micro-batch of
        every slice), bitwise K calls of `loss_and_grad`."""
        xp = get_array_module(X)
        n = int(X.shape[1])
        pieces = micro_batches(n, self.parts)
        if len(pieces) == 1:
            return self.inner.loss_and_grad_stacked(params, X, y, grad_out)
        dtype = grad_out.dtype.type
        scratch = self._buffer(xp, tuple(grad_out.shape), grad_out.dtype)
        total = None
        for i, (lo, hi) in enumerate(pieces):
            w = dtype((hi - lo) / n)
            out = grad_out if i == 0 else scratch
            losses = self.inner.loss_and_grad_stacked(params, xp.ascontiguousarray(X[:, lo:hi]),
                                                      xp.ascontiguousarray(y[:, lo:hi]), out)
            part = w * losses.astype(grad_out.dtype, copy=False)
            total = part if total is None else total + part
            if i == 0:
                grad_out *= w
            else:
                scratch *= w
                grad_out += scratch
        return total
