"""`python -m workbench bench`: throughput of the algorithms against their limits, in one run.

On one cluster, for the same model and per-worker batch, it measures:
- the no-exchange limit: every worker computing gradients and updates, never exchanging;
- one parameter exchange: the shared-memory allreduce of the whole parameter vector;
- each algorithm, through the engine, in steady state (the first 20% of its time dropped);
- PyTorch DDP (gloo) on the same model and batch, when torch is importable (an optional
  peer, never a dependency).
Every number is printed with its ratio to the limit, measured again right before each
entry (a shared machine's speed drifts over a minute), because absolute CPU numbers say
little across machines; `vs_ddp` divides two such ratios. A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

import numpy as np
import pandas as pd

STEADY_FROM = 0.2   # drop this share of a run's time: start-up is not throughput


def _bench_config(args: argparse.Namespace, algorithm: str, steps: int) -> Any:
    from .config import RunConfig
    hidden = [int(h) for h in str(args.hidden).split(",") if h]
    return RunConfig(algorithm=algorithm, dataset="synthetic", n_samples=max(20000, 8 * args.batch_per_worker * args.cpus),
                     n_features=args.n_features, n_classes=10, hidden=hidden, model="mlp", cpus=args.cpus, gpus=0,
                     batch_size=args.batch_per_worker * args.cpus, lr=0.01,
                     momentum=0.9 if algorithm in ("async_msgd", "async_measgd") else 0.0, tau=getattr(args, "tau", 1),
                     steps=steps, eval_every=10**9, seed=0)


def compute_only(config_dict: dict, seconds: float) -> dict:
    """Runs on a worker: gradient + update on its slice, no exchange, for `seconds`."""
    from .config import RunConfig
    from .data import global_batch
    from .engine import _dataset
    from .models import make_model
    from .optim import SGD

    cfg = RunConfig.from_dict(config_dict)
    data = _dataset(cfg)
    model = make_model(cfg.model, data.n_features, data.n_classes, hidden=cfg.model_hidden)
    params = model.init(cfg.seed)
    grad = np.empty_like(params)
    opt = SGD(model.n_params, np, params.dtype)
    b = cfg.batch_size // cfg.cpus
    samples, step, t0 = 0, 0, time.perf_counter()
    t_start = None
    while True:
        idx = global_batch(data.n_train, cfg.batch_size, cfg.seed, step)[:b]
        model.loss_and_grad(params, data.X_train[idx], data.y_train[idx], grad_out=grad)
        opt.step(params, grad, 0.01)
        step += 1
        now = time.perf_counter()
        if t_start is None and now - t0 > STEADY_FROM * seconds:
            t_start, samples = now, 0
        elif t_start is not None:
            samples += b
        if now - t0 > seconds:
            return {"samples": samples, "seconds": now - t_start}


def exchange_time(name: str, rank: int, size: int, n: int, repeats: int) -> list[float]:
    """Runs on a worker: times of `repeats` shared-memory allreduces of n float32."""
    from .comm.shm import ShmComm
    comm = ShmComm(name, rank, size, n)
    buf = np.ones(n, dtype=np.float32)
    times = []
    for _ in range(repeats):
        comm.barrier()                     # start together: time the exchange, not the skew
        t0 = time.perf_counter()
        comm.allreduce(buf)
        times.append(time.perf_counter() - t0)
    comm.close()
    return times


def ring_exchange_time(ring: str, rank: int, size: int, peers: list[str], n: int,
                       repeats: int) -> tuple[list[float], float]:
    """Runs on a worker: times of `repeats` ring allreduces (comm="dask") of n float32, and
    the bytes this rank sent per allreduce."""
    from .comm.ring import RingComm
    comm = RingComm(ring, rank, size, peers)
    buf = np.ones(n, dtype=np.float32)
    comm.allreduce(buf)                    # opens the connection: not part of the timing
    times, sent = [], 0
    for _ in range(repeats):
        comm.barrier()
        before = comm.sent_bytes
        t0 = time.perf_counter()
        comm.allreduce(buf)
        times.append(time.perf_counter() - t0)
        sent = comm.sent_bytes - before
    comm.close()
    return times, sent


def allreduce_lines(sizes: tuple[int, ...] = (10_000, 536_000), ranks: tuple[int, ...] = (2, 3)) -> list[str]:
    """The ring allreduce (comm="dask", the several-hosts path, here on one host) beside the
    shared-memory one, on a cluster of its own with max(ranks) workers: median ms per
    allreduce (the slowest rank's time) and bytes each worker sends per allreduce."""
    from .cluster import make_cluster, workers_of
    from .comm.ring import install
    from .comm.shm import allreduce_nbytes, create_segment, unlink_segment
    client = make_cluster(cpus=max(ranks), gpus=0, quiet=True)
    lines = []
    try:
        for p in ranks:
            peers = [w["address"] for w in workers_of(client)[:p]]
            client.run(install, workers=peers)
            for n in sizes:
                repeats = 200 if n <= 100_000 else 50
                name = f"wbb{uuid.uuid4().hex[:10]}"
                client.submit(create_segment, name, allreduce_nbytes(p, n), workers=[peers[0]], pure=False).result()
                futs = [client.submit(exchange_time, name, r, p, n, repeats, workers=[a], pure=False)
                        for r, a in enumerate(peers)]
                shm_ms = float(np.median(np.array(client.gather(futs)).max(axis=0)) * 1e3)
                client.submit(unlink_segment, name, workers=[peers[0]], pure=False).result()
                ring = uuid.uuid4().hex
                futs = [client.submit(ring_exchange_time, ring, r, p, peers, n, repeats, workers=[a], pure=False)
                        for r, a in enumerate(peers)]
                got = client.gather(futs)
                ring_ms = float(np.median(np.array([g[0] for g in got]).max(axis=0)) * 1e3)
                sent = max(g[1] for g in got)
                lines.append(f"allreduce of {n:,} float32, {p} workers: shared memory {shm_ms:.3f} ms, "
                             f"ring (comm=dask) {ring_ms:.3f} ms, {sent:,} B sent per worker "
                             f"({sent / (4 * n):.2f} of the buffer)")
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    return lines


def steady_throughput(steps: pd.DataFrame) -> float:
    """Samples per second over the part of the run after start-up."""
    if steps.empty:
        return 0.0
    t_end = steps["time"].max()
    t_start = steps["time"].min() + STEADY_FROM * (t_end - steps["time"].min())
    window = steps[steps["time"] > t_start]
    return float(window["samples"].sum() / max(t_end - t_start, 1e-9))


def torch_ddp(args: argparse.Namespace, seconds: float) -> float | None:
    """PyTorch DDP (gloo) on the same MLP and per-worker batch; None without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    import subprocess
    import tempfile
    hidden = [int(h) for h in str(args.hidden).split(",") if h]
    tmp = tempfile.mkdtemp(prefix="workbench-ddp-")
    out, script = os.path.join(tmp, "rate.txt"), os.path.join(tmp, "ddp.py")
    code = _DDP_SCRIPT.format(n_features=args.n_features, hidden=hidden, batch=args.batch_per_worker,
                              world=args.cpus, seconds=seconds, out=out, port=_free_port())
    with open(script, "w") as f:  # torch's spawn re-imports __main__: it must be a file
        f.write(code)
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // args.cpus))}
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=seconds * 10 + 120)
    if proc.returncode != 0 or not os.path.exists(out):
        print(f"note: PyTorch DDP peer failed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    with open(out) as f:
        return float(f.read())


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_DDP_SCRIPT = """
import os, time, torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

def work(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{port}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", rank=rank, world_size={world})
    torch.manual_seed(rank)
    widths = [{n_features}] + {hidden} + [10]
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers[:-1]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    X = torch.randn(20 * {batch}, {n_features}); y = torch.randint(0, 10, (20 * {batch},))
    t0 = time.perf_counter(); t_start = None; samples = 0; i = 0
    while True:
        lo = (i % 20) * {batch}
        opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(X[lo:lo + {batch}]), y[lo:lo + {batch}])
        loss.backward(); opt.step(); i += 1
        now = time.perf_counter()
        flag = torch.tensor([1.0 if now - t0 > {seconds} else 0.0]); dist.all_reduce(flag)
        if t_start is None and now - t0 > 0.2 * {seconds}:
            t_start, samples = now, 0
        elif t_start is not None:
            samples += {batch}
        if flag.item() > 0:
            break
    rate = torch.tensor([samples / (now - t_start)]); dist.all_reduce(rate)
    if rank == 0:
        open("{out}", "w").write(str(rate.item()))
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, nprocs={world})
"""


def main(args: argparse.Namespace) -> int:
    from .algorithms import REGISTRY
    from .cluster import make_cluster, workers_of
    from .comm.shm import allreduce_nbytes, create_segment, unlink_segment
    from .config import ConfigError
    from .engine import run
    from .models import make_model

    algorithms = list(REGISTRY) if args.algorithms == "all" else [a for a in str(args.algorithms).split(",") if a]
    for a in algorithms:
        if a not in REGISTRY:
            raise ConfigError("algorithms", f"comma-separated names from {sorted(REGISTRY)}", a)
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"benchmark: MLP {args.n_features}-{args.hidden.replace(',', '-')}-10, batch {args.batch_per_worker} per worker, "
          f"{args.cpus} CPU workers, {args.seconds:g} s per measurement; {blas}", flush=True)
    client = make_cluster(cpus=args.cpus, gpus=0, quiet=True)
    rows: list[dict] = []
    try:
        workers = workers_of(client)[: args.cpus]
        cfg0 = _bench_config(args, "sync_sgd", 10)
        n_params = make_model("mlp", args.n_features, 10, hidden=cfg0.model_hidden).n_params
        def measure_limit() -> float:
            """The same workers, the same work, no exchange: measured again before every
            entry, so that each ratio compares two measurements taken minutes apart at most
            (a shared machine's speed drifts)."""
            futs = [client.submit(compute_only, cfg0.to_dict(), args.seconds / 2, workers=[w["address"]], pure=False)
                    for w in workers]
            return sum(p["samples"] / p["seconds"] for p in client.gather(futs))

        limit = measure_limit()
        rows.append({"what": "no-exchange limit", "samples_per_s": limit, "comm_fraction": 0.0, "limit": limit})
        # One exchange of the whole parameter vector.
        name = f"wbb{uuid.uuid4().hex[:10]}"
        client.submit(create_segment, name, allreduce_nbytes(len(workers), n_params),
                      workers=[workers[0]["address"]], pure=False).result()
        futs = [client.submit(exchange_time, name, r, len(workers), n_params, 200, workers=[w["address"]], pure=False)
                for r, w in enumerate(workers)]
        times = np.array(client.gather(futs))
        client.submit(unlink_segment, name, workers=[workers[0]["address"]], pure=False).result()
        exchange_ms = float(np.median(times.max(axis=0)) * 1e3)
        # A warm cluster: how long from run() to the first step record.
        t0 = time.perf_counter()
        warm = run(_bench_config(args, "sync_sgd", 3), cluster=client)
        warm_run_s = time.perf_counter() - t0
        first_step_s = warm.summary["setup_s"] + float(warm.steps["time"].min())
        # Each algorithm, long enough for args.seconds at the limit's pace.
        steps = max(50, int(args.seconds * limit / (args.batch_per_worker * args.cpus)))
        for a in algorithms:
            here = measure_limit()
            result = run(_bench_config(args, a, steps), cluster=client)
            rows.append({"what": a, "samples_per_s": steady_throughput(result.steps),
                         "comm_fraction": result.summary["comm_fraction"], "status": result.status, "limit": here})
        ddp = None
        if not args.no_torch:
            here = measure_limit()
            ddp = torch_ddp(args, args.seconds)
            if ddp is not None:
                rows.append({"what": "PyTorch DDP (gloo)", "samples_per_s": ddp, "comm_fraction": float("nan"),
                             "limit": here})
    finally:
        cluster = client.cluster
        client.close()
        cluster.close()
    table = pd.DataFrame(rows)
    table["vs_limit"] = table["samples_per_s"] / table["limit"]
    if ddp is not None:
        # DDP's own ratio to its limit, against each entry's: robust to drift between them
        ddp_ratio = float(table.loc[table["what"] == "PyTorch DDP (gloo)", "vs_limit"].iloc[0])
        table["vs_ddp"] = table["vs_limit"] / ddp_ratio
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}" if abs(v) < 10 else f"{v:,.0f}"))
    print(f"one exchange of {n_params:,} float32 (shared-memory allreduce, {len(workers)} workers): "
          f"{exchange_ms:.3f} ms median")
    print(f"warm cluster: first step {first_step_s:.3f} s after run() was called "
          f"(whole 3-step run {warm_run_s:.2f} s)")
    for line in allreduce_lines():
        print(line, flush=True)
    if args.out:
        table.assign(exchange_ms=exchange_ms, first_step_s=first_step_s).to_csv(args.out, index=False)
    return 0
