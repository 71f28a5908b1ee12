"""The machine's state during a run: load, who used the cores, steal, each worker's CPU time.

A throughput measured on a machine where other processes took a share of the cores
measures the machine, not the algorithm. So every real run records (`summary["machine"]`):

- the load average (1 minute) before and after;
- the machine's busy CPU time over the run, from `/proc/stat` where the kernel reports it
  (Linux), split into ours (this process and the workers' processes) and other processes',
  and `steal` (time the hypervisor gave the machine's virtual cores to someone else);
- each worker's loop: its wall time, the CPU time of its thread, its process's CPU time,
  the compute it booked, and `stalled_s`, booked compute the thread did not spend on a
  core (descheduled: a lower bound on its stalls; CPU workers only, and only when the
  loop thread does the compute, as NumPy with one BLAS thread does).

`note(state)` is the sentence the summary (`machine_note`), the status line and the
scaling figure show when other processes (or steal) took a noticeable share of the cores:
``OTHERS_NOTICEABLE`` of them (10%: 0.2 of 2 cores) or more.
"""
from __future__ import annotations

import os
import time
from typing import Any

OTHERS_NOTICEABLE = 0.10   # of the machine's cores: other processes' (or steal's) share worth a sentence
PROC_STAT = "/proc/stat"


def cpu_times(path: str = PROC_STAT) -> dict[str, float] | None:
    """The machine's CPU seconds since boot, summed over cores: busy, idle, steal; None
    where the kernel does not report them (not Linux).

    busy is user + nice + system + irq + softirq (guest time is already inside user);
    idle is idle + iowait."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    v = [float(x) / hz for x in fields[1:]] + [0.0] * 10
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return {"busy": user + nice + system + irq + softirq, "idle": idle + iowait, "steal": steal}


def snapshot() -> dict[str, Any]:
    """The state to compare after the run: wall clock, load, machine CPU times, this process's CPU."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    return {"time": time.time(), "load": load, "cpu": cpu_times(), "process_cpu_s": time.process_time(),
            "pid": os.getpid(), "cores": os.cpu_count() or 1}


class LoopUsage:
    """A worker loop's clocks: `start()` before it, `stop(compute_s, kind, rank)` after,
    run in the loop's own thread."""

    def __init__(self) -> None:
        self.wall0 = time.perf_counter()
        self.thread0 = time.thread_time()
        self.proc0 = time.process_time()

    def stop(self, compute_s: float, kind: str, rank: int) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        cpu = time.thread_time() - self.thread0
        return {"rank": rank, "pid": os.getpid(), "kind": kind, "wall_s": wall, "cpu_s": cpu,
                "process_cpu_s": time.process_time() - self.proc0, "compute_s": float(compute_s),
                "stalled_s": max(float(compute_s) - cpu, 0.0) if kind == "cpu" else None}


def summarise(before: dict[str, Any], after: dict[str, Any], loops: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's machine state from two `snapshot`s and the workers' `LoopUsage` reports.

    Ours is this process's CPU time (the client, and thread workers) plus each other
    worker process's (counted once per pid); the rest of the machine's busy time is other
    processes' (Dask's scheduler and nannies outside this process count there too: a few
    hundredths of a core).

    >>> before = {"time": 0.0, "load": 0.5, "cpu": {"busy": 0.0, "idle": 0.0, "steal": 0.0},
    ...           "process_cpu_s": 0.0, "pid": 1, "cores": 2}
    >>> after = {"time": 10.0, "load": 1.9, "cpu": {"busy": 19.0, "idle": 1.0, "steal": 0.0},
    ...          "process_cpu_s": 1.0, "pid": 1, "cores": 2}
    >>> loops = [{"rank": 0, "pid": 7, "process_cpu_s": 2.0}, {"rank": 1, "pid": 8, "process_cpu_s": 2.0}]
    >>> s = summarise(before, after, loops)
    >>> s["our_cores"], s["other_cores"], s["steal_cores"]
    (0.5, 1.4, 0.0)
    """
    wall = max(float(after["time"]) - float(before["time"]), 1e-9)
    cores = int(after.get("cores") or 1)
    own = float(after["process_cpu_s"]) - float(before["process_cpu_s"])
    seen = {after.get("pid")}
    for loop in loops:
        if loop.get("pid") not in seen:
            seen.add(loop.get("pid"))
            own += float(loop.get("process_cpu_s") or 0.0)
    out: dict[str, Any] = {"cores": cores, "wall_s": wall, "load_before": before.get("load"),
                           "load_after": after.get("load"), "our_cores": own / wall,
                           "busy_cores": None, "other_cores": None, "steal_cores": None,
                           "workers": sorted(loops, key=lambda loop: loop.get("rank", 0))}
    b, a = before.get("cpu"), after.get("cpu")
    if a is not None and b is not None:
        busy = a["busy"] - b["busy"]
        out["busy_cores"] = busy / wall
        out["other_cores"] = max(busy - own, 0.0) / wall
        out["steal_cores"] = max(a["steal"] - b["steal"], 0.0) / wall
    for key in ("our_cores", "busy_cores", "other_cores", "steal_cores"):
        if out[key] is not None:
            out[key] = round(out[key], 3)
    out["note"] = note(out)
    return out


def note(state: dict[str, Any] | None) -> str | None:
    """The sentence to show when other processes or steal took a noticeable share of the
    cores (`OTHERS_NOTICEABLE` of them), else None.

    >>> note({"cores": 2, "other_cores": 1.6, "steal_cores": 0.0})
    'other processes used 1.6 of 2 cores during this run: its throughput measures the machine, not the algorithm'
    >>> note({"cores": 2, "other_cores": 0.05, "steal_cores": 0.3})
    'the hypervisor took 0.3 of 2 cores (steal) during this run: its throughput measures the machine, not the algorithm'
    >>> note({"cores": 2, "other_cores": 0.1, "steal_cores": 0.0}) is None
    True
    >>> note({"cores": 2, "other_cores": None, "load_before": 3.1, "load_after": 2.5})
    'the load average was 3.1 before this run on 2 cores (this system does not say who used them)'
    """
    if not state:
        return None
    cores = int(state.get("cores") or 1)
    limit = OTHERS_NOTICEABLE * cores
    others, steal = state.get("other_cores"), state.get("steal_cores")
    tail = "during this run: its throughput measures the machine, not the algorithm"
    if others is None:   # no /proc/stat: only the load says something
        load = state.get("load_before")
        if load is not None and load >= cores * (1 - OTHERS_NOTICEABLE):
            return (f"the load average was {load:.1f} before this run on {cores} cores "
                    f"(this system does not say who used them)")
        return None
    parts = []
    if others >= limit:
        parts.append(f"other processes used {others:.1f} of {cores} cores")
    if steal is not None and steal >= limit:
        parts.append(f"the hypervisor took {steal:.1f} of {cores} cores (steal)")
    return f"{' and '.join(parts)} {tail}" if parts else None
