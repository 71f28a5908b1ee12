"""Each lesson's peak memory as Binder would see it: the notebook run by papermill on ONE
CPU, the memory of its whole process tree (the kernel, the Dask scheduler in it, the
nannies, the workers, the fork server) sampled while it runs.

    python benchmarks/lesson_memory.py [--notebooks quickstart,sim_sc17] [--full] [--cpu 0]
                                       [--interval 0.25] [--out lesson_memory.csv] [--keep DIR]

Each notebook runs in a child process pinned to one CPU (`os.sched_setaffinity`, as
`taskset -c 0` does; Dask reads that affinity as the machine's core count, as it reads
Binder's one CPU) with `quick=True` (or its defaults with `--full`). Every `--interval`
seconds the script sums, over the kernel and all of its descendants (the papermill driver
itself is left out: on Binder the Jupyter server stands in its place and is not counted
against a lesson either):

* `rss`: resident set sizes, added up. Pages shared between processes (the fork
  server's copy-on-write pages, the shared-memory allreduce's segments) count once per
  process that maps them, so this over-states what the container is charged: the bound
  the issue sets (900 MB) is checked against it;
* `pss`: proportional set sizes (each shared page split among its sharers), which adds up
  to what the processes really hold.

It prints one row per notebook (peak rss and pss in MB, the wall time, the number of
processes at the peak, the load average before) and writes them as CSV. Too slow for the
test suite (a kernel and a cluster per lesson, one CPU): docs/binder.md gives its table.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
DRIVER = """
import sys, papermill
papermill.execute_notebook(sys.argv[1], sys.argv[2], parameters={"quick": sys.argv[3] == "1", "out_dir": sys.argv[4]},
                           kernel_name="python3", cwd=sys.argv[5], progress_bar=False)
"""


def _tree_memory(driver: psutil.Process) -> tuple[int, int, int]:
    """(rss, pss, processes) summed over the driver's descendants (the kernel and below)."""
    rss = pss = n = 0
    try:
        children = driver.children(recursive=True)
    except psutil.Error:
        return 0, 0, 0
    for p in children:
        try:
            info = p.memory_full_info()
        except psutil.Error:       # ended between the listing and the read
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
        n += 1
    return rss, pss, n


def measure(notebook: Path, full: bool, cpu: int, interval: float, keep: Path | None = None) -> dict:
    """Run one notebook pinned to `cpu` and return its peaks; `keep`: a folder to copy the
    executed notebook into (its outputs: what the lesson printed on one CPU)."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"wb-mem-{notebook.stem}-") as tmp:
        out = Path(tmp) / "out"
        executed = Path(tmp) / notebook.name
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        t0 = time.perf_counter()
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(notebook), str(executed), "0" if full else "1",
                                   str(out), str(notebook.parent)],
                                  preexec_fn=lambda: os.sched_setaffinity(0, {cpu}), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc = psutil.Process(driver.pid)
        peak = {"rss": 0, "pss": 0, "processes": 0}
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                rss, pss, n = _tree_memory(proc)
                if rss > peak["rss"]:
                    peak["rss"], peak["processes"] = rss, n
                peak["pss"] = max(peak["pss"], pss)
                stop.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = driver.communicate()
        stop.set()
        sampler.join()
        wall = time.perf_counter() - t0
        if keep is not None and executed.exists():
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(executed, keep / executed.name)
    return {"notebook": notebook.stem, "mode": "full" if full else "quick", "ok": driver.returncode == 0,
            "peak_rss_mb": round(peak["rss"] / 2**20), "peak_pss_mb": round(peak["pss"] / 2**20),
            "processes": peak["processes"], "wall_s": round(wall, 1), "load_before": round(load, 2),
            "error": "" if driver.returncode == 0 else err.strip().splitlines()[-1][:200] if err.strip() else "failed"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", help="comma-separated stems (default: every notebook in notebooks/)")
    parser.add_argument("--full", action="store_true", help="the notebooks' own defaults instead of quick=True")
    parser.add_argument("--cpu", type=int, default=0, help="the one CPU the lesson may use")
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("--out", default="lesson_memory.csv", help="CSV of the rows")
    parser.add_argument("--keep", type=Path, help="a folder to keep the executed notebooks in")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.notebooks:
        wanted = args.notebooks.split(",")
        paths = [p for p in paths if p.stem in wanted]
    rows = []
    print(f"{'notebook':<26} {'mode':<5} {'rss MB':>7} {'pss MB':>7} {'procs':>5} {'wall s':>7} {'load':>5}  ok",
          flush=True)
    for path in paths:
        row = measure(path, args.full, args.cpu, args.interval, args.keep)
        rows.append(row)
        print(f"{row['notebook']:<26} {row['mode']:<5} {row['peak_rss_mb']:>7} {row['peak_pss_mb']:>7} "
              f"{row['processes']:>5} {row['wall_s']:>7} {row['load_before']:>5}  {row['ok']} {row['error']}", flush=True)
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
