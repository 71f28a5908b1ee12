"""The engine's own cost per step, in one process: `python benchmarks/engine_step.py [--size teaching|535k]`.

sync_sgd's step through the one worker loop (`run_loop`: the step, its packed tail, its
record, the live batches, the stop word rank 0 reads) against the bench's bare synchronous
loop (`bench.throughput.bare_sync`: slice, gradient, allreduce, update), both on one worker
over the same shared-memory allreduce, from the same initial parameters. Without a peer
there is no wait and no skew: what is left is the CPU each step costs, the engine's
bookkeeping being the difference.

Each measurement runs a loop for N0 and for N0 + STEPS steps and divides the difference of
the process's CPU time by STEPS, so set-up and the run's one evaluation cancel out. The
two loops are measured interleaved, `--repeats` times; the table prints per-step CPU
microseconds (min, median, max) and the ratios bare / engine and bare / inline per repeat
(each loop's speed as a fraction of the bare loop's).

A third loop, `inline`, is sync_sgd's step with the loop's whole contract written out in one
function (`inline_loop`): the floor a per-algorithm loop could reach, against which the
engine's layers are measured.

`--opcodes [--algorithm NAME]` counts the Python opcodes and calls a step, per function, of
the bare loop and of the engine running NAME (`opcodes`: deterministic on a loaded machine).

`--only engine|bare|inline --steps N` runs one loop of N steps and nothing else: run it under
`valgrind --tool=callgrind` at two step counts, and the difference of the instruction
counts over the difference of the steps is the per-step count, repeatable on a loaded
machine (live batches, which leave by wall clock, are left out there: see `main`).
`--instructions` does exactly that for the three loops (valgrind must be installed; six
runs under callgrind, two at a time: several minutes) and prints each loop's instructions
a step beside the bare loop's. Set beside the CPU-time table, it tells work done from time
spent: at the teaching size the engine's step now runs 1-1.5% more instructions than the
bare loop's but costs 6-8% more time (docs/benchmarks.md). BLAS is held to one thread, as
a worker holds it.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import uuid
from types import SimpleNamespace
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")   # before NumPy loads (in the loops and `main`): one BLAS thread, as a worker's


def _config(size: str, steps: int, algorithm: str = "sync_sgd"):
    from workbench.bench.throughput import SIZES, Size, _bench_config
    args = SimpleNamespace(cpus=1, tau=1)
    return _bench_config(args, algorithm, steps, Size(size, *SIZES[size]))


def _segment(nbytes: int) -> str:
    from workbench.comm.shm import create_segment
    return create_segment(f"wbe{uuid.uuid4().hex[:10]}", nbytes)


def engine_loop(size: str, steps: int, algorithm: str = "sync_sgd") -> tuple[float, Any]:
    """CPU seconds of `run_loop` over `steps` steps of `algorithm` (sync_sgd; `--opcodes`
    also runs the local-SGD family and sync_easgd: one collective a step), its context and
    algorithm built first, and the final parameters."""
    from workbench.algorithms import REGISTRY, run_loop
    from workbench.comm.barrier import ShmStopWord
    from workbench.comm.base import ThreadControl, ThrottledControl
    from workbench.comm.shm import ShmComm, allreduce_nbytes, unlink_segment
    from workbench.config.registry import tail_length
    from workbench.execution.context import build_context
    from workbench.problem import Problem

    cfg = _config(size, steps, algorithm)
    n = Problem.from_config(cfg).new_model().n_params
    m = n + tail_length(1) + 1   # (gossip's checks carry one more scalar)
    seg, word_seg = _segment(allreduce_nbytes(1, m)), _segment(64)
    comm = ShmComm(seg, 0, 1, m)
    control = ThrottledControl(ThreadControl(), word=ShmStopWord(word_seg, 1))   # a Dask worker's, on one host
    batches: list[dict] = []
    ctx = build_context(cfg, 0, 1, "cpu", comm=comm, control=control, emit=batches.append)
    algo = REGISTRY[algorithm].cls(ctx)
    try:
        t0 = time.process_time()
        out = run_loop(ctx, algo)
        cpu = time.process_time() - t0
    finally:
        control.close()
        comm.close()
        unlink_segment(seg)
        unlink_segment(word_seg)
    assert out["status"] == "completed" and out["last_step"] == steps - 1, out["status"]
    return cpu, out["params"]


def bare_loop(size: str, steps: int) -> tuple[float, Any]:
    """CPU seconds of the bench's bare loop (`bare_sync`) over `steps` steps, and the final parameters."""
    from workbench.bench.throughput import bare_sync
    from workbench.comm.shm import allreduce_nbytes, unlink_segment
    from workbench.problem import Problem

    cfg = _config(size, steps)
    n = Problem.from_config(cfg).new_model().n_params
    seg = _segment(allreduce_nbytes(1, n + 1))
    try:
        t0 = time.process_time()
        out = bare_sync(cfg.to_dict(), 1e9, seg, 0, max_steps=steps)
        cpu = time.process_time() - t0
    finally:
        unlink_segment(seg)
    assert out["steps"] == steps
    return cpu, out["params"]


