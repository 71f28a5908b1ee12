"""`python -m workbench.apps.gpucheck`: the GPU paths on a machine with an NVIDIA GPU.

Checks, and prints one short table:
1. a plain CuPy training loop (the limit a CuPy worker is compared with);
2. sync_sgd on one dask-cuda worker with NCCL (a 1-rank communicator: NCCL refuses two
   ranks on one device, so real NCCL allreduce needs two GPUs) and on two GPU workers
   sharing device 0 through host shared memory: trajectories against the CPU reference;
3. async_sgd on two GPU workers sharing the device;
4. cgdp with GPU workers and a CPU worker holding the master weights.
With one GPU, several workers share it: that is reported as such, never as scaling.
Run by experiments/gpu_check.sh, which installs the missing wheels offline first.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd


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


def main() -> int:
    from ..analysis.bench import steady_throughput
    from ..config import RunConfig
    from ..execution.cluster import make_cluster, shared_gpu_cluster
    from ..execution.engine import run

    base = RunConfig(dataset="synthetic", n_samples=60000, n_features=784, hidden=[512, 256], model="mlp",
                     batch_size=512, lr=0.05, momentum=0.0, steps=400, eval_every=10**9, seed=0, cpus=0, gpus=1)
    rows = []
    limit = plain_cupy_loop(base)
    rows.append({"check": "plain CuPy loop (limit)", "workers": "1 gpu", "samples_per_s": limit, "max_abs_diff": None, "status": "ok"})
    short = base.replace(steps=30)
    ref = run(short.replace(algorithm="sgd"))   # one CPU worker in this process: the reference

    one = make_cluster(gpus=1, cpus=0, quiet=True)
    try:
        r = run(base.replace(algorithm="sync_sgd", comm="nccl"), cluster=one)
        rows.append({"check": "sync_sgd, NCCL (1 rank)", "workers": "1 gpu", "samples_per_s": steady_throughput(r.steps),
                     "max_abs_diff": None, "status": r.status})
        r = run(short.replace(algorithm="sync_sgd", comm="nccl"), cluster=one)
        rows.append({"check": "  trajectory vs CPU reference", "workers": "1 gpu", "samples_per_s": None,
                     "max_abs_diff": float(np.abs(r.params - ref.params).max()), "status": r.status})
    finally:
        _close(one)

    two = shared_gpu_cluster(2, cpus=1)
    try:
        for algorithm in ("sync_sgd", "async_sgd", "cgdp"):
            gpus, cpus = (2, 0) if algorithm != "cgdp" else (2, 1)
            cfg = base.replace(algorithm=algorithm, gpus=gpus, cpus=cpus, comm="shm" if algorithm == "sync_sgd" else "auto")
            r = run(cfg, cluster=two)
            diff = None
            if algorithm != "async_sgd":
                diff = float(np.abs(run(cfg.replace(steps=30), cluster=two).params - ref.params).max())
            rows.append({"check": f"{algorithm} (device shared)", "workers": f"{gpus} gpu + {cpus} cpu",
                         "samples_per_s": steady_throughput(r.steps), "max_abs_diff": diff, "status": r.status})
    finally:
        _close(two)
    table = pd.DataFrame(rows)
    table["vs_plain_cupy"] = table["samples_per_s"] / limit
    print(table.to_string(index=False))
    ok = all(s in ("ok", "completed") for s in table["status"]) and \
        all(d is None or d != d or d < 1e-3 for d in table["max_abs_diff"])
    print("GPU check:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def _close(client) -> None:
    cluster = client.cluster
    client.close()
    cluster.close()


if __name__ == "__main__":
    sys.exit(main())
