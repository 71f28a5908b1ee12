"""A long run's memory and its stop, measured from outside (issue 29 item 5's benchmark).

Starts `python -m workbench run ...` (a long plan) as a child process, samples its
resident memory (VmRSS, with its children: the workers of a Dask run) every `--every`
seconds while it trains, then sends it a signal (SIGINT by default) and measures the
seconds from the signal to the commit (summary.json written) and to the process's exit
(report.html included), and checks the directory it left: committed, status stopped,
steps.csv holding every step the summary counts.

    python -m workbench.bench.records --seconds 120
    python -m workbench.bench.records --seconds 120 --pythonpath /path/to/another/checkout   # compare
    python -m workbench.bench.records --synthetic 2000000   # the record path alone, in this process

It prints numbers, nothing is asserted: timings belong here, not in tests.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..util.startup import as_foreground_job


def _rss_mb(pid: int) -> float:
    """VmRSS of `pid` and its descendants, in MB (0 for a process that is gone)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total / 1024


def _lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n


def _steps_written(out: Path) -> int | None:
    """Rows streamed so far (the spool's step column), None where the run keeps none."""
    spool = out / ".steps-spool" / "step.f64"
    return spool.stat().st_size // 8 if spool.exists() else None


def synthetic(rows: int, every: int, workers: int = 2, batch: int = 2000) -> int:
    """The record path alone, in this process: `rows` step rows of `workers` synchronous
    workers fed to a `Collector` streaming to a temporary run directory in live batches of
    `batch` rows, RSS printed every `every` rows; then the summary and the commit timed
    (what a stop costs after the loops end)."""
    import numpy as np

    from ..results.collect import Collector
    from ..results.records import ROW_FIELDS, pack_rows
    from ..results.result import build_result
    out = Path(tempfile.mkdtemp(prefix="recordbench-")) / "run"
    out.mkdir()
    collector = Collector(size=workers, width=max(1, rows // workers // 200), directory=out)
    rng = np.random.default_rng(0)
    per = batch // workers
    t0 = time.time()
    print(f"{'rows':>10} {'RSS MB':>8} {'s':>7} {'load':>5}")
    done = 0
    next_print = 0
    while done < rows:
        lo = done // workers
        for w in range(workers):
            cols = {f: rng.random(per) for f in ROW_FIELDS}
            cols["step"] = np.arange(lo, lo + per, dtype=float)
            cols["samples"] = np.full(per, 32.0)
            cols["time"] = (cols["step"] + 1) * 1e-3 + 1e-5 * w
            collector.add_live({"rank": w, "started": t0, "rows": pack_rows(cols), "records": []})
        done += per * workers
        if done >= next_print:
            print(f"{done:10,} {_rss_mb(os.getpid()):8.0f} {time.time() - t0:7.1f} {os.getloadavg()[0]:5.1f}",
                  flush=True)
            next_print += every
    for w in range(workers):
        collector.add_live({"rank": w, "started": t0, "rows": None, "records": [], "done": True})
    t1 = time.time()
    result = build_result({}, collector, status="stopped", wall_time_s=time.time() - t0, workers=[])
    t2 = time.time()
    result.save(out)
    t3 = time.time()
    print(f"summary (close + totals + steady over {rows:,} rows): {t2 - t1:.2f} s; commit: {t3 - t2:.2f} s; "
          f"RSS {_rss_mb(os.getpid()):.0f} MB; steady samples/s {result.summary['samples_per_s']:,.0f}; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"run directory: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="train this long before the signal")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between memory samples")
    ap.add_argument("--signal", default="INT", choices=["INT", "TERM"])
    ap.add_argument("--pythonpath", default=None, help="the checkout to run (default: this one)")
    ap.add_argument("--synthetic", type=int, default=None, metavar="ROWS",
                    help="measure the record path alone: feed ROWS synthetic step rows to a collector here")
    ap.add_argument("run_args", nargs="*", help="arguments for `workbench run` (default: a long sgd run)")
    args = ap.parse_args(argv)
    if args.synthetic:
        return synthetic(args.synthetic, max(1, args.synthetic // 10))
    run_args = args.run_args or ["--algorithm", "sgd", "--dataset", "digits", "--model", "softmax",
                                 "--batch-size", "32", "--epochs", "1000000"]
    out = Path(tempfile.mkdtemp(prefix="recordbench-")) / "run"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    root = args.pythonpath or str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root
    cmd = [sys.executable, "-m", "workbench", "run", *run_args, "--out", str(out), "--no-progress"]
    print(f"code: {root}\nrun: {' '.join(cmd[3:])}\nload average at start: {os.getloadavg()[0]:.1f}")
    # (as a terminal's foreground job: started by `nohup ... &`, this bench would hand the run an
    # ignored SIGINT, which the CLI keeps ignored, and wait on it for ever)
    child = subprocess.Popen(cmd, env=env, cwd=root,   # cwd: `-m` puts it first on sys.path
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=as_foreground_job)
    t0 = time.time()
    print(f"{'s':>7} {'RSS MB':>8} {'rows written':>13} {'load':>5}")
    while time.time() - t0 < args.seconds and child.poll() is None:
        time.sleep(min(args.every, max(0.0, args.seconds - (time.time() - t0))))
        rows = _steps_written(out)
        print(f"{time.time() - t0:7.0f} {_rss_mb(child.pid):8.0f} {rows if rows is not None else '-':>13} "
              f"{os.getloadavg()[0]:5.1f}", flush=True)
    if child.poll() is not None:
        print(child.stdout.read())
        print("the run ended before the signal")
        return 1
    sent = time.time()
    child.send_signal(getattr(signal, f"SIG{args.signal}"))
    committed = None
    while child.poll() is None:
        if committed is None and (out / "summary.json").exists():
            committed = time.time() - sent
        time.sleep(0.02)
    exited = time.time() - sent
    if committed is None and (out / "summary.json").exists():
        committed = exited
    tail = child.stdout.read().strip().splitlines()[-3:]
    print(f"SIG{args.signal} -> summary.json (commit): {committed if committed is None else round(committed, 2)} s; "
          f"-> exit: {exited:.2f} s (rc {child.returncode}); load {os.getloadavg()[0]:.1f}")
    for line in tail:
        print(f"  | {line}")
    if committed is not None:
        summary = json.loads((out / "summary.json").read_text())
        lines = _lines(out / "steps.csv") - 1
        print(f"status {summary['status']}; steps {summary['steps']:,}; steps.csv rows {lines:,} "
              f"({(out / 'steps.csv').stat().st_size / 1e6:.0f} MB); report.html "
              f"{'written' if (out / 'report.html').exists() else 'absent'}")
    print(f"run directory: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
