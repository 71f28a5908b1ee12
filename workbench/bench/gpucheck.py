"""`python -m workbench.bench.gpucheck`: the GPU paths on a machine with an NVIDIA GPU.

Checks, and prints one short table:
1. a plain CuPy training loop (the limit a CuPy worker is compared with);
2. sync_sgd on one dask-cuda worker with NCCL (a 1-rank communicator: NCCL refuses two
   ranks on one device, so real NCCL allreduce needs two GPUs) and on two GPU workers
   sharing device 0 through host shared memory: trajectories against the CPU reference;
3. async_sgd on two GPU workers sharing the device;
4. cgdp with GPU workers and a CPU worker holding the master weights;
5. a second table: every algorithm (and three optimiser/compression variants of
   sync_sgd) on two GPU workers sharing the device, beside the same config on CPU workers.
   An algorithm whose maths does not depend on timing (the synchronous ones) must end
   within `TRAJECTORY_TOL` of the CPU run; the others (async, hogwild, easgd, gossip's
   random pairs) only have to complete, and their gap is shown.
With one GPU, several workers share it: that is reported as such, never as scaling.
Run by experiments/gpu_check.sh, which installs the missing wheels offline first.

First run on a GPU (an H200, CuPy 14.2, dask-cuda 26.10, 2026-12-04): two bugs no
CPU test could see (dask-cuda workers described themselves as CPU workers; CuPy 14's NCCL
wants its id as bytes), both fixed and pinned by CPU-side tests of their logic.
"""
from __future__ import annotations

import sys
import time
import traceback

import numpy as np
import pandas as pd

# float32 on a GPU and on a CPU sum in different orders: 30-40 steps of the teaching MLP
# drift by ~1e-7 (plain SGD) to ~2e-5 (LAMB, PowerSGD's orthogonalisation) on an H200
TRAJECTORY_TOL = 1e-3
# sync_sgd variants that take other GPU code paths (the optimiser's kernels, the compressors)
VARIANTS = ({"optimizer": "lamb"}, {"compression": "topk", "compression_ratio": 0.1},
            {"compression": "powersgd", "compression_rank": 2})


def plain_cupy_loop(cfg, seconds: float = 3.0) -> float:
    """Samples/s of the same model and batch in a bare CuPy loop (no Dask, no records)."""
    from ..data import global_batch
    from ..maths.backend import get_xp
    from ..maths.optim import make_optimizer
    from ..problem import Problem

    cp = get_xp("gpu")
    problem = Problem.from_config(cfg)
    data, model = problem.data, problem.new_model()
    X, y = cp.asarray(data.X_train), cp.asarray(data.y_train)
    params = problem.initial_params(cp)
    grad = cp.empty_like(params)
    opt = make_optimizer(cfg, model.layout(), cp, params.dtype, momentum=0.0, nesterov=False)
    step, samples, t0 = 0, 0, None
    start = time.perf_counter()
    while True:
        idx = cp.asarray(global_batch(data.n_train, cfg.batch_size, cfg.seed, step))
        model.loss_and_grad(params, X[idx], y[idx], grad_out=grad)
        opt.step(params, grad, cfg.lr)
        step += 1
        if step == 20:
            cp.cuda.get_current_stream().synchronize()
            t0, samples = time.perf_counter(), 0
        elif t0 is not None:
            samples += cfg.batch_size
            if step % 20 == 0:
                cp.cuda.get_current_stream().synchronize()
                if time.perf_counter() - start > seconds:
                    return samples / (time.perf_counter() - t0)


def timing_independent(algorithm: str) -> bool:
    """Whether an algorithm's result is the same whatever the workers' speeds: every worker
    meets every step (the registry's `sync`). easgd's turns come in a fixed order, but
    where each worker stops does not: on 3 CPU workers here its parameters after 12 steps
    differed by up to 2.4e-3 between two runs of the same config, so it is not counted."""
    from ..config.registry import specs
    return specs()[algorithm].sync


