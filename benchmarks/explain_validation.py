"""`workbench explain` against what happens: `python benchmarks/explain_validation.py [--real]`.

Simulated (deterministic, seconds): the three seeded cases of tests/test_explain.py, each
built with one cause; for each, the limit `explain` names from a 1-vs-N pair at one batch,
and the crossover batch (N workers 1.5x one) it predicts against the one found by simulating
the config at other batches (`sim.crossover.simulated_crossover`).

Real (`--real`, minutes): a model too small for 2 workers on this machine (a softmax on
the 64-feature synthetic set, batch 128, a local Dask cluster of 2 single-thread workers):
the limit `explain` names, its predicted crossover batch, then the real speed-up measured
at half, at and at twice that batch (interleaved rounds, the median and range of each), and
the batch where the measured speed-ups cross 1.5x (log-linear between the two points that
bracket it). Prints the load average before and after and the BLAS settings: another
process on the machine moves every real number.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time


def simulated() -> list[dict]:
    import workbench as wb
    from workbench.analysis.explain import explain
    from workbench.sim.crossover import simulated_crossover
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from test_explain import CASES, _config  # the cases the test validates, not a copy of them
    rows = []
    for name, case in CASES.items():
        field = "gpus" if case["config"].get("cpus") == 0 else "cpus"
        one = wb.run(_config(case, **{field: 1}), progress=False)
        many = wb.run(_config(case, **{field: case["workers"]}), progress=False)
        e, = explain([one, many])
        mid, lo, hi = e.predictions["crossover_batch"]
        found = simulated_crossover(_config(case, steps=60, **{field: case["workers"]}), case["workers"],
                                    guess=int(mid))
        rows.append({"case": name, "workers": case["workers"], "limit": e.first_line.split(":")[1].strip(),
                     "predicted": mid, "band": (lo, hi), "simulated": found["batch"],
                     "error": mid / found["batch"] - 1})
        print(f"{name:34s} N={case['workers']}  limited by: {rows[-1]['limit']:<32s} predicted {mid:>8,.0f} "
              f"({lo:,.0f}-{hi:,.0f})  simulated {found['batch']:>8,.0f}  {rows[-1]['error']:+.0%}", flush=True)
    return rows


BASE_BATCH = 128   # the pair explained: large enough that compute is above the timer noise
REAL = dict(algorithm="sync_sgd", dataset="synthetic", n_samples=50000, n_features=64, model="softmax", seed=0)


def _speedup(client, batch: int, rounds: int, steps: int) -> tuple[float, float, float]:
    import workbench as wb
    ones, twos = [], []
    for _ in range(rounds):    # interleaved: 1, 2, 1, 2, ...
        ones.append(wb.run(wb.RunConfig(**REAL, cpus=1, batch_size=batch, steps=steps), cluster=client,
                           progress=False).summary["samples_per_s"])
        twos.append(wb.run(wb.RunConfig(**REAL, cpus=2, batch_size=batch, steps=steps), cluster=client,
                           progress=False).summary["samples_per_s"])
    ratios = [b / a for a, b in zip(ones, twos)]
    return statistics.median(ratios), min(ratios), max(ratios)


def real(rounds: int = 3, steps: int = 300) -> dict:
    import workbench as wb
    from workbench.analysis.explain import explain
    from workbench.execution.cluster import close_session, session_client
    load0 = os.getloadavg()
    client = session_client(2, 0)
    try:
        wb.run(wb.RunConfig(**REAL, cpus=2, batch_size=BASE_BATCH, steps=5), cluster=client, progress=False)   # warm
        one = wb.run(wb.RunConfig(**REAL, cpus=1, batch_size=BASE_BATCH, steps=steps), cluster=client, progress=False)
        two = wb.run(wb.RunConfig(**REAL, cpus=2, batch_size=BASE_BATCH, steps=steps), cluster=client, progress=False)
        e, = explain([one, two])
        print(e.text(), flush=True)
        if "crossover_batch" not in e.predictions:   # a busy machine: explain predicts nothing (docs/explain.md)
            print("the machine was busy: no crossover predicted, nothing to measure")
            return {"explanation": e.text()}
        mid, lo, hi = e.predictions["crossover_batch"]
        if not math.isfinite(mid) or mid <= 0:
            print("no finite crossover predicted: nothing to measure")
            return {"explanation": e.text()}
        points = []
        for b in (max(2, int(mid / 2)), int(mid), min(int(mid * 2), 40000)):
            s, s_lo, s_hi = _speedup(client, b, rounds, steps)
            points.append((b, s, s_lo, s_hi))
            print(f"  measured at batch {b:>6}: 2 workers {s:.2f}x 1 ({s_lo:.2f}-{s_hi:.2f}, {rounds} rounds)", flush=True)
    finally:
        close_session()
    load1 = os.getloadavg()
    crossing = None
    for (b0, s0, *_), (b1, s1, *_) in zip(points, points[1:]):
        if (s0 - 1.5) * (s1 - 1.5) <= 0 and s0 != s1:
            t = (1.5 - s0) / (s1 - s0)
            crossing = math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    verdict = ("no crossing of 1.5x between the measured points" if crossing is None else
               f"measured crossing {crossing:,.0f}: predicted {mid / crossing - 1:+.0%}")
    print(f"real: limited by {e.first_line.split(':')[1].strip()}; predicted crossover {mid:,.0f} ({lo:,.0f}-{hi:,.0f}); "
          f"{verdict}; load average {load0[0]:.2f} before, {load1[0]:.2f} after (1 min) on this 2-core machine, "
          f"other helpers running; BLAS: 1 thread per worker, {blas}", flush=True)
    return {"predicted": (mid, lo, hi), "points": points, "crossing": crossing, "load": (load0, load1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--real", action="store_true", help="also the real case on this machine (minutes)")
    p.add_argument("--rounds", type=int, default=3, help="--real: interleaved rounds per measured batch")
    args = p.parse_args(argv)
    t = time.perf_counter()
    simulated()
    if args.real:
        real(rounds=args.rounds)
    print(f"({time.perf_counter() - t:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
