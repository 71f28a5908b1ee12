"""`python -m workbench bench --torch-adapter`: what the PyTorch adapter (`maths.torchmodel`)
costs. A worker's step on a torch model through the adapter (`as_model(module)`, the
gradient into the worker's buffer, then the project's SGD update of the flat vector)
against a plain PyTorch training loop of the same module and batch (`zero_grad`, forward,
cross-entropy, backward, `optimizer.step()`, the loss read with `.item()`), one core each.

Both sides run in one fresh process with one thread (OPENBLAS/OMP/MKL_NUM_THREADS=1,
`torch.set_num_threads(1)`), on the same random batches, from the same parameters: their
losses on the first batch must agree to float32 rounding before anything is timed. The
steps are timed in interleaved rounds (adapter then plain, plain first on odd rounds), the
median step of each side per round; the ratio is adapter over plain per round, reported as
the median and the range over rounds, with the machine's load before and after. The
target (issue 45) is a ratio of at most 1.15. Without torch the row says so and is skipped.
"""
from __future__ import annotations

import json
import os
from typing import Any

from .paired import ONE_THREAD, interleaved, paired_rounds, ratio_text, rounds_flag

# (widths, batch): the teaching MLP and the 535k one of `bench`'s sizes
SIZES: dict[str, tuple[tuple[int, ...], int]] = {
    "teaching": ((64, 128, 10), 32),
    "535k": ((784, 512, 256, 10), 128),
}
TARGET = 1.15


def torch_mlp(widths: tuple[int, ...]) -> Any:
    """nn.Sequential of Linear layers with ReLU between them."""
    import torch
    layers: list[Any] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def child(spec_json: str) -> None:
    """In the benchmark's process: time both sides (see the module docstring); one JSON line."""
    import numpy as np
    import torch

    from ..maths.optim import OptimizerSettings, make_optimizer
    from ..maths.protocol import as_model
    torch.set_num_threads(1)
    spec = json.loads(spec_json)
    widths, B, lr = tuple(spec["widths"]), int(spec["batch"]), 1e-3
    torch.manual_seed(0)
    adapter = as_model(torch_mlp(widths), "bench")
    params = adapter.init(0)
    grad = np.empty_like(params)
    opt = make_optimizer(OptimizerSettings("sgd", momentum=0.0), adapter.layout(), np, params.dtype)
    plain = torch_mlp(widths)
    with torch.no_grad():
        for t, (a, b) in zip(plain.parameters(), adapter.obj._bounds):
            t.copy_(torch.from_numpy(params[a:b]).view(t.shape))
    popt = torch.optim.SGD(plain.parameters(), lr=lr)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8 * B, widths[0])).astype(np.float32)
    y = rng.integers(0, widths[-1], 8 * B)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    ours_loss = adapter.loss_and_grad(params, X[:B], y[:B], grad_out=grad)[0]
    theirs_loss = float(torch.nn.functional.cross_entropy(plain(Xt[:B]), yt[:B]))
    if abs(ours_loss - theirs_loss) > 1e-5 * max(1.0, abs(theirs_loss)):
        raise SystemExit(f"the two sides disagree: loss {ours_loss} (adapter) and {theirs_loss} (plain torch)")
    at = [0, 0]

    def adapter_step() -> None:
        lo = (at[0] % 8) * B
        at[0] += 1
        adapter.loss_and_grad(params, X[lo:lo + B], y[lo:lo + B], grad_out=grad)
        opt.step(params, grad, lr)

    def plain_step() -> None:
        lo = (at[1] % 8) * B
        at[1] += 1
        popt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(plain(Xt[lo:lo + B]), yt[lo:lo + B])
        loss.backward()
        popt.step()
        loss.item()

    rounds = interleaved(adapter_step, plain_step, spec["rounds"], spec["steps"], warm=5)
    print(json.dumps({"rounds": rounds, "loss": [ours_loss, theirs_loss], "n_params": adapter.n_params,
                      "torch": torch.__version__, "numpy": np.__version__}))


def measure(widths: tuple[int, ...], batch: int, rounds: int = 7, steps: int = 30) -> dict[str, Any]:
    """One row: the adapter's step and the plain loop's, per round and as a ratio (median
    and range over rounds), the load before and after; measured in a fresh one-thread process."""
    got = paired_rounds("adapter", {"widths": list(widths), "batch": int(batch), "rounds": int(rounds),
                                    "steps": int(steps)}, "adapter")
    return {"model": "mlp " + "-".join(map(str, widths)), "batch": batch, "n_params": got["n_params"],
            "adapter_ms": got["ours_ms"], "plain_ms": got["theirs_ms"],
            **{k: got[k] for k in ("ratio", "ratio_min", "ratio_max", "load_before", "load_after", "torch", "numpy")}}


def main(args: Any) -> int:
    """`bench --torch-adapter`: one row per size; without torch, a line saying it was skipped."""
    from .torchpeer import torch_available
    rounds = rounds_flag(args, 7)   # refused before anything, torch or not
    if not torch_available():
        print("torch adapter: skipped, PyTorch is not installed (the optional peer: pip install 'parallel-workbench[torch]')", flush=True)
        return 0
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"torch adapter step (as_model(module): loss_and_grad into the worker's buffer + our SGD update) against a "
          f"plain PyTorch loop of the same module and batch, one core each ({', '.join(f'{k}=1' for k in ONE_THREAD)}, "
          f"torch.set_num_threads(1)); {blas}; {rounds} interleaved rounds; {os.cpu_count()} cores; target "
          f"ratio <= {TARGET}", flush=True)
    for name, (widths, batch) in SIZES.items():
        print(f"  {row_text(name, measure(widths, batch, rounds=rounds))}", flush=True)
    return 0


def row_text(name: str, row: dict[str, Any]) -> str:
    """One size's line: each side's median step over the rounds, then the ratio as what it is
    (`paired.ratio_text`: the per-round ratios' median and range, and the medians' quotient).

    >>> print(row_text("teaching", {"model": "mlp 64-128-10", "batch": 32, "n_params": 9610, "adapter_ms": 0.369,
    ...       "plain_ms": 0.340, "ratio": 0.833, "ratio_min": 0.75, "ratio_max": 1.21, "load_before": 7.1,
    ...       "load_after": 7.4, "torch": "2.13.0", "numpy": "2.4.6"}))
    teaching mlp 64-128-10, batch 32 (9,610 params): adapter 0.369 ms, plain torch 0.340 ms (each side's median step); ratio per round: median 0.833 (0.750-1.210), of the medians 1.085; load 7.10 -> 7.40; torch 2.13.0, numpy 2.4.6
    """
    ratio = ratio_text(row["adapter_ms"], row["plain_ms"], row["ratio"], row["ratio_min"], row["ratio_max"])
    return (f"{name} {row['model']}, batch {row['batch']} ({row['n_params']:,} params): adapter "
            f"{row['adapter_ms']:.3f} ms, plain torch {row['plain_ms']:.3f} ms (each side's median step); {ratio}; "
            f"load {row['load_before']:.2f} -> {row['load_after']:.2f}; torch {row['torch']}, numpy {row['numpy']}")
