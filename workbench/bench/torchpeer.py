"""The PyTorch peer of `python -m workbench bench` (optional: torch is never a dependency).

Torch's own no-exchange limit (the same MLP trained single-process, in as many processes
side by side), PyTorch DDP (gloo) on the same model and per-worker batch, and gloo's
all_reduce of the same number of floats, each in a fresh process (`torch_main`), each
compared with torch's own limit, never with our absolute samples/s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from .throughput import STEADY_FROM, Bench, bracketed


# ------------------------------------------------------------------------------ the torch peer
def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _torch(b: Bench, mode: str) -> dict | None:
    """Run the torch peer in `mode` ("limit", "ddp" or "allreduce") in a fresh process
    (it spawns one process per worker); None (with a note) if it failed."""
    spec = {"mode": mode, "world": b.cpus, "n_features": b.size.n_features, "hidden": b.size.widths,
            "batch": b.size.batch_per_worker, "seconds": b.args.seconds, "n_floats": b.n_params,
            "port": _free_port()}
    threads = b.config("sync_sgd", 10).blas_threads   # the same threads as our workers (util.blas)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    try:
        proc = subprocess.run([sys.executable, "-c", f"from workbench.bench.torchpeer import torch_main; torch_main({json.dumps(spec)!r})"],
                              capture_output=True, text=True, env=env, timeout=b.args.seconds * 10 + 180)
    except subprocess.TimeoutExpired:
        b.notes.append(f"PyTorch {mode} did not finish within {b.args.seconds * 10 + 180:.0f} s; left out")
        return None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        last = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or [f"exit status {proc.returncode}"]
        b.notes.append(f"PyTorch {mode} failed in one round: {last[-1][-300:]}")   # one line: the error itself
        return None
    return json.loads(lines[-1])


def _torch_limit_entry(b: Bench) -> dict | None:
    got = _torch(b, "limit")
    if got is None:
        return None
    b.torch_limit = got["samples_per_s"]
    return {"samples_per_s": got["samples_per_s"], "limit": got["samples_per_s"]}


def _ddp_entry(b: Bench) -> dict | None:
    if not b.torch_limit:
        return None
    got = _torch(b, "ddp")
    after = _torch(b, "limit")                      # torch's limit again, just after
    if got is None:
        return None
    limit = bracketed(b.torch_limit, after["samples_per_s"]) if after else {"limit": b.torch_limit}
    return {"samples_per_s": got["samples_per_s"], **limit}


def _gloo_entry(b: Bench) -> dict | None:
    got = _torch(b, "allreduce")
    return None if got is None else {"exchange_ms": got["exchange_ms"]}


class GlooComm:
    """torch.distributed's gloo allreduce in this process: the peer of our allreduces in
    `bench.allreduce`, a process group over tcp (rank 0 listens on host:port).

    Args:
        rank, size: this process's place in the group.
        port: the rendezvous port (free on `host`).
        n: float32 elements of the buffer it reduces.
        host: rank 0's address (another host's, between hosts).
    """

    def __init__(self, rank: int, size: int, port: int, n: int, host: str = "127.0.0.1"):
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)          # gloo's own threads move the bytes; no BLAS work here
        dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=rank, world_size=size)
        self.dist, self.tensor = dist, torch.empty(n, dtype=torch.float32)

    def barrier(self) -> None:
        self.dist.barrier()

    def load(self, buf: Any) -> None:
        """Put `buf` into the tensor the next allreduce sums in place (untimed: gloo, like
        DDP, reduces the caller's tensor itself)."""
        self.tensor.numpy()[:] = buf

    def allreduce(self) -> Any:
        self.dist.all_reduce(self.tensor)
        return self.tensor

    def close(self) -> None:
        self.dist.barrier()      # nobody tears gloo down while a peer is still in its last call
        self.dist.destroy_process_group()


def torch_main(spec_json: str) -> None:
    """Entry point of the torch peer's process: prints one JSON line with the result."""
    import torch.multiprocessing as mp
    spec = json.loads(spec_json)
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"workbench-torch-{uuid.uuid4().hex[:10]}.json")
    mp.spawn(_torch_worker, args=(spec, out), nprocs=spec["world"])
    with open(out) as f:
        print(f.read())
    os.remove(out)


def _torch_worker(rank: int, spec: dict, out: str) -> None:
    """One torch process: the MLP with torch's own data handling; "limit" trains with no
    exchange (processes only meet to start and stop together), "ddp" wraps the model in
    DistributedDataParallel (gloo), "allreduce" times gloo's all_reduce of n floats."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(spec["port"]))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", rank=rank, world_size=spec["world"])
    try:
        if spec["mode"] == "allreduce":
            buf = torch.ones(spec["n_floats"])
            times = []
            for _ in range(200):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(buf)
                times.append(time.perf_counter() - t0)
            t = torch.tensor(times)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)       # the slowest rank, per repeat
            if rank == 0:
                _write(out, {"exchange_ms": float(t.median()) * 1e3})
            dist.barrier()
            return
        torch.manual_seed(rank)
        widths = [spec["n_features"], *spec["hidden"], 10]
        layers: list[Any] = []
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers[:-1])
        if spec["mode"] == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batch, chunks, seconds = spec["batch"], 20, spec["seconds"]
        X = torch.randn(chunks * batch, spec["n_features"])
        y = torch.randint(0, 10, (chunks * batch,))

        def train(iterations: int, start: int = 0) -> None:
            for i in range(start, start + iterations):
                lo = (i % chunks) * batch
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(X[lo:lo + batch]), y[lo:lo + batch])
                loss.backward()
                opt.step()

        # DDP's ranks must run the same number of steps (a rank that stops early leaves the
        # others in an allreduce): time 20 steps, agree on the slowest, then run a fixed
        # count. Without DDP, as our limit: each process trains for the same time.
        train(5)
        dist.barrier()
        t0 = time.perf_counter()
        train(20, 5)
        per_step = torch.tensor([(time.perf_counter() - t0) / 20])
        dist.all_reduce(per_step, op=dist.ReduceOp.MAX)
        steps = max(20, int(seconds * (1 - STEADY_FROM) / float(per_step.item())))
        dist.barrier()
        t0 = time.perf_counter()
        if spec["mode"] == "ddp":
            train(steps, 25)
            done = steps
        else:
            done = 0
            while time.perf_counter() - t0 < seconds * (1 - STEADY_FROM):
                train(10, 25 + done)
                done += 10
        rate = torch.tensor([done * batch / (time.perf_counter() - t0)])
        dist.all_reduce(rate)                               # sum over the processes
        if rank == 0:
            _write(out, {"samples_per_s": float(rate.item())})
        dist.barrier()       # nobody tears gloo down while a peer is still in its last call
    finally:
        dist.destroy_process_group()


def _write(path: str, obj: dict) -> None:
    with open(path, "w") as f:
        json.dump(obj, f)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