def inline_loop(size: str, steps: int) -> tuple[float, Any]:
    """CPU seconds of sync_sgd's step with the loop's whole contract written inline, in
    one function: the clocks around the gradient and the exchange, the packed tail (loss,
    stop flag, every worker's compute and busy time) and its reading (comm and wait), the
    divergence check, the step's record (`StepLog.add`), the evaluation and live-batch
    checks. What a per-algorithm loop, each synchronous algorithm with its own copy of the
    contract, would cost at best: it measures how much of the engine's overhead is the
    contract's work and how much its layers (`run_loop`, `close_step`, `SyncTail`,
    `StepOut`). A reference to measure against, not a second home of sync_sgd: its final
    parameters equal the engine's bit for bit (tests/test_bench.py)."""
    from workbench.bench.throughput import _worker_setup
    from workbench.comm.shm import ShmComm, allreduce_nbytes, unlink_segment
    from workbench.config.registry import tail_length
    from workbench.data import _epoch_order, split_batch, steps_per_epoch
    from workbench.problem import Problem
    from workbench.results.records import StepLog

    cfg = _config(size, steps)
    problem = Problem.from_config(cfg)
    n = problem.new_model().n_params
    m = n + tail_length(1)
    seg = _segment(allreduce_nbytes(1, m))
    try:
        t_cpu = time.process_time()
        _, data, model, params, opt = _worker_setup(cfg.to_dict())
        plan = problem.plan
        schedule, B, P, rank = plan.schedule, cfg.batch_size, 1, 0
        comm = ShmComm(seg, rank, P, m)
        buf = comm.buffer(m)
        grad, tail = buf[:n], buf[n:m]
        lo, hi = split_batch(B, [1.0] * P)[rank]
        w = (hi - lo) / B
        spe = steps_per_epoch(data.n_train, B)
        X, Y, log, timer = data.X_train, data.y_train, StepLog(), time.perf_counter
        t_start = t_free = timer()
        next_flush = t_start + base_flush_s()
        held = sum_vec = sum_tail = None
        comm.barrier()
        for step in range(steps):
            lr = schedule(step)
            t0 = timer()
            epoch, k = divmod(step, spe)
            idx = _epoch_order(data.n_train, cfg.seed, epoch)[k * B + lo:k * B + hi]
            loss, _ = model.loss_and_grad(params, X.take(idx, axis=0), Y[idx], grad_out=grad)
            if w != 1.0:
                grad *= w
            t1 = timer()
            compute_s, busy = t1 - t0, t1 - t_free
            tail[0], tail[1], tail[2 + rank], tail[2 + P + rank] = loss * w, step + 1 >= steps, compute_s, busy
            total = comm.allreduce(buf)
            t2 = timer()
            if total is not held:            # the shared-memory comm hands back the same sum array: cut once
                held, sum_vec, sum_tail = total, total[:n], total[n:m]
            got = sum_tail.tolist()
            wait = min(t2 - t1, max(0.0, max(got[2 + P:]) - busy))
            if not math.isfinite(got[0]):
                break
            opt.step(params, sum_vec, lr)
            t_free = timer()
            log.add(step, t_free - t_start, got[0], lr, hi - lo, compute_s + t_free - t2, t2 - t1 - wait, wait, 0.0, 0.0)
            if plan.is_eval_step(step):
                pass                         # (evaluations are off in this config, as in the other two loops)
            if t_free >= next_flush:
                log.take(plan.epoch)
                next_flush = t_free + base_flush_s()
            if got[1] > 0:
                break
        comm.close()
        cpu = time.process_time() - t_cpu
    finally:
        unlink_segment(seg)
    assert step == steps - 1, step
    return cpu, params


