"""The update rules every algorithm shares, and the plan of a run (steps, schedule, evals).

One home for the optimiser: the reference trainer, sync workers, parameter servers, the
EASGD family's local steps, LTFB's trainers and cgdp's host master all build theirs with
`make_optimizer(config, layout, xp, dtype)`, so "reduces to plain SGD" can be tested
exactly and a new rule reaches every algorithm at once.

`config.optimizer` picks the rule (x the flat parameters, g the gradient, lr the
scheduled rate, wd = weight_decay; per layer l with weights w_l):

    sgd    PyTorch's SGD: g += wd x; v = mu v + g; x -= lr (g + mu v if nesterov else v)
    adamw  Loshchilov & Hutter: m, v moments with bias correction,
           x -= lr (m^ / (sqrt(v^) + eps) + wd x)                  (decoupled decay)
    lars   You, Gitman, Ginsburg (arXiv 1708.03888, Algorithm 1): local rate
           lam_l = eta ||w_l|| / (||g_l|| + wd ||w_l|| + eps);
           v_l = mu v_l + lr lam_l (g_l + wd w_l);  w_l -= v_l
    lamb   You et al. (arXiv 1904.00962, Algorithm 2): Adam's r = m^ / (sqrt(v^) + eps),
           u_l = r_l + wd w_l;  w_l -= lr (||w_l|| / ||u_l||) u_l

The layer-wise rules act on the model's layers (`layout_of(model)`: one segment per
weight and per bias of the flat vector); as in the papers, 1-D segments (biases) take
no weight decay and no layer-wise ratio under adamw, lars and lamb (their ratio is 1).
A ratio whose norms are 0 is 1 (the layer is left to the global rate). sgd keeps
PyTorch's convention of decaying every parameter.

Chunked updates (cgdp's host master updates one group of layers at a time) equal the
whole update exactly when every chunk holds whole segments: the adaptive rules refuse
a chunk that cuts a segment (`Optimizer.blocks` cuts a range at segment bounds).
Everything is written against `xp` (NumPy or CuPy); updates are in place and never
touch the gradient.

Gradient clipping (`config.grad_clip` = c > 0) comes before any rule, on the gradient
the rule is about to apply, as torch.nn.utils.clip_grad_norm_ does it before
`optimizer.step()`: g <- g * min(1, c / (||g|| + 1e-6)), ||g|| the L2 norm of the whole
vector (weight decay is the rule's, after it). The rule counts its updates and how many
were clipped, and sums the norms and keeps the largest, in its state (`clip`: [updates,
clipped]; `clip_norm`: [sum, largest]), so the counts survive a resume.
It needs the whole gradient: a chunk-by-chunk update (cgdp's master) cannot clip.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..config import RunConfig
from . import schedules

# One segment of the flat parameter vector: (start, stop, layer-wise: weight decay and
# the trust ratio apply). A model's layout is one per weight / bias, in flat order.
Layout = tuple[tuple[int, int, bool], ...]


def layout_of(model: Any) -> Layout:
    """The segments of `model`'s flat vector: its tensors (`model.layout()`), weights
    (ndim >= 2) layer-wise, biases not.

    >>> from workbench.maths.models import make_model
    >>> layout_of(make_model("mlp", 4, 3, hidden=(2,)))
    ((0, 8, True), (8, 10, False), (10, 16, True), (16, 19, False))
    """
    return segments(model.layout())


def segments(layout: Any) -> Layout:
    """A layout as (start, stop, layer-wise) segments, from what a model's `layout()` gives,
    (name, shape) per tensor in flat order (the model protocol's form), or from segments
    already, or from a parameter count (one segment).

    A tensor of two or more dimensions is a weight (layer-wise: weight decay and the trust
    ratio apply under adamw, lars and lamb); a 1-D one a bias, unless it is the only one:
    a vector the model describes as one tensor has nothing to tell apart, and is one weight.

    >>> segments((("fc.W", (3, 2)), ("fc.b", (2,))))
    ((0, 6, True), (6, 8, False))
    >>> segments((("params", (10,)),)) == segments(10) == whole_layout(10)
    True
    """
    if isinstance(layout, int):
        return whole_layout(layout)
    items = tuple(layout)
    if items and isinstance(items[0][0], str):
        out, at = [], 0
        for _name, shape in items:
            size = math.prod(int(d) for d in shape)
            out.append((at, at + size, len(shape) >= 2 or len(items) == 1))
            at += size
        return tuple(out)
    return tuple((int(a), int(b), bool(w)) for a, b, w in items)


def whole_layout(n: int) -> Layout:
    """One layer-wise segment over all `n` parameters (for a rule that needs no layers)."""
    return ((0, int(n), True),)


@dataclass(frozen=True)
class OptimizerSettings:
    """The rule and its hyper-parameters, as the config gives them (small, picklable:
    parameter servers on other processes receive it)."""

    optimizer: str = "sgd"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    trust_coefficient: float = 0.001
    grad_clip: float = 0.0          # the gradient's largest L2 norm (0: no clipping)

    @classmethod
    def of(cls, config: Any, **overrides: Any) -> OptimizerSettings:
        """The settings of a RunConfig (or of settings), with some overridden (an
        algorithm whose local steps ignore momentum passes momentum=0)."""
        values = {f.name: getattr(config, f.name) for f in fields(cls)}
        return cls(**{**values, **overrides})


# Passes over the parameter vector one update streams through memory (reads + writes of
# n floats), what the cost model and the simulator charge per rule. sgd: x and g in, x out
# (the long-standing figure; a velocity's read and write are not charged, so momentum runs
# are slightly under-charged, as before); lars: sgd's plus reading x and g again for the
# norms and writing and reading the scaled gradient; adamw: x, g, m, v in, m, v, x out;
# lamb: adamw's plus writing and reading the update u and the norms of x and u.
UPDATE_PASSES = {"sgd": 3, "adamw": 7, "lars": 7, "lamb": 11}
# Clipping (`grad_clip`): the norm reads g (one pass); a clipped gradient is written scaled and
# read by the rule (two more). Charged as if every update were clipped: an upper bound. (Timed
# here, 2026-12-06, no other load, momentum sgd: +3.4 us on 9,610 floats when nothing was
# clipped and +4.5 clipped, over the rule's 4.8; at 535k +74 and +204 us over 539.)
CLIP_PASSES = 3


def update_passes(optimizer: str = "sgd", momentum: float = 0.0, grad_clip: float = 0.0) -> int:
    """Passes over the parameters of one update of `optimizer` (see UPDATE_PASSES;
    `momentum` is not charged, for any rule), CLIP_PASSES more with clipping.

    >>> update_passes("sgd"), update_passes("lars"), update_passes("lamb"), update_passes("sgd", grad_clip=1.0)
    (3, 7, 11, 6)
    """
    return UPDATE_PASSES[optimizer] + (CLIP_PASSES if grad_clip else 0)


def _norm(xp: Any, a: Any) -> float:
    """Euclidean norm of a 1-D slice (float32 dot, one number back to the host)."""
    return math.sqrt(max(float(xp.dot(a, a)), 0.0))


CLIP_EPS = 1e-6     # torch.nn.utils.clip_grad_norm_'s guard against a zero norm


def clip_factor(norm: float, max_norm: float) -> float:
    """What a gradient of L2 norm `norm` is multiplied by under clipping at `max_norm`:
    max_norm / (norm + 1e-6), at most 1 (clip_grad_norm_'s rule; a norm of inf or NaN
    gives 0 or NaN, as there: the step's loss then says the run diverged).

    >>> clip_factor(2.0, 1.0) == 1.0 / (2.0 + 1e-6), clip_factor(0.5, 1.0)
    (True, 1.0)
    """
    return min(1.0, max_norm / (norm + CLIP_EPS)) if norm == norm else float("nan")


def clip_gradient(xp: Any, grad: Any, max_norm: float, counts: Any, norms: Any, out: Any) -> Any:
    """`grad` (a whole gradient) scaled to L2 norm `max_norm` when its norm is larger,
    written into `out` (`grad` is not touched), else `grad` itself. Counted in place:
    `counts` [updates, clipped], `norms` [sum of the norms, the largest] (finite norms; a
    norm of inf or NaN is a diverging run's, which its loss reports). The one home of
    clipping: a rule's `step` and a worker that clips what it pushes (async_sgd) call it.

    >>> g, counts, norms = np.array([3.0, 4.0]), np.zeros(2, np.int64), np.zeros(2)
    >>> clip_gradient(np, g, 1.0, counts, norms, np.empty_like(g)).round(4).tolist(), counts.tolist(), norms.tolist()
    ([0.6, 0.8], [1, 1], [5.0, 5.0])
    """
    norm = _norm(xp, grad)
    if math.isfinite(norm):
        norms[0] += norm
        norms[1] = max(float(norms[1]), norm)
    factor = clip_factor(norm, max_norm)
    counts[0] += 1
    if factor < 1.0 or factor != factor:
        counts[1] += 1
        return xp.multiply(grad, factor, out=out)
    return grad


def clip_summary(max_norm: float, counts: Any, norms: Any = None, counted: str = "rank 0's updates") -> dict[str, Any]:
    """The summary's entry for a clipping rule's state ({} without clipping): how many
    updates it made, how many of those it clipped, the gradients' mean and largest norm,
    and whose updates they are (`counted`: every update of the run, rank 0's own, ...).

    >>> clip_summary(1.0, [40, 10], [30.0, 2.5], "every update")["grad_clip"]
    {'max_norm': 1.0, 'updates': 40, 'clipped': 10, 'clipped_share': 0.25, 'mean_norm': 0.75, 'largest_norm': 2.5, 'counted': 'every update'}
    """
    if not max_norm or counts is None:
        return {}
    updates, clipped = (int(v) for v in counts)
    total, largest = (float(v) for v in (norms if norms is not None else (math.nan, math.nan)))
    return {"grad_clip": {"max_norm": float(max_norm), "updates": updates, "clipped": clipped,
                          "clipped_share": clipped / updates if updates else None,
                          "mean_norm": total / updates if updates and math.isfinite(total) else None,
                          "largest_norm": largest if math.isfinite(largest) else None, "counted": counted}}


def clip_spec(settings: OptimizerSettings) -> list[tuple[str, tuple[int, ...], str]]:
    """The state that clipping adds to any rule: [updates, clipped] and [sum of the norms,
    the largest] (none without it)."""
    return [("clip", (2,), "int"), ("clip_norm", (2,), "float")] if settings.grad_clip else []


class Optimizer:
    """What every rule offers: `step` (the whole vector or a slice of it), `step_chunk`
    (a slice from the gradient of just that slice), its state arrays (`state`: name ->
    array, which shared-memory servers map onto their segment) and `blocks` (how a range
    may be cut into chunks that update exactly as the whole)."""

    name = "optimizer"
    layerwise_chunks = False        # chunks must hold whole segments
    norms = False                   # takes layer norms (a dot product: its bits on a row of a stack are not
    #                                 promised to be those on an array of its own)

    def __init__(self, settings: OptimizerSettings, layout: Layout, xp: Any, dtype: Any,
                 state: dict[str, Any] | None = None):
        self.settings, self.layout, self.xp, self.dtype = settings, segments(layout), xp, dtype
        self.n = self.layout[-1][1] if self.layout else 0
        self.weight_decay = settings.weight_decay
        given = state or {}
        self.state: dict[str, Any] = {}
        for key, shape, kind in self.state_spec(settings, self.n, len(self.layout)) + clip_spec(settings):
            arr = given.get(key)
            if arr is None:
                arr = xp.zeros(shape, dtype=dtype if kind == "float" else "int64")
            self.state[key] = arr
        self._starts = {a: i for i, (a, _, _) in enumerate(self.layout)}
        self._stops = {b: i for i, (_, b, _) in enumerate(self.layout)}
        self.max_norm = settings.grad_clip
        self._clipped = xp.empty(self.n, dtype=dtype) if self.max_norm else None   # the clipped gradient

    @staticmethod
    def state_spec(settings: OptimizerSettings, n: int, n_segments: int) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, shape, "float" | "int") of each state array the rule keeps."""
        return []

    def step(self, params: Any, grad: Any, lr: float, lo: int = 0, hi: int | None = None) -> None:
        """Apply one update to `params[lo:hi]` from `grad[lo:hi]` (a chunk, or everything),
        the gradient clipped first when the settings say so (the whole vector only)."""
        hi = params.shape[0] if hi is None else hi
        g = grad[lo:hi]
        if self.max_norm:
            if (lo, hi) != (0, self.n):
                raise ValueError(f"grad_clip: the whole gradient's norm, got the chunk [{lo}, {hi}) of {self.n}")
            g = self.clip(g)
        self.step_chunk(params, g, lr, lo, hi)

    def clip(self, grad: Any) -> Any:
        """`clip_gradient` at this rule's `max_norm`, into its scratch, counted in its `clip` state."""
        return clip_gradient(self.xp, grad, self.max_norm, self.state["clip"], self.state["clip_norm"], self._clipped)

    def step_chunk(self, params: Any, grad_chunk: Any, lr: float, lo: int, hi: int) -> None:
        raise NotImplementedError

    def segments(self, lo: int, hi: int) -> list[tuple[int, int, int, bool]]:
        """(index, start, stop, layer-wise) of the layout's segments that make up [lo, hi);
        ValueError unless [lo, hi) holds whole ones."""
        i, j = self._starts.get(lo), self._stops.get(hi)
        if i is None or j is None or j < i:
            raise ValueError(f"chunk: whole layers for the {self.name} update (per-layer norms), got [{lo}, {hi}) "
                             f"which cuts a layer; layer bounds {[a for a, _, _ in self.layout] + [self.n]}")
        return [(k, *self.layout[k]) for k in range(i, j + 1)]

    def blocks(self, lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
        """[lo, hi) cut into `parts` consecutive blocks (some may be empty) that each
        update exactly as their share of the whole: even cuts for an elementwise rule,
        cuts at segment bounds (by size) for a layer-wise one.

        >>> SGD(10, __import__("numpy"), "float32").blocks(0, 10, 3)
        [(0, 3), (3, 6), (6, 10)]
        """
        m = hi - lo
        even = [(lo + r * m // parts, lo + (r + 1) * m // parts) for r in range(parts)]
        if not self.layerwise_chunks:
            return even
        bounds = [a for _, a, _, _ in self.segments(lo, hi)] + [hi]
        snap = [lo] + [min(bounds, key=lambda b, e=e: (abs(b - e), b)) for _, e in even[:-1]] + [hi]
        for r in range(1, len(snap)):           # keep them ordered
            snap[r] = max(snap[r], snap[r - 1])
        return [(snap[r], snap[r + 1]) for r in range(parts)]

    @property
    def passes(self) -> int:
        """Passes over the parameters one update of this rule streams through memory
        (what the simulator charges a server or cgdp's master for it)."""
        return update_passes(self.settings.optimizer, self.settings.momentum, self.settings.grad_clip)

    # LTFB's exchange_state: the state travels as one float vector
    def export_state(self) -> Any:
        """Every state array in one float vector (None when the rule keeps none)."""
        if not self.state:
            return None
        xp = self.xp
        return xp.concatenate([a.reshape(-1).astype(self.dtype) for a in self.state.values()])

    def import_state(self, vec: Any) -> None:
        """Load what `export_state` gave (from the same rule and layout)."""
        off = 0
        for a in self.state.values():
            k = a.size
            a[...] = self.xp.asarray(vec[off:off + k]).reshape(a.shape).astype(a.dtype)
            off += k


def sgd_descent(x: Any, g: Any, lr: Any, weight_decay: float = 0.0, *, work: Any, decay: Any = None,
                xp: Any = None) -> None:
    """Plain SGD in place: `x -= lr (g + wd x)`, never touching `g` (the rule without
    momentum, `SGD.step`'s; also the simulator's stacked local steps). Elementwise, so
    it takes one worker's row (n,) or a stack of rows (K, n), `lr` a number or a (K, 1)
    column of x's dtype, and each row's bits are those of its own update.

    `work` (and `decay`, with weight decay) are scratch arrays of x's shape.

    >>> import numpy as np
    >>> x = np.ones((2, 3), np.float32); g = np.full((2, 3), 2.0, np.float32)
    >>> sgd_descent(x, g, np.array([[0.5], [0.25]], np.float32), work=np.empty_like(x)); x[:, 0].tolist()
    [0.0, 0.5]
    """
    xp = np if xp is None else xp
    if weight_decay:
        xp.multiply(x, weight_decay, out=decay)
        xp.add(g, decay, out=work)                     # g + wd x
        g = work
    xp.multiply(g, lr, out=work)
    x -= work


class SGD(Optimizer):
    """Minibatch SGD with optional heavy-ball or Nesterov momentum and L2 weight decay.

    PyTorch's convention: `g += wd * x; v = mu * v + g; x -= lr * (g + mu * v if nesterov else v)`.
    With mu = 0 this is `x -= lr * g`. Updates `params` in place (that is its purpose) and
    never touches `grad`. Elementwise: any chunking updates exactly as the whole.
    """

    name = "sgd"

    def __init__(self, n_params: int, xp: Any, dtype: Any, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, state: dict[str, Any] | None = None,
                 grad_clip: float = 0.0):
        settings = OptimizerSettings("sgd", momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                                     grad_clip=grad_clip)
        super().__init__(settings, whole_layout(n_params), xp, dtype, state)
        self.momentum, self.nesterov = momentum, nesterov
        self.velocity = self.state.get("velocity")
        # Scratch buffers: on the hot path every update is in place, no temporaries
        # (a 535k-parameter update otherwise allocates 2 MB per arithmetic step).
        self._g = xp.empty(n_params, dtype=dtype)
        self._h = xp.empty(n_params, dtype=dtype) if (weight_decay or nesterov) else None

    @staticmethod
    def state_spec(settings: OptimizerSettings, n: int, n_segments: int) -> list[tuple[str, tuple[int, ...], str]]:
        return [("velocity", (n,), "float")] if settings.momentum > 0 else []

    def step_chunk(self, params: Any, grad_chunk: Any, lr: float, lo: int, hi: int) -> None:
        """Update `params[lo:hi]` from the gradient of just that chunk (CGDP's per-chunk update).

        Each element's update depends only on its own gradient and velocity, so updating
        chunk by chunk is exactly the whole update."""
        mul = self.xp.multiply
        x, g = params[lo:hi], self._g[lo:hi]
        h = self._h[lo:hi] if self._h is not None else None
        if self.velocity is None:
            sgd_descent(x, grad_chunk, lr, self.weight_decay, work=g, decay=h, xp=self.xp)
            return
        if self.weight_decay:
            mul(x, self.weight_decay, out=h)
            self.xp.add(grad_chunk, h, out=g)          # g = grad + wd * x
            grad_chunk = g
        v = self.velocity[lo:hi]
        v *= self.momentum
        v += grad_chunk                                # v = mu * v + g
        if self.nesterov:
            mul(v, self.momentum, out=h)
            self.xp.add(grad_chunk, h, out=g)          # g + mu * v
            g *= lr
        else:
            mul(v, lr, out=g)
        x -= g


class _Moments(Optimizer):
    """Adam's moments with bias correction, counted per segment (so chunks may arrive in
    any order and a shared-memory master keeps one count per layer)."""

    layerwise_chunks = True

    def __init__(self, settings: OptimizerSettings, layout: Layout, xp: Any, dtype: Any,
                 state: dict[str, Any] | None = None):
        super().__init__(settings, layout, xp, dtype, state)
        self.m, self.v, self.count = self.state["m"], self.state["v"], self.state["count"]
        self._r = xp.empty(self.n, dtype=dtype)       # scratch: the update direction
        self._t = xp.empty(self.n, dtype=dtype)

    @staticmethod
    def state_spec(settings: OptimizerSettings, n: int, n_segments: int) -> list[tuple[str, tuple[int, ...], str]]:
        return [("m", (n,), "float"), ("v", (n,), "float"), ("count", (n_segments,), "int")]

    def direction(self, a: int, b: int, g: Any, i: int) -> Any:
        """Update the moments of [a, b) from its gradient `g`; returns r = m^ / (sqrt(v^) + eps)
        (a view of scratch)."""
        xp, s = self.xp, self.settings
        self.count[i] += 1
        t = int(self.count[i])
        m, v, r, tmp = self.m[a:b], self.v[a:b], self._r[a:b], self._t[a:b]
        m *= s.beta1
        xp.multiply(g, 1.0 - s.beta1, out=tmp)
        m += tmp                                       # m = b1 m + (1 - b1) g
        v *= s.beta2
        xp.multiply(g, g, out=tmp)
        tmp *= 1.0 - s.beta2
        v += tmp                                       # v = b2 v + (1 - b2) g^2
        xp.sqrt(v, out=tmp)
        tmp *= 1.0 / math.sqrt(1.0 - s.beta2 ** t)
        tmp += s.eps                                   # sqrt(v^) + eps
        xp.divide(m, tmp, out=r)
        r *= 1.0 / (1.0 - s.beta1 ** t)                # m^ / (sqrt(v^) + eps)
        return r


class AdamW(_Moments):
    """AdamW (Loshchilov & Hutter, arXiv 1711.05101), as torch.optim.AdamW computes it:
    `x *= 1 - lr wd` (weights only), then `x -= lr m^ / (sqrt(v^) + eps)`."""

    name = "adamw"

    def step_chunk(self, params: Any, grad_chunk: Any, lr: float, lo: int, hi: int) -> None:
        for i, a, b, adapt in self.segments(lo, hi):
            x = params[a:b]
            r = self.direction(a, b, grad_chunk[a - lo:b - lo], i)
            if adapt and self.weight_decay:
                x *= 1.0 - lr * self.weight_decay      # decoupled decay
            r *= lr
            x -= r


class LAMB(_Moments):
    """LAMB (You et al., arXiv 1904.00962, Algorithm 2, with bias correction, phi(z) = z):
    u = m^ / (sqrt(v^) + eps) + wd w; w -= lr (||w|| / ||u||) u per weight; biases take the
    plain Adam step (no decay, ratio 1)."""

    name = "lamb"
    norms = True

    def trust_ratio(self, w_norm: float, u_norm: float) -> float:
        """||w|| / ||u||, or 1 when either is 0."""
        return w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0

    def step_chunk(self, params: Any, grad_chunk: Any, lr: float, lo: int, hi: int) -> None:
        xp = self.xp
        for i, a, b, adapt in self.segments(lo, hi):
            x = params[a:b]
            u = self.direction(a, b, grad_chunk[a - lo:b - lo], i)
            ratio = 1.0
            if adapt:
                if self.weight_decay:
                    tmp = self._t[a:b]
                    xp.multiply(x, self.weight_decay, out=tmp)
                    u += tmp                           # u = r + wd w
                ratio = self.trust_ratio(_norm(xp, x), _norm(xp, u))
            u *= lr * ratio
            x -= u


class LARS(Optimizer):
    """LARS (You, Gitman, Ginsburg, arXiv 1708.03888, Algorithm 1) with the global rate
    inside the velocity, as the algorithm box has it: lam = eta ||w|| / (||g|| + wd ||w|| + eps),
    v = mu v + lr lam (g + wd w), w -= v. Biases: lam = 1, no decay (momentum SGD)."""

    name = "lars"
    layerwise_chunks = True
    norms = True

    def __init__(self, settings: OptimizerSettings, layout: Layout, xp: Any, dtype: Any,
                 state: dict[str, Any] | None = None):
        super().__init__(settings, layout, xp, dtype, state)
        self.velocity = self.state.get("velocity")
        self._g = xp.empty(self.n, dtype=dtype)

    @staticmethod
    def state_spec(settings: OptimizerSettings, n: int, n_segments: int) -> list[tuple[str, tuple[int, ...], str]]:
        return [("velocity", (n,), "float")] if settings.momentum > 0 else []

    def local_rate(self, w_norm: float, g_norm: float) -> float:
        """eta ||w|| / (||g|| + wd ||w|| + eps), or 1 when either norm is 0."""
        s = self.settings
        if w_norm > 0 and g_norm > 0:
            return s.trust_coefficient * w_norm / (g_norm + s.weight_decay * w_norm + s.eps)
        return 1.0

    def step_chunk(self, params: Any, grad_chunk: Any, lr: float, lo: int, hi: int) -> None:
        xp, mu = self.xp, self.settings.momentum
        for _, a, b, adapt in self.segments(lo, hi):
            x, g, d = params[a:b], grad_chunk[a - lo:b - lo], self._g[a:b]
            rate = 1.0
            if adapt:
                rate = self.local_rate(_norm(xp, x), _norm(xp, g))
                if self.weight_decay:
                    xp.multiply(x, self.weight_decay, out=d)
                    d += g                             # g + wd w
                    g = d
            xp.multiply(g, lr * rate, out=d)           # lr lam (g + wd w)
            if self.velocity is not None:
                v = self.velocity[a:b]
                v *= mu
                v += d
                x -= v
            else:
                x -= d


RULES: dict[str, type[Optimizer]] = {"sgd": SGD, "adamw": AdamW, "lars": LARS, "lamb": LAMB}


def state_spec(settings: OptimizerSettings, layout: Layout) -> list[tuple[str, tuple[int, ...], str]]:
    """The state arrays `make_optimizer(settings, layout, ...)` keeps: (name, shape, "float"|"int")."""
    layout = segments(layout)
    n = layout[-1][1] if layout else 0
    return RULES[settings.optimizer].state_spec(settings, n, len(layout)) + clip_spec(settings)


def make_optimizer(config: Any, layout: Any, xp: Any, dtype: Any, *,
                   state: dict[str, Any] | None = None, **overrides: Any) -> Optimizer:
    """The update rule of `config` (a RunConfig or OptimizerSettings) over `layout`.

    Args:
        config: what `optimizer` and its knobs say; `overrides` replace some of them
            (e.g. momentum=0.0 for local steps that ignore momentum).
        layout: `model.layout()` or `layout_of(model)` (`segments` reads either), or a
            parameter count (one segment: sgd, adamw only).
        xp, dtype: the array module (NumPy or CuPy) and float type of the parameters.
        state: existing state arrays to update in place (a shared-memory segment's views).
    Returns:
        An `Optimizer`; its `step(params, grad, lr)` updates `params` in place.
    """
    settings = OptimizerSettings.of(config, **overrides)
    layout = segments(layout)
    if settings.optimizer == "sgd":
        return SGD(layout[-1][1], xp, dtype, settings.momentum, settings.nesterov, settings.weight_decay, state=state,
                   grad_clip=settings.grad_clip)
    if settings.optimizer not in RULES:
        raise ValueError(f"optimizer: one of {sorted(RULES)}, got {settings.optimizer!r}")
    return RULES[settings.optimizer](settings, layout, xp, dtype, state)


@dataclass(frozen=True)
class Plan:
    """How long a run lasts and how its lr moves, derived once from the config."""

    n_train: int
    batch_size: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int
    eval_every: int
    schedule: Callable[[int], float]
    schedule_text: str

    def epoch(self, step: int) -> float:
        """Epochs completed after `step` steps."""
        return step / self.steps_per_epoch

    def is_eval_step(self, step: int) -> bool:
        """Evaluate after this (0-based) step? Every `eval_every` steps, and always after the last one."""
        return self.next_eval_step(step) == step

    def next_eval_step(self, step: int) -> int:
        """The first step at or after `step` that an evaluation follows (`is_eval_step`).

        >>> plan = Plan(100, 10, 10, total_steps=25, warmup_steps=0, eval_every=10, schedule=float, schedule_text="")
        >>> [plan.next_eval_step(s) for s in (0, 9, 10, 20, 24)], plan.is_eval_step(19), plan.is_eval_step(20)
        ([9, 9, 19, 24, 24], True, False)
        """
        return min((step // self.eval_every + 1) * self.eval_every - 1, self.total_steps - 1)


def make_plan(config: RunConfig, n_train: int, batch_size: int | None = None,
              lr: float | None = None) -> Plan:
    """Steps, warmup and the lr schedule for `config` on a training set of `n_train`.

    `batch_size`/`lr` override the config's (LTFB trainers each see their own batch
    and base lr); the schedule is always in global steps of `batch_size` samples.
    """
    from ..data import steps_per_epoch

    b = batch_size or config.batch_size
    spe = steps_per_epoch(n_train, b)
    total = config.steps if config.steps is not None else max(1, math.ceil(config.epochs * spe))
    warmup_steps = 0 if config.warmup == "none" else min(total, max(1, round(config.warmup_epochs * spe)))
    kwargs = dict(lr=lr or config.lr, batch_size=b, base_batch=config.base_batch,
                  lr_scaling=config.lr_scaling, warmup=config.warmup, warmup_steps=warmup_steps,
                  decay=config.decay, total_steps=total)
    schedule = schedules.make_schedule(**kwargs)
    eval_every = config.eval_every or spe
    return Plan(n_train=n_train, batch_size=b, steps_per_epoch=spe, total_steps=total,
                warmup_steps=warmup_steps, eval_every=min(eval_every, total), schedule=schedule,
                schedule_text=schedules.describe(**kwargs))
