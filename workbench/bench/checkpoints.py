"""What checkpoints cost (`python -m workbench bench --checkpoints`): the share of step
time they take at the default interval.

A checkpoint costs the workers a copy of their state and the client a write (the rows
before it synced, the file written and synced); on a machine of few cores the client's
work is taken from the workers too. So the cost is measured where it lands, on the
steps: runs of the same config on the same local Dask cluster, interleaved, without
checkpoints and with one every `every` steps (an interval short enough for the cost to
stand out of the noise), each writing its run directory (steps.csv streams in both).

    slowdown per checkpoint = (steady seconds per step with - without) x every
    cost per checkpoint     = the larger of that and the client's write time for one
                              (measured directly; on few cores it is taken from the workers)
    share at an interval    = cost per checkpoint / the interval's seconds of steps

The default interval is wall-clock (`config.checkpoint_every`, 60 s): one checkpoint a
minute, so its share is the cost per checkpoint over 60 s of steps. The step interval's
share is measured directly too (1 - steady throughput with / without), which on a shared
machine moves by more than the cost itself (the rounds' medians are reported; a negative
one is noise). The client's own write time and the file's size come from the runs'
summaries.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ..config import RunConfig, parse_interval
from .throughput import _bench_config, _sizes


def measure(args: argparse.Namespace, client: Any, algorithm: str = "sync_sgd") -> list[dict]:
    """One row per size: the steady step time with and without checkpoints (medians over
    `args.rounds` interleaved rounds), the cost per checkpoint and the shares."""
    from ..execution.engine import run
    from ..results.rundir import claim_run_dir
    every = int(args.every)
    default = parse_interval(RunConfig.model_fields["checkpoint_every"].default)
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="workbench-ckptbench-"))
    try:
        for size in _sizes(args):
            probe = _bench_config(args, algorithm, 50, size)
            warm = run(probe.replace(steps=20), cluster=client)             # workers warm, data placed
            rate = warm.summary["samples_per_s"] or 1.0
            steps = max(4 * every, int(args.seconds * rate / probe.batch_size))
            per_step: dict[str, list[float]] = {"off": [], "on": []}
            write_s, written, nbytes = [], [], []
            for k in range(args.rounds or 3):
                for mode in ("off", "on"):
                    cfg = probe.replace(steps=steps, checkpoint_every=every if mode == "on" else "none",
                                        checkpoint_keep=1, out=str(folder / f"{size.name}-{mode}-{k}"))
                    out = claim_run_dir(cfg.out)
                    result = run(cfg, cluster=client, out=out)
                    steady = result.summary["steady"]
                    result.store.close()
                    per_step[mode].append(cfg.batch_size / result.summary["samples_per_s"])
                    if mode == "on":
                        c = result.summary["checkpoints"]
                        write_s.append(c["write_s"] / max(c["written"], 1))
                        written.append(c["written"])
                        files = sorted((out / "checkpoints").glob("*.npz"))
                        nbytes.append(files[-1].stat().st_size if files else 0)
                    shutil.rmtree(out, ignore_errors=True)
                    print(f"  {size.name} round {k + 1} {mode}: {1e3 * per_step[mode][-1]:.3f} ms a step", flush=True)
            off, on = statistics.median(per_step["off"]), statistics.median(per_step["on"])
            measured = (on - off) * every                 # the steps' slowdown per checkpoint (noisy on a busy host)
            write = statistics.median(write_s)            # the client's own work for one, measured directly
            cost = max(measured, write)   # on few cores the client's work is taken from the workers: at least that
            rows.append({"size": size.label(), "workers": probe.n_workers, "every": every,
                         "step_ms_off": 1e3 * off, "step_ms_on": 1e3 * on,
                         "share_at_every": 1 - off / on if on > 0 else float("nan"),
                         "slowdown_per_checkpoint_ms": 1e3 * measured,
                         "client_write_ms": 1e3 * write,
                         "cost_per_checkpoint_ms": 1e3 * cost,
                         "checkpoint_mb": statistics.median(nbytes) / 2**20,
                         "default": f"{default:g}s",
                         "share_at_default": cost / default if default else float("nan"),
                         "rounds": len(per_step["on"]), "steady_reached": steady.get("reached")})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def main(args: argparse.Namespace) -> int:
    """`python -m workbench bench --checkpoints`: the table, with the machine's load and the BLAS settings."""
    import os

    import pandas as pd

    from ..execution.cluster import close_session, session_client
    from .command import check_args
    check_args(args)          # --cpus, --sizes, --seconds, --every, --rounds, --out: before any worker starts
    client = session_client(args.cpus, 0, None)
    load = "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    try:
        rows = measure(args, client)
    finally:
        close_session()
    table = pd.DataFrame(rows)
    blas = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if os.environ.get(k)}
    print(f"checkpoint cost, {args.cpus} local Dask workers, {load} at the start; BLAS settings: {blas or 'default'}")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False))
    if getattr(args, "out", None):
        table.to_csv(args.out, index=False)
    return 0
