"""A PyTorch module as a model of the protocol (`maths.protocol`): torch is an optional
extra, imported only when a module reaches here (`pip install 'parallel-workbench[torch]'`).

The module's trainable parameters become one flat vector, in `named_parameters()` order
(its `layout()`: PowerSGD sees a Linear's weight as its (out, in) matrix, cgdp and LARS
its layers). Nothing is copied on the way in or out: each parameter's `.data` is a view
into the caller's `params` array and each `.grad` a view into the caller's `grad_out`
(`torch.from_numpy` on a CPU worker; on a GPU worker, CuPy arrays handed over through
DLPack, so a CUDA tensor and the CuPy array share device memory and the exchange never
leaves the device). Autograd accumulates into those views in place, so one backward pass
writes the gradient where the algorithm reads it. The views are rebound only when the
caller passes another array (an algorithm passes the same buffers every step).

The loss is cross-entropy over the module's outputs unless the factory returns
`(module, loss_fn)`, `loss_fn(output, y) -> scalar tensor`. `init(seed)` re-initialises
every submodule that has `reset_parameters` under `torch.manual_seed(seed)`; parameters
no submodule resets keep the values the module was built with (`protocol.build_model`
builds every instance under the run's torch seed, so all workers agree on them), and
frozen ones (`requires_grad=False`: outside the parameter vector, a pretrained layer) keep
theirs through the resets, so what trains, evaluates and predicts is the module as built.

Refused, in one line each: a module with no trainable parameters; one with buffers
(BatchNorm's running statistics change in training outside the parameter vector, so
workers would disagree about them: use GroupNorm or LayerNorm). Dropout is on in
`loss_and_grad` (train mode) and off in `predict` and `loss` (eval mode). A module with
one output per row is read as a binary classifier's logit (`predict`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .backend import to_numpy
from .models import ModelError, get_array_module

__all__ = ["TorchModel", "to_torch"]
DOCTEST_NEEDS = ("torch",)   # its doctests call torch (imported lazily): workbench/conftest.py reads this


def to_torch(a: Any) -> Any:
    """`a` as a torch tensor sharing its memory: `torch.from_numpy` for a NumPy array,
    DLPack for anything else that speaks it (a CuPy array: a CUDA tensor on its device).

    >>> import numpy as np
    >>> a = np.arange(3.0)
    >>> to_torch(a).add_(1.0).tolist(), a.tolist()          # one memory
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    """
    import torch
    if type(a) is np.ndarray:
        if not a.flags.writeable:      # torch tensors are writable; a read-only array is copied
            a = a.copy()
        return torch.from_numpy(a)
    return torch.from_dlpack(a)


class TorchModel:
    """A `torch.nn.Module` (and a loss) as a model of the protocol; see the module docstring."""

    def __init__(self, module: Any, loss_fn: Any = None, name: str | None = None):
        import torch
        label = name or type(module).__name__
        self.module = module
        self.loss_fn = loss_fn if loss_fn is not None else torch.nn.functional.cross_entropy
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise ModelError(f"a torch module with trainable parameters ({label} has none)", label)
        buffers = [n for n, _ in module.named_buffers()]
        if buffers:
            raise ModelError(f"a torch module without buffers ({label} has {', '.join(buffers[:3])}: state that "
                             "changes in training outside the parameter vector, such as BatchNorm's running "
                             "statistics; use GroupNorm or LayerNorm)", label)
        self._params = [p for _, p in named]
        self._names = [n for n, _ in named]
        sizes = [p.numel() for p in self._params]
        self._bounds = [(int(sum(sizes[:i])), int(sum(sizes[:i + 1]))) for i in range(len(sizes))]
        self.n_params = int(sum(sizes))
        self.flops_per_sample = getattr(module, "flops_per_sample", None)
        self._p_obj: Any = None    # the array the parameters are views of now
        self._g_obj: Any = None    # the array their gradients are views of now
        self._G: Any = None

    def layout(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of each trainable parameter, in `named_parameters()` order."""
        return tuple((n, tuple(p.shape)) for n, p in zip(self._names, self._params))

    # --- binding the module's tensors to the caller's arrays ------------------------------
    def _bind_params(self, params: Any) -> None:
        if params is self._p_obj:
            return
        P = to_torch(params)
        if self._p_obj is not None and getattr(self._p_obj, "dtype", None) != params.dtype:
            for p in self._params:          # a gradient of the old dtype cannot stay on the new data
                p.grad = None
            self._g_obj = self._G = None
        for p, (a, b) in zip(self._params, self._bounds):
            p.data = P[a:b].view(p.shape)
        self._p_obj = params

    def _bind_grads(self, grad_out: Any) -> None:
        if grad_out is self._g_obj:
            return
        G = to_torch(grad_out)
        for p, (a, b) in zip(self._params, self._bounds):
            p.grad = G[a:b].view(p.shape)
        self._g_obj, self._G = grad_out, G

    # --- the protocol -------------------------------------------------------------------
    def init(self, seed: int) -> np.ndarray:
        """Fresh parameters: every submodule's `reset_parameters()` under torch's seed `seed`."""
        import torch
        fresh = torch.empty(self.n_params, dtype=torch.float32)
        for p, (a, b) in zip(self._params, self._bounds):
            fresh[a:b] = p.detach().reshape(-1).to("cpu", torch.float32)   # what no reset touches
        self._bind_params(fresh.numpy())
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            frozen = [(p, p.detach().clone()) for p in self.module.parameters() if not p.requires_grad]
            torch.manual_seed(int(seed))
            for m in self.module.modules():
                reset = getattr(m, "reset_parameters", None) or getattr(m, "_reset_parameters", None)
                if callable(reset):
                    reset()
            for p, kept in frozen:       # a frozen layer is the user's, not ours to draw
                p.copy_(kept)
        return fresh.numpy().copy()

    def loss_and_grad(self, params: Any, X: Any, y: Any, grad_out: Any = None) -> tuple[float, Any]:
        """Mean loss of the batch and its gradient, written into `grad_out` (or a new array)."""
        import torch
        if grad_out is None:
            grad_out = get_array_module(params).empty_like(params)
        self._bind_params(params)
        self._bind_grads(grad_out)
        self._G.zero_()
        self.module.train()
        with torch.enable_grad():
            loss = self.loss_fn(self.module(to_torch(X)), to_torch(y))
            loss.backward()
        return float(loss.detach()), grad_out

    def _eval(self, params: Any, X: Any) -> Any:
        import torch
        self._bind_params(params)
        self.module.eval()
        try:
            with torch.no_grad():
                return self.module(to_torch(X))
        finally:
            self.module.train()

    def predict(self, params: Any, X: Any) -> Any:
        """The class of each row (eval mode), on the device of X: the argmax of the module's
        outputs over their last axis (a language model's (rows, tokens, vocabulary) gives a
        class per token), or, for a module with one output per row (a binary classifier's
        logit, trained with a loss of the user's such as BCE with logits), class 1 where that
        output is above 0 (the argmax of one column would answer 0 for every row)."""
        out = self._eval(params, X)
        if out.ndim == 1 or out.shape[-1] == 1:
            logit = out if out.ndim == 1 else out.squeeze(-1)
            return get_array_module(X).from_dlpack((logit > 0).long())
        return get_array_module(X).from_dlpack(out.argmax(dim=-1))

    def loss(self, params: Any, X: Any, y: Any) -> float:
        """The mean loss in eval mode, without a gradient."""
        import torch
        out = self._eval(params, X)
        with torch.no_grad():
            return float(self.loss_fn(out, to_torch(y)))

    def trained_module(self, params: Any) -> Any:
        """A copy of the module holding `params` (a flat vector of this model's, e.g. a run's
        params.npy) in its own tensors, float32 on the CPU: the trained network, for
        `torch.save(module.state_dict(), ...)` or use outside the workbench."""
        import copy

        import torch
        flat = to_numpy(params)
        if flat.shape != (self.n_params,):
            raise ValueError(f"params: a vector of this model's {self.n_params:,} parameters, got shape {flat.shape}")
        self._p_obj = self._g_obj = self._G = None
        module = copy.deepcopy(self.module).to("cpu")
        trained = [p for p in module.parameters() if p.requires_grad]
        with torch.no_grad():
            for p, (a, b) in zip(trained, self._bounds):
                p.data = torch.from_numpy(flat[a:b].astype(np.float32)).reshape(p.shape).clone()
                p.grad = None
        return module.eval()

    def __getstate__(self) -> dict:
        # travels as the module (and loss); the views onto a caller's arrays stay behind
        state = self.__dict__.copy()
        state.update(_p_obj=None, _g_obj=None, _G=None)
        return state
