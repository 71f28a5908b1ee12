"""`python -m workbench.apps.demo`: what the workbench is for, in about a minute.

The same synchronous data-parallel run (sync_sgd, one global batch split across the
workers) on 1 worker and then on 2, on one local Dask cluster of single-core workers,
and the measured speed-up. The model is sized so that a step's compute (an MLP
256-512-256-10 on 128 examples per worker) outweighs one exchange of its 265k
parameters, which is what makes a second worker pay off on a 2-core machine; a
digits-sized model would spend as long exchanging as computing.

Writes the 2-worker run to `out` (summary.json, steps.csv, evals.csv, report.html) and
the 1-worker run to `out/one-worker`.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import RunConfig

DEMO = dict(algorithm="sync_sgd", dataset="synthetic", n_samples=20000, n_features=256, n_classes=10,
            hidden=[512, 256], model="mlp", batch_size=256, lr=0.05, momentum=0.9, epochs=4.0, seed=0)


def demo_config(**changes: object) -> RunConfig:
    """The demo's run; `changes` override its fields (e.g. cpus, epochs)."""
    return RunConfig(**{**DEMO, **changes})


def main(argv: Sequence[str] | None = None) -> int:
    from .. import api
    from ..execution.cluster import close_client, make_cluster

    parser = argparse.ArgumentParser(prog="python -m workbench.apps.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="run directory of the 2-worker run")
    parser.add_argument("--epochs", type=float, default=DEMO["epochs"])
    args = parser.parse_args(argv)
    out = Path(args.out)
    print("starting a local Dask cluster of 2 single-core workers ...", flush=True)
    client = make_cluster(cpus=2, gpus=0, quiet=True)
    try:
        api.run(demo_config(cpus=2, steps=2), cluster=client)          # warm both workers up
        results = {}
        for workers, directory in ((1, out / "one-worker"), (2, out)):
            cfg = demo_config(cpus=workers, epochs=args.epochs, out=str(directory))
            print(f"training {cfg.algorithm} on {workers} worker(s): MLP {cfg.n_features}-"
                  f"{'-'.join(map(str, cfg.hidden))}-{cfg.n_classes}, global batch {cfg.batch_size}, "
                  f"{cfg.epochs:g} epochs ...", flush=True)
            r = api.run(cfg, cluster=client)
            s = results[workers] = r.summary
            acc = s.get("final_test_accuracy")
            print(f"  {s['status']}: {s['samples_per_s']:,.0f} samples/s, {s['train_time_s']:.1f} s training "
                  f"(+{s['startup_s']:.1f} s start-up), comm fraction {s['comm_fraction']:.2f}, test accuracy "
                  f"{'n/a' if acc is None else f'{acc:.3f}'}", flush=True)
    finally:
        close_client(client)
    speedup = results[2]["samples_per_s"] / results[1]["samples_per_s"] if results[1]["samples_per_s"] else float("nan")
    print(f"speed-up, 2 workers over 1: {speedup:.2f}x (parallel efficiency {speedup / 2:.0%})")
    print(f"report: {out / 'report.html'}  (1 worker: {out / 'one-worker' / 'report.html'})")
    ok = all(s["status"] == "completed" for s in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
