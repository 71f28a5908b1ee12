"""Are 2 workers faster than 1? The same config through every door: `python benchmarks/agreement.py [--busy]`.

Issue 48's table: sync_sgd on digits, MLP 512-256, batch 32, 10 epochs, 1 worker against 2,
through each entry point's own path as a user takes it:

- dashboard Run: a `Dashboard()` on the session's local cluster (a 1-worker cluster for the
  1-worker run, a 2-worker one for the 2-worker run, as the Run button starts them), read
  off its runs table;
- CLI run: `python -m workbench run --cpus N` in a fresh process (its own cluster);
- dashboard sweep: `Dashboard.sweep([1, 2])` (wb.sweep on one 2-worker cluster);
- CLI sweep: `python -m workbench sweep --workers 1,2`;
- demo: the demo's measurement (`apps.demo.compare_workers`) of this config on the demo's
  cluster of 2 single-core workers.

Run and CLI run are measured 3 times each, interleaved (1, 2, 1, 2, 1, 2); the sweeps and
the demo by their own rule (3 rounds, then up to 8 while a rate is not known to +-5%). Each
entry's rounds are combined by the one rule (`analysis.sweep.combine_rounds`): the speed-up
of the medians, each rate's spread, resolved or "not resolved on this machine now".
`--busy` holds both cores with two spin loops while it measures. Prints the load average
(1 minute) before and after each entry and the BLAS settings.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = ["--algorithm", "sync_sgd", "--dataset", "digits", "--model", "mlp", "--hidden", "512,256",
         "--batch-size", "32", "--epochs", "10", "--seed", "0"]
CONFIG = dict(algorithm="sync_sgd", dataset="digits", model="mlp", hidden=[512, 256], batch_size=32, epochs=10.0,
              seed=0)
ROUNDS = 3


def _load() -> float:
    return os.getloadavg()[0]


def _rows(pairs: list[tuple[int, float, str]]) -> list[dict]:
    """[(workers, samples/s, status)] in run order -> combine_rounds rows (round k: the k-th of each count)."""
    seen: dict[int, int] = {}
    rows = []
    for w, rate, status in pairs:
        k = seen.get(w, 0)
        seen[w] = k + 1
        rows.append({"workers": w, "samples_per_s": rate, "round": k, "status": status})
    return rows


def dashboard_run(tmp: Path) -> list[dict]:
    from workbench.config import RunConfig
    from workbench.execution.cluster import close_session
    from workbench.ui.dashboard import Dashboard
    dash = Dashboard(out=tmp / "dash")
    pairs = []
    try:
        for _ in range(ROUNDS):
            for w in (1, 2):
                dash.config = RunConfig(**CONFIG, cpus=w)
                assert dash.run(), dash.status_text
                r = dash.wait(900)
                assert r is not None, dash.status_text
                table = dash.runs_table()
                pairs.append((w, float(table["samples_per_s"].iloc[-1]), r.summary["status"]))
                print(f"    dashboard Run, {w} worker(s): {dash.status_text}", flush=True)
    finally:
        close_session()
    return _rows(pairs)


def cli_run(tmp: Path) -> list[dict]:
    pairs = []
    for k in range(ROUNDS):
        for w in (1, 2):
            out = tmp / f"cli-{k}-{w}"
            proc = subprocess.run([sys.executable, "-m", "workbench", "run", *FLAGS, "--cpus", str(w), "--out", str(out),
                                   "--no-progress"], capture_output=True, text=True, timeout=900)
            s = json.loads((out / "summary.json").read_text())
            pairs.append((w, float(s["samples_per_s"]), s["status"]))
            print(f"    CLI run, {w} worker(s): {proc.stdout.splitlines()[0] if proc.stdout else proc.stderr[-300:]}",
                  flush=True)
    return _rows(pairs)


def dashboard_sweep(tmp: Path) -> list[dict]:
    from workbench.config import RunConfig
    from workbench.execution.cluster import close_session
    from workbench.ui.dashboard import Dashboard
    dash = Dashboard(config=RunConfig(**CONFIG, cpus=2))
    try:
        assert dash.sweep([1, 2], "strong"), dash.status_text
        dash.wait(3600)
    finally:
        close_session()
    return _from_results(dash.sweeps.results)


def _from_results(results: list) -> list[dict]:
    return _rows([(len(r.summary["workers"]), float(r.summary["samples_per_s"]), r.summary["status"]) for r in results])


def cli_sweep(tmp: Path) -> list[dict]:
    out = tmp / "cli-sweep"
    subprocess.run([sys.executable, "-m", "workbench", "sweep", *FLAGS, "--workers", "1,2", "--out", str(out),
                    "--no-progress"], capture_output=True, text=True, timeout=3600)
    rows = []
    for d in sorted(out.glob("w*")):
        s = json.loads((d / "summary.json").read_text())
        rows.append((len(s["workers"]), float(s["samples_per_s"]), s["status"]))
    return _rows(rows)


def demo(tmp: Path) -> list[dict]:
    from workbench import api
    from workbench.apps.demo import compare_workers
    from workbench.config import RunConfig
    from workbench.execution.cluster import close_client, make_cluster
    from workbench.measure import MAX_ROUNDS, Repeats
    client = make_cluster(cpus=2, gpus=0, quiet=True)
    try:
        api.run(RunConfig(**CONFIG, cpus=2, steps=2), cluster=client, progress=False)    # the demo warms both
        compare_workers(RunConfig(**CONFIG), client, Repeats([1, 2], min_rounds=ROUNDS, max_rounds=MAX_ROUNDS),
                        tmp / "demo", echo=False)
    finally:
        close_client(client)
    return _demo_rows(tmp)


def _demo_rows(tmp: Path) -> list[dict]:
    from workbench.results import RunResult
    dirs = sorted([*(tmp / "demo").rglob("summary.json")])
    return _from_results([RunResult.load(p.parent) for p in dirs])


ENTRIES = {"dashboard Run": dashboard_run, "CLI run": cli_run, "dashboard sweep": dashboard_sweep,
           "CLI sweep": cli_sweep, "demo": demo}


# One round of each door, for --interleaved: every door measures 1 then 2 workers once per round
def _dashboard_run_round(state: dict, tmp: Path, k: int) -> list[tuple]:
    from workbench.config import RunConfig
    from workbench.ui.dashboard import Dashboard
    dash = state.setdefault("dash", Dashboard(out=tmp / "dash"))
    out = []
    for w in (1, 2):
        dash.config = RunConfig(**CONFIG, cpus=w)
        assert dash.run(), dash.status_text
        r = dash.wait(900)
        out.append((w, float(dash.runs_table()["samples_per_s"].iloc[-1]), r.summary["status"]))
    return out


def _cli_run_round(state: dict, tmp: Path, k: int) -> list[tuple]:
    return cli_run_once(tmp, k)


def cli_run_once(tmp: Path, k: int) -> list[tuple]:
    pairs = []
    for w in (1, 2):
        out = tmp / f"cli-{k}-{w}"
        subprocess.run([sys.executable, "-m", "workbench", "run", *FLAGS, "--cpus", str(w), "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, timeout=900)
        s = json.loads((out / "summary.json").read_text())
        pairs.append((w, float(s["samples_per_s"]), s["status"]))
    return pairs


def _dashboard_sweep_round(state: dict, tmp: Path, k: int) -> list[tuple]:
    from workbench import api
    from workbench.config import RunConfig
    from workbench.execution.cluster import session_client
    table = api.sweep(RunConfig(**CONFIG, cpus=2), [1, 2], "strong", cluster=session_client(2, 0), progress=False,
                      rounds=1, max_rounds=1)     # what the dashboard's Sweep runs (wb.sweep), one round of it
    return [(int(r.workers), float(r.samples_per_s), r.status) for r in table.itertuples()]


def _cli_sweep_round(state: dict, tmp: Path, k: int) -> list[tuple]:
    import pandas as pd
    out = tmp / f"cli-sweep-{k}"
    subprocess.run([sys.executable, "-m", "workbench", "sweep", *FLAGS, "--workers", "1,2", "--rounds", "1",
                    "--max-rounds", "1", "--out", str(out), "--no-progress"], capture_output=True, text=True,
                   timeout=900)
    table = pd.read_csv(out / "sweep.csv")
    return [(int(r.workers), float(r.samples_per_s), r.status) for r in table.itertuples()]


def _demo_round(state: dict, tmp: Path, k: int) -> list[tuple]:
    from workbench import api
    from workbench.apps.demo import compare_workers
    from workbench.config import RunConfig
    from workbench.execution.cluster import make_cluster
    from workbench.measure import Repeats
    if "demo" not in state:
        state["demo"] = make_cluster(cpus=2, gpus=0, quiet=True)
        api.run(RunConfig(**CONFIG, cpus=2, steps=2), cluster=state["demo"], progress=False)
    table, statuses = compare_workers(RunConfig(**CONFIG), state["demo"], Repeats([1, 2], min_rounds=1, max_rounds=1),
                                      tmp / f"demo-{k}", echo=False)
    return [(int(r.workers), float(r.samples_per_s), s) for r, s in zip(table.itertuples(), statuses)]


ROUND_OF = {"dashboard Run": _dashboard_run_round, "CLI run": _cli_run_round,
            "dashboard sweep": _dashboard_sweep_round, "CLI sweep": _cli_sweep_round, "demo": _demo_round}


def interleaved(names: list[str], tmp: Path, rounds: int) -> dict[str, list[dict]]:
    """Every door once per round (1 then 2 workers), round after round: the machine's drift
    falls on all of them alike."""
    from workbench.execution.cluster import close_client, close_session
    state: dict = {}
    pairs: dict[str, list[tuple]] = {n: [] for n in names}
    try:
        for k in range(rounds):
            for name in names:
                got = ROUND_OF[name](state, tmp / name.replace(" ", "-"), k)
                pairs[name] += got
                print(f"    round {k + 1} {name}: " + ", ".join(f"{w} worker(s) {v:,.0f}" for w, v, _ in got)
                      + f"; load {_load():.1f}", flush=True)
    finally:
        close_session()
        close_client(state.get("demo"))
    return {n: _rows(p) for n, p in pairs.items()}


def comparison(rows: list[dict]) -> dict:
    """Speed-up of the medians, its relative uncertainty (each rate's spread, at least +-5%),
    resolved or the note saying why not (`analysis.sweep.combine_rounds`)."""
    from workbench.analysis.sweep import combine_rounds
    from workbench.measure import TARGET_SPREAD
    table = combine_rounds(rows)
    one, two = table.iloc[0], table.iloc[1]
    return {"speedup": float(two["samples_per_s"] / one["samples_per_s"]),
            "uncertainty": max(float(one["spread"]), TARGET_SPREAD) + max(float(two["spread"]), TARGET_SPREAD),
            "resolved": bool(one["resolved"]) and bool(two["resolved"]),
            "rates": (float(one["samples_per_s"]), float(two["samples_per_s"])),
            "rounds": (int(one["rounds"]), int(two["rounds"])),
            "note": " ".join(n for n in (one["resolution_note"], two["resolution_note"]) if n)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--busy", action="store_true", help="hold both cores with two spin loops while measuring")
    p.add_argument("--entries", default=",".join(ENTRIES), help="comma list of " + ", ".join(ENTRIES))
    p.add_argument("--interleaved", type=int, default=0, metavar="ROUNDS",
                   help="instead: every door once per round, ROUNDS rounds (each sweep and the demo one round a call)")
    args = p.parse_args(argv)
    spin = []
    if args.busy:
        spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    blas = {k: os.environ.get(k, "(unset)") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print(f"agreement: {' '.join(FLAGS)}; {'both cores held by two spin loops' if args.busy else 'no spin loops'}; "
          f"BLAS {blas}, 1 thread per worker (the rule); {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)
    found = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.interleaved:
                load0, t0 = _load(), time.perf_counter()
                rows = interleaved(args.entries.split(","), Path(tmp), args.interleaved)
                for name, r in rows.items():
                    c = comparison(r)
                    c.update(load=(load0, _load()), seconds=time.perf_counter() - t0)
                    found[name] = c
                    print(f"{name:16s} {c['speedup']:.2f}x +-{c['uncertainty']:.0%} (1 worker {c['rates'][0]:,.0f}, "
                          f"2 workers {c['rates'][1]:,.0f} samples/s; rounds {c['rounds']}); "
                          f"{'resolved' if c['resolved'] else c['note'] or 'not resolved'}", flush=True)
                print(f"load {load0:.1f} -> {_load():.1f} over {time.perf_counter() - t0:.0f} s", flush=True)
            for name in ([] if args.interleaved else args.entries.split(",")):
                load0, t0 = _load(), time.perf_counter()
                rows = ENTRIES[name](Path(tmp) / name.replace(" ", "-"))
                c = comparison(rows)
                c.update(load=(load0, _load()), seconds=time.perf_counter() - t0)
                found[name] = c
                print(f"{name:16s} {c['speedup']:.2f}x +-{c['uncertainty']:.0%} (1 worker {c['rates'][0]:,.0f}, 2 workers "
                      f"{c['rates'][1]:,.0f} samples/s; rounds {c['rounds']}); "
                      f"{'resolved' if c['resolved'] else c['note'] or 'not resolved'}; load {c['load'][0]:.1f} -> "
                      f"{c['load'][1]:.1f}; {c['seconds']:.0f} s", flush=True)
    finally:
        for proc in spin:
            proc.kill()
            proc.wait()
    print(json.dumps(found, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
