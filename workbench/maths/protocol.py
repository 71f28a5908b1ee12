"""The model protocol: what a model is to the workbench, and the one adapter (`as_model`)
that gives any object following it the interface the engine and the algorithms use.

A model is any object with

    init(seed) -> params                       a 1-D float array, the same for the same seed
    loss_and_grad(params, X, y) -> (loss, grad)   the batch's mean loss and its gradient,
                                               grad the same shape and dtype as params
    predict(params, X) -> labels               (B,) integer class of each row of X

and, optionally,

    layout() -> [(name, shape), ...]           the tensors of the flat vector, in order
                                               (LARS/LAMB, PowerSGD and cgdp act per tensor;
                                               tensors sharing the name before its last dot
                                               are one layer group, e.g. fc1.W and fc1.b)
    flops_per_sample                           FLOPs of one training example, forward and
                                               backward (the simulator charges them)
    loss(params, X, y) -> float                the mean loss alone (evaluation; without it
                                               the gradient is computed and dropped)

`X` is (B, n_features) of params' dtype (float32 in a run, float64 in a gradient check),
`y` (B,) int64 labels in [0, n_classes). The arrays are NumPy on CPU workers and CuPy on
GPU workers: code written against the array module of `params` runs on both. The
built-in models (`maths.models`: softmax, MLP, CNN) follow this protocol and carry the
engine's extras themselves; any other object goes through `as_model`, once, which adds them:

- `grad_out`: the gradient is copied into the caller's buffer (a model whose
  `loss_and_grad` takes `grad_out=` itself writes into it);
- `layout()` absent: the whole vector is one layer; a rule that needs layers (lars,
  lamb, PowerSGD, cgdp's chunks) refuses the run in one line (`check_model`);
- `on_grad_ready` (cgdp): every group is reported when the whole gradient is there,
  last first: nothing overlaps the backward pass of a model that computes it in one go;
- `loss_and_grad_stacked` (the simulator's batched and lockstep paths): a loop of plain
  calls, one per row, so the results are bitwise those of the calls one by one;
- `score` (evaluation): `loss` (else `loss_and_grad`'s loss) and `predict`.

A PyTorch module, or a factory returning one, goes through `maths.torchmodel`'s adapter
first (torch is an optional extra). `check_model` runs one step before any worker starts
and names what is wrong: an `init` that is not 1-D, a gradient of the wrong size or dtype,
a NaN at the first step, a layout that does not cover the vector; it cannot tell a wrong
gradient from a right one, which `check_gradient` does against central differences of the
loss. See docs/models.md.
"""
from __future__ import annotations

import contextlib
import copy
import math
import sys
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..config import ConfigError
from ..usercode import UserCodeError, code_record, is_factory, resolve, token_of
from .models import Layer, Model, ModelError, get_array_module, stacked_calls

__all__ = ["GradientCheck", "ModelError", "ModelProtocol", "ProtocolModel", "as_model", "build_model", "check_gradient",
           "check_model", "model_record",
           "needs_layers"]

CHECK_ROWS = 8   # rows of the first batch `check_model` computes one step on


@runtime_checkable
class ModelProtocol(Protocol):
    """The three methods every model has (the optional ones are in the module docstring)."""

    def init(self, seed: int) -> Any: ...

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, Any]: ...

    def predict(self, params: Any, X: Any) -> Any: ...


def _accepts(fn: Any, keyword: str) -> bool:
    """Whether callable `fn` takes the keyword argument `keyword`."""
    import inspect
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in params)


