"""What each process of a run really takes, inside a real memory cgroup (cgroup v1 or v2, as root).

    python benchmarks/process_memory.py --limit-mb 1024 --path processes --hidden 2048,2048 [--cpus 2]
                                        [--dataset digits] [--steps 60] [--cpu 0]

Starts a child process (the stand-in for a Jupyter kernel) in a new memory cgroup of
`--limit-mb` below the root (the kernel's OOM killer, not a sampler, enforces it), pinned to
`--cpu` (Binder's one CPU), that imports the workbench, starts what the path needs (a local
cluster: its scheduler and nannies in the kernel, its workers in child processes; nothing
for the threads and the simulator) and runs one training run. A thread of the child reads
every 0.1 s, for it and each of its descendants, /proc/PID/smaps_rollup: rss, pss and uss
(private clean + dirty: what the process alone holds; the shared libraries' pages, which the
cgroup charges once, are not in it), and the cgroup's own charge. It prints, as JSON, each
process's peaks by phase (after imports, after the cluster started, during the run), the
cgroup's peak charge and whether the OOM killer ran, and what the memory check estimated.
Too slow for the test suite; docs/binder.md gives its table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, threading, time
args = json.loads(sys.argv[1])
phase = ["start"]
peaks = {}          # (phase, pid) -> {rss, pss, uss}
cg_peak = {}
roles = {os.getpid(): "kernel"}
stop = threading.Event()

def rollup(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        return None
    return {"rss": out.get("Rss", 0), "pss": out.get("Pss", 0),
            "uss": out.get("Private_Clean", 0) + out.get("Private_Dirty", 0)}

def children(pid):
    import glob
    kids = []
    for name in glob.glob(f"/proc/{pid}/task/*/children"):   # every thread's (Dask spawns from its loop's)
        try:
            with open(name) as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return kids + [g for k in kids for g in children(k)]

def charge():
    try:
        return int(open(args["cg"] + "/" + args["usage"]).read())
    except OSError:
        return 0

def sample():
    while not stop.is_set():
        tree = [os.getpid(), *children(os.getpid())]
        tot = {"rss": 0, "pss": 0, "uss": 0}
        for pid in tree:
            m = rollup(pid)
            if m is None:
                continue
            key = (phase[0], pid)
            old = peaks.setdefault(key, dict.fromkeys(m, 0))
            for k, v in m.items():
                old[k] = max(old[k], v)
                tot[k] += v
        t = peaks.setdefault((phase[0], "sum"), dict.fromkeys(tot, 0))
        for k, v in tot.items():
            t[k] = max(t[k], v)
        cg_peak[phase[0]] = max(cg_peak.get(phase[0], 0), charge())
        time.sleep(0.1)

threading.Thread(target=sample, daemon=True).start()
phase[0] = "imports"
import numpy as np
import workbench as wb
from workbench.config import RunConfig, ConfigError
from workbench.execution import preflight as P
time.sleep(1.0)
cfg = RunConfig(algorithm=args["algorithm"], dataset=args["dataset"], cpus=args["cpus"],
                hidden=tuple(args["hidden"]) or None, steps=args["steps"], simulate=args["path"] == "simulate",
                batch_size=args["batch"])
result = {"args": args, "limit_read": P.cgroup_memory_limit(), "beside_mb": P.beside_workers() >> 20}
try:
    result["estimate"] = P.check_memory(cfg, threads=args["path"] == "threads")
    result["verdict"] = "accepted"
    result["processes_need_mb"] = P.processes_need(result["estimate"], 0 if cfg.simulate else args["cpus"]) >> 20
except ConfigError as exc:
    result["verdict"] = f"refused: {exc}"
    result["estimate"] = P.memory_estimate(cfg)
cluster = None
if args["force"]:   # to see whether a refused run would have fit: no memory check on this run
    P.check_memory = lambda config, workers_memory=None, threads=False: P.memory_estimate(config)
if args["path"] == "processes":
    phase[0] = "cluster"
    from workbench.execution.cluster import make_cluster
    cluster = make_cluster(gpus=0, cpus=args["cpus"], quiet=True)
    for pid in cluster.run(os.getpid).values():
        roles[int(pid)] = "worker"
    result["worker_limit"] = [w.get("memory_limit") for w in cluster.scheduler_info()["workers"].values()]
    time.sleep(1.5)
elif args["path"] == "threads":
    cluster = "threads"
phase[0] = "run"
t0 = time.time()
try:
    r = wb.run(cfg, cluster=cluster, progress=False)
    result["status"] = r.status
except Exception as exc:
    result["status"] = f"{type(exc).__name__}: {str(exc)[:300]}"
result["run_s"] = round(time.time() - t0, 1)
time.sleep(0.3)
stop.set()
if args["path"] == "processes":   # its workers end with it, so the cgroup can be removed
    from workbench.execution.cluster import close_client
    close_client(cluster)
MB = 1 / 2**20
table = {}
for (ph, pid), m in peaks.items():
    role = "sum" if pid == "sum" else roles.get(pid, "other")
    table.setdefault(ph, []).append({"pid": pid, "role": role, **{k: round(v * MB) for k, v in m.items()}})
result["peaks_mb"] = table
result["cgroup_peak_mb"] = {k: round(v * MB) for k, v in cg_peak.items()}
result["estimate"] = {k: (round(v * MB) if k not in ("n_params", "pass_rows", "n_train") else v)
                      for k, v in result["estimate"].items()}
print("RESULT " + json.dumps(result), flush=True)
os._exit(0)
"""