def every_algorithm(gpu_client, cpu_client, gpu: bool = True, steps: int = 40) -> pd.DataFrame:
    """Each algorithm (but sgd, which runs in the client) and each of `VARIANTS` on two
    workers of `gpu_client` (GPU workers when `gpu`; cgdp adds a CPU worker) beside the
    same config on `cpu_client`'s CPU workers: status, last loss, largest parameter gap,
    and whether that gap is within `TRAJECTORY_TOL` where the maths says it must be."""
    from ..config import RunConfig
    from ..config.registry import specs
    from ..execution.engine import run

    base = RunConfig(dataset="digits", model="mlp", batch_size=64, lr=0.05, steps=steps, eval_every=20, seed=0)
    cases = [(name, {}) for name, spec in specs().items() if not spec.in_process]
    cases += [("sync_sgd", v) for v in VARIANTS]
    rows = []
    for name, extra in cases:
        cfg = base.replace(algorithm=name, **extra)
        workers = (2, 1) if name == "cgdp" else (2, 0)
        row = {"algorithm": " ".join([name] + [f"{k}={v}" for k, v in extra.items()]),
               "timing_independent": timing_independent(name)}
        try:
            ref = run(cfg.replace(gpus=0, cpus=sum(workers)), cluster=cpu_client)
            kinds = {"gpus": workers[0], "cpus": workers[1]} if gpu else {"gpus": 0, "cpus": sum(workers)}
            # two GPU workers on one device cannot form an NCCL communicator: host shared memory
            got = run(cfg.replace(**kinds, comm="shm" if name != "async_sgd" else "auto"), cluster=gpu_client)
            gap = float(np.abs(np.asarray(got.params) - np.asarray(ref.params)).max()) \
                if got.params is not None and ref.params is not None else float("nan")
            row.update(status=got.status, loss=float(got.steps["loss"].iloc[-1]),
                       cpu_loss=float(ref.steps["loss"].iloc[-1]), max_abs_diff=gap)
        except Exception as exc:
            row.update(status=f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
            traceback.print_exc()
        rows.append(row)
    table = pd.DataFrame(rows)
    done = table["status"].isin(["ok", "completed"])
    close = table.get("max_abs_diff", pd.Series(np.nan, index=table.index)) < TRAJECTORY_TOL
    table["passed"] = done & (close | ~table["timing_independent"])
    return table


def main() -> int:
    from ..config import RunConfig
    from ..execution.cluster import close_client, make_cluster, shared_gpu_cluster
    from ..execution.engine import run
    from .throughput import steady_throughput

    base = RunConfig(dataset="synthetic", n_samples=60000, n_features=784, hidden=[512, 256], model="mlp",
                     batch_size=512, lr=0.05, momentum=0.0, steps=400, eval_every=10**9, seed=0, cpus=0, gpus=1)
    rows: list[dict] = []

    def row(check, workers, samples_per_s=None, max_abs_diff=None, status="ok"):
        rows.append({"check": check, "workers": workers, "samples_per_s": samples_per_s,
                     "max_abs_diff": max_abs_diff, "status": status})

    def failed(check, workers, exc):     # one check's failure is a row, and the next check runs
        row(check, workers, status=f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
        traceback.print_exc()

    limit = plain_cupy_loop(base)
    row("plain CuPy loop (limit)", "1 gpu", samples_per_s=limit)
    short = base.replace(steps=30)
    ref = run(short.replace(algorithm="sgd"))   # one CPU worker in this process: the reference

    one = None
    try:
        one = make_cluster(gpus=1, cpus=0, quiet=True)
        r = run(base.replace(algorithm="sync_sgd", comm="nccl"), cluster=one)
        row("sync_sgd, NCCL (1 rank)", "1 gpu", samples_per_s=steady_throughput(r.steps), status=r.status)
        r = run(short.replace(algorithm="sync_sgd", comm="nccl"), cluster=one)
        row("  trajectory vs CPU reference", "1 gpu", max_abs_diff=float(np.abs(r.params - ref.params).max()),
            status=r.status)
    except Exception as exc:
        failed("sync_sgd, NCCL (1 rank)", "1 gpu", exc)
    finally:
        close_client(one)

    two = None
    try:
        two = shared_gpu_cluster(2, cpus=1)
        for algorithm in ("sync_sgd", "async_sgd", "cgdp"):
            gpus, cpus = (2, 0) if algorithm != "cgdp" else (2, 1)
            workers = f"{gpus} gpu + {cpus} cpu"
            try:
                cfg = base.replace(algorithm=algorithm, gpus=gpus, cpus=cpus,
                                   comm="shm" if algorithm == "sync_sgd" else "auto")
                r = run(cfg, cluster=two)
                diff = None
                if algorithm != "async_sgd":
                    diff = float(np.abs(run(cfg.replace(steps=30), cluster=two).params - ref.params).max())
                row(f"{algorithm} (device shared)", workers, samples_per_s=steady_throughput(r.steps),
                    max_abs_diff=diff, status=r.status)
            except Exception as exc:
                failed(f"{algorithm} (device shared)", workers, exc)
    except Exception as exc:
        failed("shared-device cluster", "2 gpu + 1 cpu", exc)
    finally:
        close_client(two)
    table = pd.DataFrame(rows)
    table["vs_plain_cupy"] = table["samples_per_s"] / limit
    with pd.option_context("display.max_colwidth", 140, "display.width", 250):
        print(table.to_string(index=False))
    ok = all(s in ("ok", "completed") for s in table["status"]) and \
        all(d is None or d != d or d < TRAJECTORY_TOL for d in table["max_abs_diff"])

    cpu = two = None
    try:
        cpu, two = make_cluster(gpus=0, cpus=3, quiet=True), shared_gpu_cluster(2, cpus=1)
        algos = every_algorithm(two, cpu)
        with pd.option_context("display.max_colwidth", 140, "display.width", 250):
            print(algos.to_string(index=False))
        ok = ok and bool(algos["passed"].all())
    except Exception:
        traceback.print_exc()
        ok = False
    finally:   # newest first: each cluster puts back the log level it found when it started
        close_client(two)
        close_client(cpu)
    print("GPU check:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
