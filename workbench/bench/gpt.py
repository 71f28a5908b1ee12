"""`python -m workbench bench --gpt`: a training step of our GPT (`maths.gpt`) on one core
against the same architecture in PyTorch eager on one core (optional: torch is never a
dependency).

Both sides run in one fresh process with one thread each (OPENBLAS/OMP/MKL_NUM_THREADS=1,
`torch.set_num_threads(1)`): a step is the forward and backward pass over one batch and a
plain SGD update of the parameters. Torch's model is a nanoGPT-style `nn.Module` (written
here) holding the same parameters (`torch_gpt`): nn.Embedding, nn.LayerNorm, nn.Linear,
`F.scaled_dot_product_attention(is_causal=True)`, GELU (tanh), the head tied to the token
embedding; its loss on the first batch must equal ours to float32 rounding before anything
is timed. The steps are timed in interleaved rounds (ours then torch's, torch's first on
odd rounds, so a drift of the machine's load hits both), each side's median step per
round; the ratio is ours over torch's, per round, reported as the median and the range
over rounds, with the machine's load before and after.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from .paired import ONE_THREAD, interleaved, paired_rounds, ratio_text, rounds_flag

# (n_layers, d_model, n_heads, context, vocab, batch): the default GPT on the generated
# language, and a wider one on a character corpus's vocabulary
SIZES: dict[str, tuple[int, int, int, int, int, int]] = {
    "default": (2, 64, 4, 64, 16, 32),
    "wider": (4, 128, 4, 128, 65, 16),
}


def torch_gpt(model: Any, params: Any) -> Any:
    """A PyTorch nn.Module of `model`'s architecture (a `maths.gpt.GPT`) holding `params`."""
    import torch
    from torch import nn
    F = nn.functional
    d, H, T, V = model.d_model, model.n_heads, model.context, model.vocab

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            B, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (a.view(B, t, H, d // H).transpose(1, 2) for a in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, t, d)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class TorchGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
            self.h = nn.ModuleList(Block() for _ in range(model.n_layers))
            self.ln_f = nn.LayerNorm(d, eps=1e-5)
            self.lm_head = nn.Linear(d, V, bias=False)
            self.lm_head.weight = self.wte.weight                   # tied, as ours

        def forward(self, idx: Any, targets: Any) -> Any:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    net = TorchGPT()
    P = {k: torch.from_numpy(v.copy()) for k, v in model.views(params).items()}
    with torch.no_grad():
        net.wte.weight.copy_(P["wte"])
        net.wpe.weight.copy_(P["wpe"])
        for i, blk in enumerate(net.h):
            for mod, name in ((blk.ln_1, "ln1"), (blk.ln_2, "ln2")):
                mod.weight.copy_(P[f"h{i}.{name}.g"])
                mod.bias.copy_(P[f"h{i}.{name}.b"])
            for mod, name in ((blk.c_attn, "attn"), (blk.attn_proj, "proj"), (blk.c_fc, "fc"), (blk.mlp_proj, "out")):
                mod.weight.copy_(P[f"h{i}.{name}.W"].T)              # ours is (in, out), torch's (out, in)
                mod.bias.copy_(P[f"h{i}.{name}.b"])
        net.ln_f.weight.copy_(P["ln_f.g"])
        net.ln_f.bias.copy_(P["ln_f.b"])
    return net


def child(spec_json: str) -> None:
    """In the benchmark's process: time both sides (see the module docstring); one JSON line."""
    import numpy as np
    import torch

    from ..maths.gpt import GPT
    torch.set_num_threads(1)
    spec = json.loads(spec_json)
    L, d, H, T, V, B = spec["size"]
    model = GPT(context=T, vocab=V, n_layers=L, d_model=d, n_heads=H)
    params = model.init(0)
    grad = np.empty_like(params)
    rng = np.random.default_rng(0)
    seqs = rng.integers(0, V, (8 * B, T + 1))
    X, Y = np.ascontiguousarray(seqs[:, :-1]), np.ascontiguousarray(seqs[:, 1:])
    net = torch_gpt(model, params)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    ours_loss = model.loss_and_grad(params, X[:B], Y[:B], grad_out=grad)[0]
    theirs_loss = float(net(Xt[:B], Yt[:B]))
    if abs(ours_loss - theirs_loss) > 1e-4 * max(1.0, abs(theirs_loss)):
        raise SystemExit(f"the two models disagree: loss {ours_loss} (ours) and {theirs_loss} (torch)")
    at = [0, 0]

    def ours() -> None:
        lo = (at[0] % 8) * B
        at[0] += 1
        model.loss_and_grad(params, X[lo:lo + B], Y[lo:lo + B], grad_out=grad)
        np.subtract(params, np.float32(1e-3) * grad, out=params)

    def theirs() -> None:
        lo = (at[1] % 8) * B
        at[1] += 1
        opt.zero_grad(set_to_none=True)
        net(Xt[lo:lo + B], Yt[lo:lo + B]).backward()
        opt.step()

    rounds = interleaved(ours, theirs, spec["rounds"], spec["steps"], warm=3)
    print(json.dumps({"rounds": rounds, "loss": [ours_loss, theirs_loss], "n_params": model.n_params,
                      "torch": torch.__version__, "numpy": np.__version__}))


def measure(size: tuple[int, ...], rounds: int = 5, steps: int = 10) -> dict[str, Any]:
    """One row: our step and torch's, per round and as a ratio (median and range over rounds),
    the load before and after; measured in a fresh one-thread process."""
    got = paired_rounds("gpt", {"size": list(size), "rounds": int(rounds), "steps": int(steps)}, "GPT")
    L, d, H, T, V, B = size
    return {"model": f"L{L}-d{d}-h{H}-T{T}-V{V}", "batch": B, "tokens": B * T, "n_params": got["n_params"],
            "ours_ms": got["ours_ms"], "torch_ms": got["theirs_ms"],
            **{k: got[k] for k in ("ratio", "ratio_min", "ratio_max", "load_before", "load_after", "torch", "numpy")}}


def main(args: Any) -> int:
    """`bench --gpt`: print one row per size; exit 2 without torch."""
    from .torchpeer import torch_available
    rounds = rounds_flag(args, 5)   # refused before anything, torch or not
    if not torch_available():
        print("error: bench --gpt needs PyTorch, the optional peer: pip install 'parallel-workbench[torch]'",
              file=sys.stderr)
        return 2
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"GPT training step, ours (NumPy) against PyTorch eager, one core each ({', '.join(f'{k}=1' for k in ONE_THREAD)}, "
          f"torch.set_num_threads(1)); {blas}; {rounds} interleaved rounds; {os.cpu_count()} cores", flush=True)
    for name, size in SIZES.items():
        row = measure(size, rounds=rounds)
        print(f"  {name} {row['model']}, batch {row['batch']} ({row['tokens']} tokens, {row['n_params']:,} params): "
              f"ours {row['ours_ms']:.1f} ms, torch {row['torch_ms']:.1f} ms (each side's median step); "
              f"{ratio_text(row['ours_ms'], row['torch_ms'], row['ratio'], row['ratio_min'], row['ratio_max'], 2)}; "
              f"load {row['load_before']:.2f} -> "
              f"{row['load_after']:.2f}; torch {row['torch']}, numpy {row['numpy']}", flush=True)
    return 0
