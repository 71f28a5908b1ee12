"""`python -m workbench.apps.demo`: what the workbench is for, in about a minute.

The same synchronous data-parallel run (sync_sgd, one global batch split across the
workers) on 1 worker and on 2, interleaved for 3 rounds (1, 2, 1, 2, 1, 2) on one local
Dask cluster of single-core workers, then again for each worker count whose rate is not
yet known to +-5% (up to `--max-rounds`; `measure.Repeats`, the sweep's rule), and the
speed-up of the medians, with their range: a busy machine's speed drifts, and the demo
says when a rate is not resolved or the range is wider than the effect. The model is sized so that a step's compute (an MLP
256-512-256-10 on 128 examples per worker) outweighs one exchange of its 265k
parameters, which is what makes a second worker pay off on a 2-core machine; a
digits-sized model would spend as long exchanging as computing.

Writes round 1's 2-worker run to `out` (summary.json, steps.csv, evals.csv, report.html)
and its 1-worker run to `out/one-worker`; later rounds to `out/round-K` likewise; the
speed-up's table (every round's medians, ranges and resolution) to `out/speedup.csv`.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import RunConfig

DEMO = dict(algorithm="sync_sgd", dataset="synthetic", n_samples=20000, n_features=256, n_classes=10,
            hidden=[512, 256], model="mlp", batch_size=256, lr=0.05, momentum=0.9, epochs=1.5, seed=0)


def demo_config(**changes: object) -> RunConfig:
    """The demo's run; `changes` override its fields (e.g. cpus, epochs)."""
    return RunConfig(**{**DEMO, **changes})


def compare_workers(config: RunConfig, client: object, repeats: object, out: str | Path,
                    echo: bool = True) -> tuple[object, list[str]]:
    """The demo's measurement, for any config: `config` on each worker count `repeats`
    (a `measure.Repeats`) asks for, round after round, on `client`; round 1's runs to
    `out` (the 1-worker one to out/one-worker), later rounds' to out/round-K. Returns
    (`analysis.sweep.combine_rounds`'s table: medians, ranges, spreads, resolution notes;
    every run's status)."""
    from .. import api
    from ..analysis.sweep import combine_rounds, scaling_row
    from ..measure import comm_fraction_text, notes

    out = Path(out)
    rows, statuses = [], []
    while todo := repeats.next_round():
        k = repeats.round - 1
        base = out if k == 0 else out / f"round-{k + 1}"
        for workers in todo:
            directory = base / "one-worker" if workers == 1 else base
            cfg = config.replace(cpus=workers, out=str(directory))
            if echo:
                shape = "-".join(map(str, [cfg.n_features, *cfg.hidden, cfg.n_classes])) if cfg.n_features else \
                    f"{'-'.join(map(str, cfg.hidden))} hidden, on {cfg.dataset}"
                length = f"{cfg.epochs:g} epochs" if cfg.steps is None else f"{cfg.steps} steps"
                print(f"round {k + 1}: training {cfg.algorithm} on {workers} worker(s): {cfg.model.upper()} {shape}, "
                      f"global batch {cfg.batch_size}, {length} ...", flush=True)
            r = api.run(cfg, cluster=client, overwrite=True, progress=echo)
            s = r.summary
            statuses.append(s["status"])
            rows.append({**scaling_row(r, workers, "strong", str(directory)), "round": k})
            repeats.add(workers, rows[-1]["samples_per_s"] if s["status"] == "completed" else None)
            if echo:
                acc = s.get("final_test_accuracy")
                from ..util.blas import rule_text
                print(f"  {s['status']}: {s['samples_per_s']:,.0f} samples/s (steady, "
                      f"{rule_text(s.get('blas_threads'))}), {s['train_time_s']:.1f} s "
                      f"training (+{s['startup_s']:.1f} s start-up), {comm_fraction_text(s)}, "
                      f"test accuracy {'n/a' if acc is None else f'{acc:.3f}'}", flush=True)
                for note in notes(s):
                    print(f"  note: {note}", flush=True)
    return combine_rounds(rows, repeats), statuses