def make_cgroup(name: str, limit: int) -> tuple[Path, str]:
    """A new memory cgroup below the root with `limit` bytes: (its directory, the charge file)."""
    v1 = Path("/sys/fs/cgroup/memory")
    if v1.is_dir():
        cg = v1 / name
        cg.mkdir(exist_ok=True)
        (cg / "memory.limit_in_bytes").write_text(str(limit))
        return cg, "memory.usage_in_bytes"
    cg = Path("/sys/fs/cgroup") / name
    cg.mkdir(exist_ok=True)
    (cg / "memory.max").write_text(str(limit))
    (cg / "memory.swap.max").write_text("0")
    return cg, "memory.current"


def oom_kills(cg: Path) -> int:
    for name in ("memory.oom_control", "memory.events"):
        try:
            for line in (cg / name).read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except OSError:
            continue
    return -1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-mb", type=int, default=1024)
    ap.add_argument("--path", choices=("processes", "threads", "simulate"), default="processes")
    ap.add_argument("--algorithm", default="sync_sgd")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--hidden", default="")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="run even when the check refuses (skip preflight)")
    a = ap.parse_args()
    args = {"path": a.path, "algorithm": a.algorithm, "dataset": a.dataset, "cpus": a.cpus, "steps": a.steps,
            "batch": a.batch, "hidden": [int(h) for h in a.hidden.split(",") if h], "force": a.force,
            "limit_mb": a.limit_mb}
    name = f"wb_process_memory_{os.getpid()}"
    cg, usage = make_cgroup(name, a.limit_mb << 20)
    args.update(cg=str(cg), usage=usage)

    def enter() -> None:
        (cg / "cgroup.procs").write_text(str(os.getpid()))
        os.sched_setaffinity(0, {a.cpu})

    load = os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], preexec_fn=enter, env=env,
                          capture_output=True, text=True, timeout=1200)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(lines[-1][7:]) if lines else {"rc": proc.returncode, "stderr": proc.stderr[-1500:]}
    peak_file = "memory.max_usage_in_bytes" if usage == "memory.usage_in_bytes" else "memory.peak"
    try:
        result["cgroup_max_mb"] = round(int((cg / peak_file).read_text()) / 2**20)
    except OSError:
        pass
    result.update(oom_kill=oom_kills(cg), rc=proc.returncode, load_before=load, load_after=os.getloadavg()[0],
                  wall_s=round(time.time() - t0, 1), when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for _ in range(50):   # a process of the run may take a moment to leave it
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.2)
    peaks = result.pop("peaks_mb", {})
    print(json.dumps(result))
    for phase, rows in peaks.items():
        for row in sorted(rows, key=lambda r: (r["role"], str(r["pid"]))):
            print(f"{phase:8s} {row['role']:7s} {row['pid']!s:>7s} rss {row['rss']:5d} pss {row['pss']:5d} "
                  f"uss {row['uss']:5d} MB")


if __name__ == "__main__":
    main()