def callgrind_total(text: str) -> int:
    """The instruction count of a callgrind output file's text (its `summary:` line).

    >>> callgrind_total("version: 1\\nevents: Ir\\nsummary: 4085027038\\n")
    4085027038
    """
    for line in text.splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split(":", 1)[1].split()[0])
    raise ValueError("no summary: line (not a callgrind output file?)")


def instructions(size: str, short: int = 500, long: int = 2500, jobs: int = 2) -> dict[str, float]:
    """Instructions a step of each loop, counted by callgrind: each loop run alone (`--only`)
    for `short` and for `long` steps, the difference over `long - short` (set-up cancels
    out). Deterministic to about 0.1% (hash seeds), whatever the machine's load."""
    import concurrent.futures
    import shutil
    import subprocess
    import tempfile

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions runs the loops under valgrind, which is not installed "
                         "(Debian: apt install valgrind)")
    with tempfile.TemporaryDirectory(prefix="wb-callgrind-") as folder:
        def count(loop: str, steps: int) -> int:
            out = os.path.join(folder, f"{loop}.{steps}.out")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                            os.path.abspath(__file__), "--only", loop, "--size", size, "--steps", str(steps)],
                           check=True, capture_output=True)
            with open(out) as f:
                return callgrind_total(f.read())
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            runs = {(loop, n): pool.submit(count, loop, n) for loop in LOOPS for n in (short, long)}
            return {loop: (runs[loop, long].result() - runs[loop, short].result()) / (long - short)
                    for loop in LOOPS}


def base_flush_s() -> float:
    """How often live batches leave, as the engine's loop reads it (callgrind mode sets it huge)."""
    import workbench.algorithms.base as base
    return base.FLUSH_S


LOOPS = {"engine": engine_loop, "bare": bare_loop, "inline": inline_loop}
COUNTED = ("sync_sgd", "local_sgd", "post_local_sgd", "diloco", "sync_easgd")   # `--opcodes`
MODEL_FILES = ("models.py", "fromnumeric.py", "_methods.py", "multiarray.py")   # the model's own Python


def opcodes(loop: str, size: str = "teaching", algorithm: str = "sync_sgd", short: int = 50,
            long: int = 150) -> dict[str, tuple[float, float]]:
    """Python opcodes and calls a step, per function ("file:function"), of one loop (the
    engine's running `algorithm`): counted with `sys.settrace` over a `short`- and a
    `long`-step run, the difference over `long - short` steps, so set-up cancels out.
    Deterministic, whatever the machine's load: what the layers cost in interpreter work."""
    import collections

    import workbench.algorithms.base as base
    run = (lambda s: engine_loop(size, s, algorithm)) if loop == "engine" else (lambda s: LOOPS[loop](size, s))
    flush, base.FLUSH_S = base.FLUSH_S, 1e9   # no live batch inside the count (they leave by wall clock)
    try:
        run(short)                             # warm: caches, each length's problem and plan, code paths
        run(long)
        counts = []
        for steps in (short, long):
            ops, calls = collections.Counter(), collections.Counter()

            def tracer(frame: Any, event: str, arg: Any, ops: Any = ops, calls: Any = calls) -> Any:
                key = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_code.co_name}"
                if event == "call":
                    calls[key] += 1
                    frame.f_trace_opcodes = True
                elif event == "opcode":
                    ops[key] += 1
                return tracer
            sys.settrace(tracer)
            try:
                run(steps)
            finally:
                sys.settrace(None)
            counts.append((ops, calls))
    finally:
        base.FLUSH_S = flush
    (o1, c1), (o2, c2) = counts
    per = {k: ((o2[k] - o1[k]) / (long - short), (c2[k] - c1[k]) / (long - short)) for k in set(o2) | set(c2)}
    return {k: v for k, v in per.items() if v[0] > 0.5 or v[1] > 0.05}