def main(argv: Sequence[str] | None = None) -> int:
    from .. import api
    from ..execution.cluster import close_client, make_cluster
    from ..measure import MAX_ROUNDS, ROUNDS, Repeats, spread_text

    parser = argparse.ArgumentParser(prog="python -m workbench.apps.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/demo", help="run directory of the 2-worker run")
    parser.add_argument("--epochs", type=float, default=DEMO["epochs"])
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="interleaved rounds (1, 2, 1, 2, ...): the speed-up is the medians', with their range")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help=f"repeat a worker count not yet known to +-5%% up to this many rounds (default "
                             f"max(--rounds, {MAX_ROUNDS}))")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds: a whole number >= 1, got {args.rounds}")
    max_rounds = max(args.rounds, MAX_ROUNDS) if args.max_rounds is None else args.max_rounds
    if max_rounds < args.rounds:
        parser.error(f"--max-rounds: a whole number >= --rounds ({args.rounds}), got {max_rounds}")
    repeats = Repeats([1, 2], min_rounds=args.rounds, max_rounds=max_rounds)
    out = Path(args.out)
    print("starting a local Dask cluster of 2 single-core workers ...", flush=True)
    client = make_cluster(cpus=2, gpus=0, quiet=True)
    try:
        # warm both workers up (imports, data placement) with a 2-step run, not measured: said, with
        # no bar of its own (an unlabelled "sync_sgd 2/2 steps" before round 1 read as a measured run)
        print("warming both workers up (a 2-step run, not measured) ...", flush=True)
        api.run(demo_config(cpus=2, steps=2), cluster=client, progress=False)
        table, statuses = compare_workers(demo_config(epochs=args.epochs), client, repeats, out)
    finally:
        close_client(client)
    one, two = table.iloc[0], table.iloc[1]
    speedup = float(two["speedup"])
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "speedup.csv", index=False)   # the medians, ranges and resolution of every round
    # the range between the rounds' extremes: the sweep table's (`combine_rounds`, `measure.median_speedup`), as
    # `sweep` and `explain` give it
    low, high = float(two["speedup_lo"]), float(two["speedup_hi"])
    ranged = (f"{low:.2f}x-{high:.2f}x between the rounds' extremes" if low == low and high == high
              else "one round each: no range measured")
    print(f"speed-up, 2 workers over 1: {speedup:.2f}x ({ranged}; "
          f"parallel efficiency {speedup / 2:.0%}); medians of "
          f"interleaved rounds: 1 worker {one['samples_per_s']:,.0f} samples/s over {one['rounds']} "
          f"({one['samples_per_s_lo']:,.0f}-{one['samples_per_s_hi']:,.0f}, {spread_text(one['spread'])}), 2 workers "
          f"{two['samples_per_s']:,.0f} over {two['rounds']} ({two['samples_per_s_lo']:,.0f}-"
          f"{two['samples_per_s_hi']:,.0f}, {spread_text(two['spread'])})")
    for note in dict.fromkeys(n for n in (one["resolution_note"], two["resolution_note"]) if n):
        print(f"note: {note}")
    # on fewer cores than workers (Binder's one CPU) the headline itself says so, not only each run's notes:
    # two workers taking turns on one core cannot pass 1x, whatever the algorithm
    from ..util import machine
    crowded = machine.crowding_note([{"kind": "cpu", "host": "localhost"}] * 2, 1, machine.usable_cores())
    if crowded:
        print(f"note: this speed-up is the machine's, not sync_sgd's: {crowded}")
    print(f"report: {out / 'report.html'} (round 1's 2-worker run; 1 worker: {out / 'one-worker' / 'report.html'}); "
          f"the speed-up above is of every round: {out / 'speedup.csv'}")
    return 0 if all(st == "completed" for st in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