class ProtocolModel:
    """A model following the protocol, with the engine's interface around it (see the
    module docstring for what each extra does). Built by `as_model`; `obj` is the model."""

    def __init__(self, obj: Any, name: str, n_params: int | None = None, spec: str | None = None):
        self.obj, self.name = obj, name
        self.spec = spec or name      # what the config calls it: errors name it
        self._n = n_params
        self._layout: tuple[tuple[str, tuple[int, ...]], ...] | None = None
        self._groups: list[tuple[int, int]] | None = None
        self._takes_grad_out = _accepts(obj.loss_and_grad, "grad_out")
        self.layered = callable(getattr(obj, "layout", None))
        self.flops_per_sample = getattr(obj, "flops_per_sample", None)

    @property
    def code(self) -> Any:
        """The object holding the user's code (a torch adapter's module), for shipping it by value."""
        from .torchmodel import TorchModel
        return self.obj.module if isinstance(self.obj, TorchModel) else self.obj

    # --- size and layout ---------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """Length of the flat vector (from the layout, else from `init(0)`)."""
        if self._n is None:
            self._n = sum(math.prod(s) for _, s in self.layout()) if self.layered else int(self.init(0).shape[0])
        return self._n

    def layout(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of each tensor: the model's own, else the whole vector as one."""
        if self._layout is None:
            if self.layered:
                self._layout = _read_layout(self.obj.layout(), self.spec)
            else:
                self._layout = (("params", (self.n_params,)),)
        return self._layout

    @property
    def layers(self) -> list[Layer]:
        """The tensors as `Layer` views (name, shape, offset), in flat order."""
        out, at = [], 0
        for name, shape in self.layout():
            out.append(Layer(name, shape, at))
            at += math.prod(shape)
        return out

    def layer_groups(self) -> list[tuple[int, int]]:
        """(start, stop) of each layer group (consecutive tensors named alike up to their last dot)."""
        if self._groups is None:
            groups: list[list[Any]] = []
            for layer in self.layers:
                head = layer.name.rpartition(".")[0] or layer.name
                if groups and groups[-1][0] == head:
                    groups[-1][2] = layer.stop
                else:
                    groups.append([head, layer.start, layer.stop])
            self._groups = [(a, b) for _, a, b in groups]
        return list(self._groups)

    def views(self, params: Any) -> dict[str, Any]:
        """Named, reshaped views into `params` (no copies)."""
        if params.ndim != 1 or params.shape[0] != self.n_params:
            raise ValueError(f"params: a flat vector of shape ({self.n_params},), got shape {tuple(params.shape)}")
        return {layer.name: params[layer.start:layer.stop].reshape(layer.shape) for layer in self.layers}

    def describe(self) -> str:
        """One line for logs, reports and caches: the model's name and its parameter count."""
        return f"{self.name} ({self.n_params:,} params)"

    def __repr__(self) -> str:
        return f"<ProtocolModel: {self.describe()}>"

    # --- the protocol, with the engine's extras ------------------------------------------
    def init(self, seed: int) -> np.ndarray:
        """The model's `init(seed)` as a fresh float32 NumPy vector (what runs train)."""
        raw = self.obj.init(seed)
        xp = get_array_module(raw) if hasattr(raw, "shape") else np
        arr = raw if xp is not np else np.asarray(raw)
        if not hasattr(raw, "shape"):   # a dict of arrays, a list of tensors: one flat vector is what is exchanged
            raise ModelError(f"a model whose init(seed) returns one 1-D array, its tensors concatenated, layout() "
                             f"naming them ({self.spec}'s returns a {type(raw).__name__})", self.spec)
        if getattr(arr, "ndim", None) != 1:
            raise ModelError(f"a model whose init(seed) returns a 1-D array ({self.spec}'s has shape "
                             f"{tuple(getattr(arr, 'shape', ()))})", self.spec)
        if arr.dtype.kind != "f":
            raise ModelError(f"a model whose init(seed) returns floats ({self.spec}'s are {arr.dtype})", self.spec)
        if xp is not np:
            arr = xp.asnumpy(arr)
        return np.array(arr, dtype=np.float32, copy=True)

    def _cast(self, params: Any, X: Any) -> Any:
        return X if X.dtype == params.dtype else X.astype(params.dtype)

    def loss_and_grad(self, params: Any, X: Any, y: Any, grad_out: Any = None,
                      on_grad_ready: Any = None) -> tuple[float, Any]:
        """The model's mean loss and gradient; the gradient in `grad_out` when given."""
        X = self._cast(params, X)
        if grad_out is not None and self._takes_grad_out:
            loss, grad = self.obj.loss_and_grad(params, X, y, grad_out=grad_out)
        else:
            loss, grad = self.obj.loss_and_grad(params, X, y)
        if getattr(grad, "shape", None) != params.shape:
            raise ModelError(f"a gradient of params' shape {tuple(params.shape)} ({self.spec}'s has shape "
                             f"{tuple(getattr(grad, 'shape', ()))})", self.spec)
        if grad_out is not None and grad is not grad_out:
            grad_out[...] = grad
            grad = grad_out
        if on_grad_ready is not None:   # all of it is ready only now: report every group, last first
            for start, stop in reversed(self.layer_groups()):
                on_grad_ready(start, stop)
        return float(loss), grad

    def loss_and_grad_stacked(self, params: Any, X: Any, y: Any, grad_out: Any) -> Any:
        """K plain `loss_and_grad` calls, one per row of X (params one row each or shared):
        the simulator's batched paths, bitwise the calls made one by one."""
        return stacked_calls(self.loss_and_grad, params, X, y, grad_out)

    def predict(self, params: Any, X: Any) -> Any:
        """The model's predicted class of each row of X."""
        return self.obj.predict(params, self._cast(params, X))

    def loss(self, params: Any, X: Any, y: Any) -> float:
        """The mean loss: the model's `loss` when it has one, else `loss_and_grad`'s."""
        X = self._cast(params, X)
        fn = getattr(self.obj, "loss", None)
        return float(fn(params, X, y)) if callable(fn) else float(self.obj.loss_and_grad(params, X, y)[0])

    def score(self, params: Any, X: Any, y: Any) -> tuple[float, int]:
        """(summed loss over the labels, labels predicted right): what the evaluator adds up."""
        pred = self.predict(params, X)
        return self.loss(params, X, y) * int(y.size), int((pred == y).sum())


def _read_layout(raw: Any, name: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A model's `layout()` as ((name, shape), ...), or ModelError saying what is wrong."""
    allowed = "a model whose layout() lists (name, shape) of each tensor, in flat order"
    try:
        items = tuple(raw)
    except TypeError:
        raise ModelError(f"{allowed} ({name}'s gives {type(raw).__name__})", name) from None
    out, seen = [], set()
    for item in items:
        try:
            tname, shape = item
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise ModelError(f"{allowed} ({name}'s has the entry {item!r})", name) from None
        # a shape of () is one number (a scalar bias, torch's nn.Parameter(torch.tensor(0.))):
        # like a 1-D tensor, no decay and no trust ratio for LARS/LAMB, no matrix for PowerSGD
        if not isinstance(tname, str) or any(d < 1 for d in shape) or tname in seen:
            raise ModelError(f"{allowed}, each named once with a shape of positive sizes, or () for one number "
                             f"({name}'s has {item!r})", name)
        seen.add(tname)
        out.append((tname, shape))
    if not out:
        raise ModelError(f"{allowed} ({name}'s is empty)", name)
    return tuple(out)


def _is_torch_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")   # a module can only exist if torch is imported
    if torch is None:
        return False
    if isinstance(obj, tuple) and len(obj) == 2:
        return isinstance(obj[0], torch.nn.Module) and callable(obj[1])
    return isinstance(obj, torch.nn.Module)


# What a model's own code may define: a built-in's engine extras (grad_out, the stacked
# path, score) compute the built-in's maths, so a subclass redefining one of these is a
# model of the user's and goes through the adapter like any other.
PROTOCOL_METHODS = ("init", "loss_and_grad", "predict", "loss", "layout")


def _user_overrides(cls: type) -> list[str]:
    """The protocol's methods that `cls` (a `Model` subclass) takes from a class outside
    workbench, i.e. a user's subclass redefined them."""
    out = []
    for method in PROTOCOL_METHODS:
        owner = next((c for c in cls.__mro__ if method in vars(c)), None)
        if owner is not None and not owner.__module__.startswith("workbench."):
            out.append(method)
    return out


def as_model(obj: Any, name: str | None = None, spec: str | None = None) -> Any:
    """`obj` with the engine's interface: a built-in model (or a subclass of
    `maths.models.Model` that redefines none of the protocol's methods) as it is; a PyTorch module, or (module, loss_fn), through the
    torch adapter; any other object following the protocol wrapped in `ProtocolModel`.

    >>> class Mean:                      # the smallest model: predicts class 0, learns nothing
    ...     def init(self, seed): return np.zeros(3)
    ...     def loss_and_grad(self, params, X, y): return 0.0, np.zeros_like(params)
    ...     def predict(self, params, X): return np.zeros(len(X), dtype=int)
    >>> m = as_model(Mean(), "Mean")
    >>> m.describe(), m.layout(), m.init(0).dtype
    ('Mean (3 params)', (('params', (3,)),), dtype('float32'))
    """
    if isinstance(obj, Model) and not _user_overrides(type(obj)):
        return obj
    label = spec or name or type(obj).__name__
    if _is_torch_module(obj):
        from .torchmodel import TorchModel
        module, loss_fn = obj if isinstance(obj, tuple) else (obj, None)
        obj = TorchModel(module, loss_fn, name=label)
    missing = [m for m in ("init", "loss_and_grad", "predict") if not callable(getattr(obj, m, None))]
    if missing:
        raise ModelError("an object with init(seed), loss_and_grad(params, X, y) and predict(params, X) (the "
                         f"model protocol, docs/models.md); {label} is a {type(obj).__name__} with no "
                         f"{', '.join(missing)}", label)
    return ProtocolModel(obj, name or label, spec=label)


@contextlib.contextmanager
def torch_seeded(seed: int):
    """torch's random generator at `seed` for the block, and as it was after it, when torch
    is loaded (a factory that builds a torch module has imported it); nothing otherwise."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def build_model(spec: str, n_features: int, n_classes: int, model_args: dict[str, Any] | None = None,
                seed: int = 0) -> Any:
    """The model `spec` names, built for a dataset and wrapped by `as_model`.

    A class or a factory is called as `factory(n_features, n_classes, **model_args)`, under
    torch's seed `seed` when torch is loaded (`torch_seeded`: every worker's instance, every
    algorithm's and every run's of the seed, starts from the same values, also those no
    `reset_parameters` touches: a parameter of the user's own, a frozen layer); an
    instance given in Python is copied (each worker its own). Its name in logs and caches
    is the spec with its arguments and a short hash of its code.

    Raises:
        ModelError: the name does not resolve (the module, the name, the import's error), the
            factory raised, or what it built does not follow the protocol.
    """
    try:
        obj = resolve(spec)
    except UserCodeError as exc:
        raise ModelError(exc.allowed, exc.value) from None
    args = dict(model_args or {})
    if is_factory(obj):
        try:
            with torch_seeded(seed):
                built = obj(n_features, n_classes, **args)
        except Exception as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            raise ModelError(f"a factory that builds with (n_features={n_features}, n_classes={n_classes}"
                             f"{', ' + shown if shown else ''}); {spec} raised {type(exc).__name__}: "
                             f"{str(exc).strip()[:200]}", spec) from None
    else:
        if args:
            raise ModelError("model_args only for a class or a factory (an instance is used as it is)", spec)
        built = copy.deepcopy(obj)
    shown = ",".join(f"{k}={v}" for k, v in args.items())
    digest = token_of(spec)[:8] or code_record(obj).get("sha256", "")[:8]
    return as_model(built, f"{spec}{'(' + shown + ')' if shown else ''} #{digest}", spec=spec)


def model_record(spec: str, model: Any, model_args: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run's model was, for its summary (`summary["model"]`): its name, arguments,
    parameter count and, for a model of the user's, its module, file and code hash."""
    out: dict[str, Any] = {"name": spec, "model_args": dict(model_args or {}), "n_params": int(model.n_params),
                           "describe": model.describe()}
    if isinstance(model, Model) and type(model).__module__.startswith("workbench.maths.") and ":" not in spec:
        out["builtin"] = True
        return out
    try:
        out.update(code_record(resolve(spec)))
    except UserCodeError:
        pass
    out["builtin"] = False
    return out


# Rules and algorithms that act per layer, with what they do with the layers (for the one-line refusal).
def needs_layers(config: Any) -> tuple[str, str] | None:
    """(field, what needs the layers) when `config` asks for something that acts per
    layer (lars and lamb's trust ratios, PowerSGD's matrices, cgdp's chunks), else None."""
    if config.optimizer in ("lars", "lamb"):
        return "optimizer", f"{config.optimizer}'s layer-wise trust ratio"
    if config.compression == "powersgd":
        return "compression", "PowerSGD's per-layer matrices"
    if config.algorithm == "cgdp":
        return "algorithm", "cgdp's chunks of layers"
    return None


def check_model(model: Any, X: Any, y: Any, config: Any = None, seed: int = 0) -> np.ndarray:
    """One step of `model` on a few rows, before any worker starts; ConfigError naming the
    model and what differs from the protocol. Returns the initial parameters it made.

    Checks: `init` gives a 1-D float vector (the same for the same seed); a layout covers
    it; the loss is a finite number and the gradient has params' shape and dtype and no
    NaN or inf; `predict` gives one integer label per label of y (per row, or per token of a
    language model's row). With `config`, a rule or an
    algorithm that acts per layer needs a model with a layout (`needs_layers`).
    """
    name = getattr(model, "spec", None) or getattr(model, "name", type(model).__name__)
    params = model.init(seed)
    again = model.init(seed)
    if params.shape != again.shape or not np.array_equal(params, again):
        raise ModelError(f"a model whose init(seed) gives the same vector for the same seed ({name}'s differs "
                         f"between two calls with seed {seed})", name)
    n = int(params.shape[0])
    if getattr(model, "n_params", n) != n:
        raise ModelError(f"a model whose layout() covers its vector ({name}'s layout has {model.n_params:,} "
                         f"values, init gives {n:,})", name)
    if config is not None and not getattr(model, "layered", True):
        need = needs_layers(config)
        if need is not None:
            field, what = need
            raise ConfigError(field, f"a model with a layout() for {what} ({name} gives none: its whole vector "
                                     "is one layer)", getattr(config, field))
    rows = min(CHECK_ROWS, int(X.shape[0]))
    Xb, yb = np.ascontiguousarray(X[:rows]), np.ascontiguousarray(y[:rows])
    try:
        loss, grad = _raw_step(model, params, Xb, yb)
    except ConfigError:
        raise
    except Exception as exc:
        raise ModelError(f"a model whose loss_and_grad runs on a batch of {rows} rows ({name} raised "
                         f"{type(exc).__name__}: {str(exc).strip()[:200]})", name) from None
    if not isinstance(grad, np.ndarray) or grad.shape != params.shape or grad.dtype != params.dtype:
        got = (f"{type(grad).__name__} of shape {tuple(getattr(grad, 'shape', ()))} and dtype "
               f"{getattr(grad, 'dtype', '?')}")
        raise ModelError(f"a gradient like params (a NumPy array of shape ({n},) and dtype {params.dtype}); "
                         f"{name}'s first step gave a {got}", name)
    try:
        loss = float(loss)
    except (TypeError, ValueError):
        raise ModelError(f"a loss that is one number ({name}'s first step gave {type(loss).__name__})", name) from None
    if not math.isfinite(loss):
        raise ModelError(f"a finite loss at the first step ({name}'s is {loss} at the initial parameters)", name)
    bad = ~np.isfinite(grad)
    if bad.any():
        at = int(np.argmax(bad))
        raise ModelError(f"a finite gradient at the first step ({name}'s has {int(bad.sum())} NaN or inf "
                         f"values, the first at index {at})", name)
    pred = np.asarray(model.predict(params, Xb))
    if pred.shape != yb.shape or pred.dtype.kind not in "iu":     # one per row, or per token of a row (y (B, T))
        raise ModelError(f"a model whose predict gives one integer label per label of y (shape {yb.shape}); "
                         f"{name}'s gave {pred.dtype} of shape {pred.shape}", name)
    return params


def _raw_step(model: Any, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
    """One loss_and_grad, the gradient as the model itself returns it (not yet copied
    into a buffer, so its dtype and shape are the model's own)."""
    if isinstance(model, ProtocolModel):
        X = model._cast(params, X)
        return model.obj.loss_and_grad(params, X, y)
    return model.loss_and_grad(params, X.astype(params.dtype, copy=False), y)


class GradientCheck:
    """What `check_gradient` found: per direction, the gradient's directional derivative
    (`analytic`, g . v) and the loss's central difference along it (`numeric`), their
    relative difference, and whether the largest stays within `tolerance`. `str()` is one line."""

    def __init__(self, name: str, rows: int, step: float, tolerance: float, directions: list[dict[str, Any]]):
        self.name, self.rows, self.step, self.tolerance = name, rows, step, tolerance
        self.directions = directions
        self.max_rel_error = max(d["rel_error"] for d in directions)
        self.ok = bool(self.max_rel_error <= tolerance)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        head = (f"gradient check of {self.name} on {self.rows} rows in float64, {len(self.directions)} directions "
                f"(the gradient's own and {len(self.directions) - 1} random)")
        if self.ok:
            return f"{head}: agrees, largest relative difference {self.max_rel_error:.1e} (tolerance {self.tolerance:.0e})"
        worst = max(self.directions, key=lambda d: d["rel_error"])
        return (f"{head}: DISAGREES, along {worst['direction']} loss_and_grad gives a slope of "
                f"{worst['analytic']:.6g}, central differences of the loss {worst['numeric']:.6g} (relative "
                f"difference {worst['rel_error']:.2g}, tolerance {self.tolerance:.0e})")

    __repr__ = __str__


def check_gradient(model: Any, X: Any, y: Any, *, model_args: dict[str, Any] | None = None, seed: int = 0,
                   rows: int = 16, directions: int = 5, step: float = 1e-5,
                   tolerance: float = 1e-5) -> GradientCheck:
    """Compare a model's gradient with central differences of its loss, in float64.

    `model` is what a config takes: a class or factory (called as `model(n_features,
    n_classes, **model_args)`, sized by `X` and `y`), an instance, or a `package.module:Name`.
    On the first `rows` rows, at `init(seed)` cast to float64, the slope `g . v` that
    `loss_and_grad` gives is compared with `(L(p + step v) - L(p - step v)) / (2 step)` along
    unit directions v: the gradient's own (a gradient off by a factor shows there) and
    `directions - 1` random ones (a wrong component shows in all of them). The relative
    difference of a correct float64 gradient is about 1e-9; a model that computes in float32
    inside reaches about 1e-4 (raise `tolerance`), and a kink (ReLU) crossed within `step`
    can also show one direction off. `check_model`, run before every run, does not do this:
    it cannot tell a wrong gradient from a right one, and a wrong one trains without an error.
    """
    X = np.asarray(X)
    X = X.reshape(len(X), -1) if X.ndim > 2 else X
    y = np.asarray(y)
    if X.ndim != 2 or len(X) == 0 or len(y) != len(X):
        raise ValueError(f"X: rows of features with one label of y each, got X of shape {X.shape} and y of "
                         f"shape {y.shape}")
    if isinstance(model, str):
        try:
            model = resolve(model)
        except UserCodeError as exc:
            raise ModelError(exc.allowed, exc.value) from None
    label = getattr(model, "__qualname__", None) or type(model).__name__
    if is_factory(model):
        model = model(int(X.shape[1]), int(y.max()) + 1, **dict(model_args or {}))
    elif model_args:
        raise ModelError("model_args only for a class or a factory (an instance is used as it is)", label)
    m = as_model(model, label)
    n = min(int(rows), len(X))
    Xb, yb = np.ascontiguousarray(X[:n], dtype=np.float64), np.ascontiguousarray(y[:n])
    p = np.asarray(m.init(seed), dtype=np.float64)
    _, g = _raw_step(m, p, Xb, yb)
    g = np.asarray(g, dtype=np.float64).reshape(-1)
    if g.shape != p.shape:
        raise ModelError(f"a gradient like params (shape {p.shape}); {label}'s has shape {g.shape}", label)
    rng = np.random.default_rng(seed)
    found = []
    for k in range(max(1, int(directions))):
        norm = float(np.linalg.norm(g))
        if k == 0 and norm > 0:
            v, what = g / norm, "the gradient itself"
        else:
            v = rng.standard_normal(p.shape)
            v, what = v / np.linalg.norm(v), f"random direction {k}"
        analytic = float(g @ v)
        numeric = (m.loss(p + step * v, Xb, yb) - m.loss(p - step * v, Xb, yb)) / (2 * step)
        scale = max(abs(analytic), abs(numeric))
        rel = abs(analytic - numeric) / scale if scale > 1e-12 else 0.0
        found.append({"direction": what, "analytic": analytic, "numeric": float(numeric), "rel_error": float(rel)})
    return GradientCheck(getattr(m, "name", label), n, step, tolerance, found)