def print_opcodes(per: dict[str, tuple[float, float]], label: str) -> None:
    own = {k: v for k, v in per.items() if not k.startswith(MODEL_FILES)}
    for k, (o, c) in sorted(own.items(), key=lambda kv: -kv[1][0]):
        print(f"{o:8.1f} {c:6.2f}  {k}")
    total = [sum(v[i] for v in per.values()) for i in (0, 1)]
    outside = [sum(v[i] for v in own.values()) for i in (0, 1)]
    print(f"{label}: {total[0]:.0f} opcodes in {total[1]:.0f} calls a step; outside the model "
          f"{outside[0]:.0f} in {outside[1]:.0f}")


def per_step_us(loop: str, size: str, n0: int, steps: int) -> float:
    """CPU microseconds a step: (N0 + steps) steps less N0 steps, over `steps`."""
    short, _ = LOOPS[loop](size, n0)
    long, _ = LOOPS[loop](size, n0 + steps)
    return (long - short) / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="teaching", choices=["teaching", "535k"])
    p.add_argument("--steps", type=int, default=None, help="steps measured (default 4000 teaching, 400 at 535k)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", choices=sorted(LOOPS), help="run one loop of --steps steps (for callgrind)")
    p.add_argument("--opcodes", action="store_true", help="instead: Python opcodes and calls a step, per "
                   "function, of the bare loop and of the engine running --algorithm")
    p.add_argument("--algorithm", default="sync_sgd", choices=COUNTED, help="--opcodes: the engine's algorithm")
    p.add_argument("--instructions", action="store_true", help="instead: each loop's instructions a step, "
                   "counted by valgrind's callgrind (several minutes)")
    a = p.parse_args(argv)
    import numpy as np
    if a.instructions:
        short, long = 500, 2500
        per = instructions(a.size, short, long)
        print(f"size {a.size}, instructions a step (callgrind: {long} steps less {short}), numpy "
              f"{np.__version__}, python {sys.version.split()[0]}")
        for loop, n in sorted(per.items(), key=lambda kv: kv[0] != "bare"):   # the bare loop first
            extra = "" if loop == "bare" else f"  (+{n - per['bare']:,.0f}; bare / {loop} {per['bare'] / n:.3f})"
            print(f"{loop:>7}: {n:11,.0f}{extra}")
        return
    if a.opcodes:
        print_opcodes(opcodes("bare", a.size), "bare loop")
        print_opcodes(opcodes("engine", a.size, a.algorithm), f"engine, {a.algorithm}")
        return
    steps = a.steps or (4000 if a.size == "teaching" else 400)
    if a.only:
        # Live batches leave every FLUSH_S of wall clock: under callgrind (~50x slower, more on a
        # loaded machine) they would come every few dozen steps, not every few thousand, and the
        # count would follow the load. Counted without them; the timed mode keeps them.
        import workbench.algorithms.base as base
        base.FLUSH_S = 1e9
        LOOPS[a.only](a.size, steps)
        return
    n0 = max(3, steps // 8)
    for loop in LOOPS:          # warm: the problem built, code paths and caches touched
        LOOPS[loop](a.size, n0)
    got: dict[str, list[float]] = {k: [] for k in LOOPS}
    for r in range(a.repeats):
        order = list(LOOPS) if r % 2 == 0 else list(reversed(LOOPS))
        for loop in order:
            got[loop].append(per_step_us(loop, a.size, n0, steps))
    load = os.getloadavg()[0]
    blas = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"size {a.size}, {steps} steps measured ({n0} subtracted), {a.repeats} interleaved repeats, "
          f"load {load:.2f}, {blas}, numpy {np.__version__}, python {sys.version.split()[0]}")
    for loop, v in got.items():
        print(f"{loop:>7}: CPU us/step min {min(v):7.1f}  median {statistics.median(v):7.1f}  max {max(v):7.1f}")
    for loop in ("engine", "inline"):
        ratios = [b / e for b, e in zip(got["bare"], got[loop])]
        print(f"bare / {loop} per repeat: {' '.join(f'{x:.3f}' for x in ratios)}  "
              f"(median {statistics.median(ratios):.3f}; {loop} - bare median "
              f"{statistics.median(got[loop]) - statistics.median(got['bare']):.1f} us)")


if __name__ == "__main__":
    main()
