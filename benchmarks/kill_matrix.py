"""Kill each rank of each algorithm on nanny and no-nanny Dask workers; print the matrix.

    PYTHONPATH=. python benchmarks/kill_matrix.py [--algorithms sync_sgd,easgd] [--kinds nanny,no-nanny]
                                                 [--workers 2] [--guard 120]

Issue 29, deliverable 3: every wait in every role returns on the stop flag and on the
transport's loss of a peer. One external cluster per worker kind (`dask scheduler` plus
`dask worker` processes on 127.0.0.1, with or without `--no-nanny`) serves every case: a
killed no-nanny worker is replaced by a fresh process, a nanny brings its own back.

A case is event-driven, never timed: the run's plan is far longer than anything here
(`steps` 10^6); the victim (rank r, `workers_of` order, the order the engine assigns ranks)
is sent SIGKILL once its first step record has reached the client; then

* a synchronous algorithm must end by itself, `failed`, naming the lost worker (every wait
  on the lost peer returned);
* an asynchronous one must go on: once every survivor has reported `AFTER` more steps
  after the kill, the client asks the run to stop, and it must end `stopped` (the waits
  returned on the stop flag) with the loss in its events.

`guard` seconds is only a hang guard (a case past it is reported `HANG`); it is not part of
what is measured. Too slow for the test suite (64 cases, each a run start and a worker
restart: minutes), hence a script; its table is in /work/notes/issue-29.md.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AFTER = 20          # survivor steps after the kill before an asynchronous run is stopped
STEPS = 1_000_000   # a plan no case reaches the end of

# what each algorithm needs beside the defaults to run on `workers` CPU workers
EXTRA = {"ltfb": {"round_size": 5}, "cgdp": {"chunk_layers": 1}}


def start_scheduler(log: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                 "--port", "0", "--dashboard-address", ":0"], env=env, stdout=f,
                                stderr=subprocess.STDOUT)
    for _ in range(1200):
        found = re.search(r"Scheduler at:\s+(tcp://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return proc, found.group(1)
        time.sleep(0.1)
    raise RuntimeError(log.read_text())


def start_worker(address: str, nanny: bool, name: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--host",
            "127.0.0.1", "--name", name, "--memory-limit", "2GiB"] + ([] if nanny else ["--no-nanny"])
    with open(log, "a") as f:
        return subprocess.Popen(args, env=env, stdout=f, stderr=subprocess.STDOUT)


def one_case(client, algorithm: str, rank: int, workers: int, guard: float) -> tuple[str, str, float]:
    """(outcome, detail, seconds from the kill to the run's end)."""
    import workbench as wb
    from workbench.execution.cluster import workers_of
    cfg = wb.RunConfig(algorithm=algorithm, dataset="digits", cpus=workers, steps=STEPS, batch_size=16,
                       eval_every=STEPS, **EXTRA.get(algorithm, {}))
    victim = workers_of(client)[rank]
    sync = cfg.is_sync
    first, enough, killed_at = threading.Event(), threading.Event(), {}
    after: dict[int, int] = {}

    def on_record(records):
        for r in records:
            if r.get("kind") != "step":
                continue
            if r["worker"] == rank:
                first.set()
            elif "t" in killed_at:
                after[r["worker"]] = after.get(r["worker"], 0) + 1
        if "t" in killed_at and len(after) == workers - 1 and min(after.values()) >= AFTER:
            enough.set()

    box: dict = {}

    def go():
        try:
            box["result"] = wb.run(cfg, cluster=client, on_record=on_record, progress=False,
                                   should_stop=enough.is_set)
        except BaseException as exc:   # reported in the table
            box["error"] = exc
    t = threading.Thread(target=go, daemon=True)
    t.start()
    if not first.wait(guard):
        return "NO-START", "the victim never reported a step", float("nan")
    os.kill(victim["pid"], signal.SIGKILL)
    killed_at["t"] = time.perf_counter()
    t.join(guard)
    took = time.perf_counter() - killed_at["t"]
    if t.is_alive():
        return "HANG", f"no end {guard:g} s after the kill (survivor steps after it: {after})", took
    if "error" in box:
        return "ERROR", f"{type(box['error']).__name__}: {str(box['error']).splitlines()[0][:100]}", took
    res = box["result"]
    lost = [e for e in res.events if e.get("event") == "worker_lost"]
    want = "failed" if sync else "stopped"
    ok = res.status == want and bool(lost)
    detail = f"status {res.status}, lost events {len(lost)}, survivor steps after kill {min(after.values(), default=0)}"
    return ("ok" if ok else "WRONG"), detail, took


def main(argv: list[str] | None = None) -> int:
    from workbench.config.registry import specs
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithms", default=",".join(n for n, s in specs().items() if not s.in_process))
    p.add_argument("--kinds", default="nanny,no-nanny")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--guard", type=float, default=120.0)
    p.add_argument("--logs", default="/tmp/kill_matrix")
    a = p.parse_args(argv)
    logs = Path(a.logs)
    logs.mkdir(parents=True, exist_ok=True)
    from distributed import Client
    rows = []
    t_all = time.perf_counter()
    for kind in a.kinds.split(","):
        nanny = kind == "nanny"
        sched, address = start_scheduler(logs / f"{kind}-scheduler.log")
        procs = {f"w{i}": start_worker(address, nanny, f"w{i}", logs / f"{kind}-workers.log")
                 for i in range(a.workers)}
        client = Client(address, set_as_default=False, timeout=60)
        try:
            for algorithm in a.algorithms.split(","):
                for rank in range(a.workers):
                    client.wait_for_workers(a.workers, timeout=180)
                    while len(client.nthreads()) != a.workers:   # a dead worker still listed: wait it out
                        time.sleep(0.2)
                    t0 = time.perf_counter()
                    outcome, detail, took = one_case(client, algorithm, rank, a.workers, a.guard)
                    rows.append((kind, algorithm, rank, outcome, took, time.perf_counter() - t0, detail))
                    print(f"{kind:9s} {algorithm:15s} rank {rank}  {outcome:8s} end {took:6.1f} s after kill"
                          f"  case {rows[-1][5]:5.1f} s  {detail}", flush=True)
                    if not nanny:   # the killed process is gone for good: start its replacement
                        from workbench.execution.cluster import workers_of
                        alive = {w["name"] for w in workers_of(client)}
                        for name in [n for n in procs if n not in alive]:
                            procs[name] = start_worker(address, nanny, name, logs / f"{kind}-workers.log")
        finally:
            client.close()
            for proc in [*procs.values(), sched]:
                proc.terminate()
            for proc in [*procs.values(), sched]:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    bad = [r for r in rows if r[3] != "ok"]
    print("\n| kind | algorithm | rank | outcome | end after kill (s) | case (s) |")
    print("|---|---|---|---|---|---|")
    for kind, algorithm, rank, outcome, took, case, _ in rows:
        print(f"| {kind} | {algorithm} | {rank} | {outcome} | {took:.1f} | {case:.1f} |")
    print(f"\n{len(rows)} cases, {len(bad)} not ok, {time.perf_counter() - t_all:.0f} s in all")
    for r in bad:
        print("NOT OK:", r[0], r[1], "rank", r[2], r[3], r[6])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
